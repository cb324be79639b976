// The typed replies written as JSON (http/api/render.hpp): field names, their order, what is
// left out or null, and numbers as the API reference shows them.

#include "http/api/render.hpp"

#include <gtest/gtest.h>

namespace mpakt::http {
namespace {

TEST(Render, InspectKeepsTheSpecsFieldOrder) {
  inspect_model_reply r;
  r.total_bytes = 4100;
  r.dtypes = {{"bf16", 1}, {"f32", 1}};
  r.tensors = {{"a.weight", {64, 32}, "bf16", 4096}, {"b", {1}, "f32", 4}};
  EXPECT_EQ(render(r),
            R"({"count":2,"totalBytes":4100,"dtypes":{"bf16":1,"f32":1},"tensors":[)"
            R"({"name":"a.weight","shape":[64,32],"dtype":"bf16","bytes":4096},)"
            R"({"name":"b","shape":[1],"dtype":"f32","bytes":4}],"sharded":false,"shards":[]})");
  r.sharded = true;
  r.shards = {"s0.safetensors", "s1.safetensors"};
  EXPECT_NE(render(r).find(R"("sharded":true,"shards":["s0.safetensors","s1.safetensors"]})"), std::string::npos);
}

TEST(Render, LoadShowsRevisionAndLayersOnlyWhereTheyApply) {
  load_model_reply r;
  r.model_id = "m_1";
  r.source = "local:x";
  r.tensors = {{"w", "t_1"}};
  r.bytes_transferred = 8;
  r.throughput_mbs = 0.5;
  r.quantize = "none";
  r.resident_bytes = 8;
  r.coordinator_peak_bytes = 8;
  r.elapsed_ms = 3;
  r.placement = {{"w1", 1, 8, {"0-3"}}};
  EXPECT_EQ(render(r), R"({"modelId":"m_1","source":"local:x","tensors":[{"name":"w","tensorId":"t_1"}],)"
                       R"("bytesTransferred":8,"throughputMBs":0.5,"storedOnCoordinator":0,"quantize":"none","kvDtype":"f32",)"
                       R"("residentBytes":8,"coordinatorPeakBytes":8,"elapsedMs":3,)"
                       R"("placement":[{"workerId":"w1","tensors":1,"residentBytes":8}]})");
  r.hub = true;
  r.revision = "main";
  r.spread = true;
  const std::string spread = render(r);
  EXPECT_NE(spread.find(R"("source":"local:x","revision":"main","commit":null,"tensors")"), std::string::npos) << spread;
  EXPECT_NE(spread.find(R"("residentBytes":8,"layers":["0-3"]}])"), std::string::npos) << spread;
}

TEST(Render, ModelListWithCapacity) {
  list_models_reply r;
  r.models = {{"m_1", "hf:o/m", "", 2, 10, 12, "q8", true, {{"w1", 2, 12, {}}}, "2026-01-01T00:00:00Z"}};
  r.workers = 1;
  r.free_bytes = 5;
  r.total_bytes = 17;
  EXPECT_EQ(render(r), R"({"models":[{"modelId":"m_1","source":"hf:o/m","commit":null,"tensors":2,"bytesTransferred":10,)"
                       R"("residentBytes":12,"quantize":"q8","kvDtype":"f32","whole":true,)"
                       R"("placement":[{"workerId":"w1","tensors":2,"residentBytes":12}],"createdAt":"2026-01-01T00:00:00Z"}],)"
                       R"("capacity":{"workers":1,"freeBytes":5,"totalBytes":17,"byteUnits":"resident"}})");
}

TEST(Render, SessionsLeaveOutWhatIsEmpty) {
  EXPECT_EQ(render(open_session_reply{"s_1", "", "", "t"}), R"({"session":{"sessionId":"s_1","createdAt":"t"}})");
  EXPECT_EQ(render(open_session_reply{"s_1", "m_1", "chat", "t"}),
            R"({"session":{"sessionId":"s_1","modelId":"m_1","label":"chat","createdAt":"t"}})");
  session_state_reply s{"s_1", "m_1", "", "t", {{"k", {2, 3}, "f32", 24}}, 24, 7};
  EXPECT_EQ(render(s), R"({"sessionId":"s_1","modelId":"m_1","createdAt":"t",)"
                       R"("tensors":[{"name":"k","shape":[2,3],"dtype":"f32","bytes":24}],"bytes":24,"steps":7})");
  EXPECT_EQ(render(checkpoint_reply{"s_1", 1, 24, 7}), R"({"sessionId":"s_1","tensors":1,"bytes":24,"step":7})");
}

TEST(Render, GraphsAndTensors) {
  compile_graph_reply c{"gt_1", "", 3, {"pos"}, 100, 30, {"cache"}};
  EXPECT_EQ(render(c), R"({"graphId":"gt_1","steps":3,"bindings":["pos"],"bodyBytes":100,"perCallBytes":30,)"
                       R"("savedPerCall":70,"features":["cache"]})");
  list_graphs_reply l{{{"gt_1", "", 3, {}, 100, 30, "t"}}};
  EXPECT_EQ(render(l), R"({"graphs":[{"graphId":"gt_1","label":"","steps":3,"bindings":[],"bodyBytes":100,)"
                       R"("perCallBytes":30,"createdAt":"t"}]})");
  EXPECT_EQ(render(upload_tensor_reply{"t_1", {2}, 8}), R"({"tensorId":"t_1","shape":[2],"bytes":8})");
}

TEST(Render, DeletionsNameTheirId) {
  EXPECT_EQ(render(deleted_reply{"model", "m_1"}), R"({"deleted":true,"modelId":"m_1"})");
  EXPECT_EQ(render(deleted_reply{"key", "k_1"}), R"({"deleted":true,"keyId":"k_1"})");
}

TEST(Render, Accounts) {
  EXPECT_EQ(render(account_reply{"ann", "pending", "t"}), R"({"username":"ann","status":"pending","createdAt":"t"})");
  EXPECT_EQ(render(account_reply{"ann", "approved", ""}), R"({"username":"ann","status":"approved"})");
  EXPECT_EQ(render(login_reply{"mpv_x", "ann"}), R"({"token":"mpv_x","username":"ann"})");
  EXPECT_EQ(render(key_reply{"mpk_x", "k_1", "", "t", "", "active"}),
            R"({"key":"mpk_x","keyId":"k_1","label":"","createdAt":"t","state":"active"})");
  EXPECT_EQ(render(keys_reply{{{"", "k_1", "ci", "t", "u", "revoked"}}}),
            R"({"keys":[{"keyId":"k_1","label":"ci","createdAt":"t","lastUsedAt":"u","state":"revoked"}]})");
}

TEST(Render, StatusSumsThePoolAndHidesWhatIsNotTheCallers) {
  status_reply r;
  worker_view w;
  w.worker_id = "w1";
  w.backend = "cpu";
  w.free_bytes = 10;
  w.total_bytes = 20;
  w.features = {"cache", "f16"};
  w.kernels = "avx2";
  w.cpu = "x";
  w.busy_since_ms = 1000;
  w.busy_ms = 5;
  w.busy_graph = "inline";
  w.models = {"m_1"};
  r.pool = {w};
  w.worker_id = "w2";
  w.features = {"f16"};
  w.busy_since_ms = 0;
  w.checked = true;
  w.data_link = "up";
  w.data_link_bytes = 1234;
  w.models = {};
  r.pool.push_back(w);
  r.quarantined = {{"w3", "vol", "differed", 0}};
  const std::string s = render(r);
  EXPECT_EQ(s.rfind(R"({"workers":2,"backends":{"cpu":2,"npu":0,"npu+webgpu":0,"webgpu":0},"ops":)", 0), 0u) << s;
  EXPECT_NE(s.find(R"("features":["f16"],"freeBytes":20,"totalBytes":40,"byteUnits":"resident","generations":0,)"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find(R"("measuredMs":null,"kernels":"avx2","cpu":"x","threads":1,"busy":{"since":"1970-01-01T00:00:01.000Z",)"
                   R"("forMs":5,"graph":"inline","compiling":false,"stepsDone":0,"steps":0},"queued":0,"checks":null,)"
                   R"("dataLink":null,"models":["m_1"]})"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find(R"("busy":null,"queued":0,"checks":{"passed":0,"unchecked":0,"inconclusive":0,"firstLeft":0,)"
                   R"("exact":false,"weightsChecked":0,"weightsUnchecked":0},"dataLink":{"state":"up","bytes":1234},"models":[]})"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find(R"("quarantined":[{"workerId":"w3","volunteer":"vol","reason":"differed","at":"1970-01-01T00:00:00.000Z"}]})"),
            std::string::npos)
      << s;
}

}  // namespace
}  // namespace mpakt::http
