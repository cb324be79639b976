// How a spot-check compares a volunteer's graph answer with the verifier's
// (actors/coordinator/checked_worker.hpp): bit for bit on the same kernel path, within 1 % of
// an output's scale otherwise, base64 and JSON numbers alike.

#include "actors/coordinator/checked_worker.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "actors/errors.hpp"
#include "actors/worker/worker_actor.hpp"
#include "runtime/graph.hpp"
#include "test/support/actors.hpp"

namespace mpakt {
namespace {

std::string b64(std::vector<float> v) {
  std::string raw(v.size() * 4, '\0');
  std::memcpy(raw.data(), v.data(), raw.size());
  static const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (std::size_t i = 0; i < raw.size(); i += 3) {
    const unsigned a = static_cast<unsigned char>(raw[i]);
    const unsigned b = i + 1 < raw.size() ? static_cast<unsigned char>(raw[i + 1]) : 0;
    const unsigned c = i + 2 < raw.size() ? static_cast<unsigned char>(raw[i + 2]) : 0;
    out += alphabet[a >> 2];
    out += alphabet[((a & 3) << 4) | (b >> 4)];
    out += i + 1 < raw.size() ? alphabet[((b & 15) << 2) | (c >> 6)] : '=';
    out += i + 2 < raw.size() ? alphabet[c & 63] : '=';
  }
  return out;
}

TEST(checked_worker, SameKernelPathMeansEqualBits) {
  const std::string a = R"({"y":{"shape":[3],"data":[1.5,-2,100]}})";
  std::string why;
  EXPECT_TRUE(answers_agree(a, a, 0, &why));
  EXPECT_FALSE(answers_agree(a, R"({"y":{"shape":[3],"data":[1.5,-2,100.0001]}})", 0, &why));
  EXPECT_NE(why.find("y[2]"), std::string::npos) << why;
  EXPECT_NE(why.find("must be equal"), std::string::npos) << why;
  // the same numbers written differently are the same answer
  EXPECT_TRUE(answers_agree(a, R"({"y":{"shape":[3],"data":[1.50,-2.0,1e2]}})", 0, &why));
  // base64 and JSON numbers of the same values
  EXPECT_TRUE(answers_agree(a, R"({"y":{"shape":[3],"dataB64":")" + b64({1.5f, -2.0f, 100.0f}) + R"("}})", 0, &why));
  // NaN (written as null) equals NaN
  EXPECT_TRUE(answers_agree(R"({"m":{"shape":[1],"data":[null]}})", R"({"m":{"shape":[1],"data":[null]}})", 0, &why));
}

TEST(checked_worker, OtherKernelPathsAgreeWithinTheirToleranceOfTheScale) {
  const std::string verifier = R"({"y":{"shape":[3],"data":[1.5,-2,100]}})";
  std::string why;
  // 0.9 off on a value of 1.5: within 1 % of the output's largest magnitude (100)
  EXPECT_TRUE(answers_agree(R"({"y":{"shape":[3],"data":[2.4,-2,100]}})", verifier, 0.01f, &why)) << why;
  EXPECT_FALSE(answers_agree(R"({"y":{"shape":[3],"data":[2.6,-2,100]}})", verifier, 0.01f, &why));
  EXPECT_NE(why.find("y[0]"), std::string::npos) << why;
  EXPECT_NE(why.find("another kernel path"), std::string::npos) << why;
}

TEST(checked_worker, TheToleranceComesFromTheWeightsDtype) {
  // f32/f16 weights: kernel paths agree to ~1e-5 of the scale (measured), so 1e-3 catches what
  // 1 % would let through; bf16: a prefill's products round activations to bf16, which turns
  // the paths' f32 rounding into bf16 steps here and there — up to ~0.45 % of the scale
  // (measured); q8/q4: a many-row product's int8 activations on one path against int16 on
  // another move logits by up to ~2.3 % of the scale, which must not be a lie
  EXPECT_EQ(path_tolerance("f32"), path_tolerance("f16"));
  EXPECT_LT(path_tolerance("f32"), path_tolerance("bf16"));
  EXPECT_LT(path_tolerance("bf16"), path_tolerance("q8"));
  EXPECT_EQ(path_tolerance("q4"), path_tolerance("q8"));
  const std::string verifier = R"({"y":{"shape":[3],"data":[1.5,-2,100]}})";
  const std::string off_half_percent = R"({"y":{"shape":[3],"data":[2.0,-2,100]}})";
  const std::string off_three_percent = R"({"y":{"shape":[3],"data":[4.5,-2,100]}})";
  const std::string off_five_percent = R"({"y":{"shape":[3],"data":[6.5,-2,100]}})";
  std::string why;
  EXPECT_FALSE(answers_agree(off_half_percent, verifier, path_tolerance("f32"), &why));
  EXPECT_FALSE(answers_agree(off_half_percent, verifier, path_tolerance("f16"), &why));
  EXPECT_TRUE(answers_agree(off_half_percent, verifier, path_tolerance("bf16"), &why)) << why;
  EXPECT_FALSE(answers_agree(off_five_percent, verifier, path_tolerance("bf16"), &why));
  EXPECT_TRUE(answers_agree(off_half_percent, verifier, path_tolerance("q8"), &why)) << why;
  EXPECT_TRUE(answers_agree(off_three_percent, verifier, path_tolerance("q4"), &why)) << why;
}

TEST(checked_worker, DifferentShapesNamesOrGarbageNeverAgree) {
  const std::string v = R"({"y":{"shape":[2],"data":[1,2]}})";
  std::string why;
  EXPECT_FALSE(answers_agree(R"({"y":{"shape":[1,2],"data":[1,2]}})", v, 0.08f, &why));
  EXPECT_FALSE(answers_agree(R"({"z":{"shape":[2],"data":[1,2]}})", v, 0.08f, &why));
  EXPECT_FALSE(answers_agree(R"({"y":{"shape":[2],"data":[1,2]},"z":{"shape":[1],"data":[0]}})", v, 0.08f, &why));
  EXPECT_FALSE(answers_agree("not json", v, 0.08f, &why));
  EXPECT_FALSE(answers_agree(R"({"y":{"shape":[2],"data":[1]}})", v, 0.08f, &why));
  // a hostile volunteer's answer nested a million deep is refused, not recursed into
  const std::string deep = "{\"y\":" + std::string(1'000'000, '[') + std::string(1'000'000, ']') + "}";
  EXPECT_FALSE(answers_agree(deep, v, 0.08f, &why));
  EXPECT_EQ(why, "an answer is not an outputs object");
}

TEST(checked_worker, TheVerifiersShareOneBudget) {
  verify_budget b(100);
  EXPECT_TRUE(b.take(60));
  EXPECT_FALSE(b.take(41));  // (one verifier's copy must not crowd the coordinator out)
  EXPECT_TRUE(b.take(40));
  EXPECT_EQ(b.used(), 100u);
  b.give(60);
  EXPECT_EQ(b.used(), 40u);
  b.give(1000);  // (never below zero)
  EXPECT_EQ(b.used(), 0u);
  EXPECT_FALSE(b.take(~std::uint64_t(0)));
}

// What a volunteer's checked windows hold for its verifier (docs/decisions.md, "Spot-checks:
// windows"): passes and answers within its own room and the room all volunteers share; a
// session copy as well, except that a copy is taken whatever its size while no other copy is
// held (in its room; in the shared one, no volunteer's), so a session larger than the room is
// still checked while the verifier keeps up; what a room still holds when it goes is given
// back to the shared one.
TEST(checked_worker, AVolunteersQueueHasARoomOfItsOwnAndOneForAll) {
  auto all = std::make_shared<verify_budget>(250);
  {
    verify_room a(100, all), b(100, all);
    EXPECT_FALSE(a.take(101)) << "a pass larger than its own room";
    EXPECT_TRUE(a.take(50));
    EXPECT_TRUE(a.take_copy(180)) << "a copy larger than the room, while no copy is held";
    EXPECT_EQ(a.held(), 230u);
    EXPECT_FALSE(a.take(1)) << "its room is past full";
    EXPECT_FALSE(a.take_copy(1)) << "a second copy waits for room like anything else";
    EXPECT_TRUE(b.take(20));
    EXPECT_FALSE(b.take(1)) << "the room for all: 230 + 20 of 250";
    EXPECT_FALSE(b.take_copy(10)) << "b holds no copy, but a does: none past the room for all";
    a.give_copy(180);
    EXPECT_EQ(all->used(), 70u);
    EXPECT_TRUE(b.take_copy(90));
    EXPECT_FALSE(b.take_copy(20)) << "b's room: 20 + 90 of 100, a copy held";
    verify_room c(100, all);
    EXPECT_FALSE(c.take_copy(100)) << "c holds no copy, but b does: none past the room for all";
    EXPECT_TRUE(c.take_copy(90));
    EXPECT_EQ(all->used(), 250u);
    b.give_copy(90);
    b.give(20);
    EXPECT_EQ(b.held(), 0u);
    b.give(5);  // (never below zero, nor more given to the room for all than b held)
    EXPECT_EQ(b.held(), 0u);
    EXPECT_EQ(all->used(), 140u);
    EXPECT_TRUE(a.take(20));
    EXPECT_FALSE(a.take(~std::uint64_t(0)));
  }
  EXPECT_EQ(all->used(), 0u) << "what the rooms held when they went is given back";
  verify_room alone(100, nullptr);  // (no room for all: the own room alone)
  EXPECT_TRUE(alone.take(100));
  EXPECT_FALSE(alone.take(1));
  EXPECT_TRUE(alone.take_copy(1000)) << "no copy held: taken past the room";
  EXPECT_FALSE(alone.take_copy(1));
}

TEST(checked_worker, TheQuarantineRegistryRemembersTokens) {
  quarantine_registry r;
  EXPECT_FALSE(r.has_digest("d1"));
  r.add({"w_a", "hostA", "a graph call's answer differs", 1, "d1"});
  EXPECT_TRUE(r.has_digest("d1"));
  EXPECT_FALSE(r.has_digest("d2"));
  ASSERT_EQ(r.list().size(), 1u);
  EXPECT_EQ(r.list()[0].volunteer, "hostA");
}

// A caller of the checked worker must not wait out its own timeout when the volunteer it
// stands in for goes while the call is with the volunteer: the stand-in ends on that loss, and
// what it still owed is answered then (a volunteer declared dead by the cluster link's
// heartbeat, say, whose in-flight answers never come).
TEST(checked_worker, CallersHearAtOnceWhenTheVolunteerGoes) {
  MPAKT_SKIP_ACTOR_TEST_UNDER_SANITIZERS();
  using namespace std::chrono_literals;
  test::protocol_system actors;
  caf::actor_system& sys = actors.sys;
  // A volunteer that takes every status call and never answers it. (Spawned with an argument:
  // CAF 0.17 dereferences a null argument tuple for a function actor spawned with none.)
  auto silent = sys.spawn(
      [](caf::event_based_actor* self, int) -> caf::behavior {
        auto held = std::make_shared<std::vector<caf::response_promise>>();
        return {[=](status_atom) { held->push_back(self->make_response_promise()); }};
      },
      0);
  auto checked = spawn_checked_worker(sys, {caf::actor_cast<worker_actor>(silent), "hostA", "d1", {}}, verify_config{},
                                      std::make_shared<quarantine_registry>());
  std::thread leaves([&] {
    std::this_thread::sleep_for(300ms);  // (the call is with the volunteer by then)
    caf::anon_send_exit(silent, caf::exit_reason::kill);
  });
  caf::scoped_actor me{sys};
  const auto t0 = std::chrono::steady_clock::now();
  std::string outcome;
  me->request(checked, 20s, status_atom::value)
      .receive([&](worker_status&) { outcome = "answered"; }, [&](caf::error& e) { outcome = from_caf(e).message; });
  const auto waited = std::chrono::steady_clock::now() - t0;
  leaves.join();
  EXPECT_NE(outcome.find("hostA left the grid"), std::string::npos) << outcome;
  EXPECT_LT(waited, 10s);
}


// A volunteer's copy of a session that no worker writes is itself the lie (its verifier could
// not start a window from it, which would leave the window unchecked): an unknown dtype, an
// invalid shape, bytes that are not its shape's size, a tensor twice.
TEST(checked_worker, AMalformedCopyOfASessionIsNamed) {
  session_dump d;
  d.tensors = {{"k0", {2, 3}, "f32", std::string(24, '\0')}, {"v0", {4}, "bf16", std::string(8, '\0')},
               {"pos", {1}, "f16", std::string(2, '\0')}, {"q", {2, 32}, "q8", std::string(68, '\0')}};
  EXPECT_EQ(malformed_copy(d), "");
  EXPECT_EQ(malformed_copy(session_dump{}), "");
  auto bad = [&](auto change) {
    session_dump c = d;
    change(c);
    return malformed_copy(c);
  };
  EXPECT_NE(bad([](session_dump& c) { c.tensors[1].dtype = "f128"; }).find("v0 has an unknown dtype"), std::string::npos);
  EXPECT_NE(bad([](session_dump& c) { c.tensors[0].bytes.resize(20); }).find("k0 carries 20 bytes for a shape of 24"),
            std::string::npos);
  EXPECT_NE(bad([](session_dump& c) { c.tensors[0].shape = {2, -3}; }).find("k0 has an invalid shape"), std::string::npos);
  EXPECT_NE(bad([](session_dump& c) { c.tensors[0].shape = {std::int64_t(1) << 62, 8}; }).find("k0 has an invalid shape"),
            std::string::npos);
  EXPECT_NE(bad([](session_dump& c) { c.tensors[3].shape = {2, 30}; }).find("q has an invalid shape"),
            std::string::npos);  // (q8 rows are whole blocks of 32)
  EXPECT_NE(bad([](session_dump& c) { c.tensors.push_back(c.tensors[2]); }).find("pos twice"), std::string::npos);
}

// A worker restoring a copy reads its form first (malformed_copy, as the spot-checks do): a
// tensor whose shape claims far more than its bytes is refused, naming it, before anything is
// allocated for that shape; a well-formed copy is restored and copied back as it was.
TEST(checked_worker, AWorkerRestoresOnlyAWellFormedCopy) {
  MPAKT_SKIP_ACTOR_TEST_UNDER_SANITIZERS();
  using namespace std::chrono_literals;
  test::protocol_system actors;
  worker_config wc;
  wc.worker_id = "w_restore";
  wc.memory_bytes = 1 << 20;
  auto w = spawn_worker(actors.sys, wc);
  caf::scoped_actor me{actors.sys};
  session_dump bad;
  bad.tensors = {{"k0", {std::int64_t(1) << 40}, "f32", std::string(8, '\0')}};
  me->request(w, 5s, sload_atom::value, std::string("s_bad"), bad)
      .receive([&](bool) { FAIL() << "a copy whose shape its bytes do not fill was restored"; },
               [&](caf::error& e) {
                 const auto err = from_caf(e);
                 EXPECT_EQ(err.code, errc::invalid);
                 EXPECT_NE(err.message.find("the copy of session s_bad to restore is malformed: its tensor k0 carries 8 bytes"),
                           std::string::npos)
                     << err.message;
               });
  session_dump good;
  good.tensors = {{"k0", {2}, "f32", std::string("\0\0\x80\x3f\0\0\0\x40", 8)}};
  me->request(w, 5s, sload_atom::value, std::string("s_good"), good)
      .receive([&](bool ok) { EXPECT_TRUE(ok); }, [&](caf::error& e) { FAIL() << from_caf(e).message; });
  me->request(w, 5s, sdump_atom::value, std::string("s_good"))
      .receive(
          [&](session_dump& d) {
            ASSERT_EQ(d.tensors.size(), 1u);
            EXPECT_EQ(d.tensors[0].bytes, good.tensors[0].bytes);
            EXPECT_EQ(d.tensors[0].shape, good.tensors[0].shape);
          },
          [&](caf::error& e) { FAIL() << from_caf(e).message; });
}

TEST(checked_worker, SessionsAgreeTensorByTensor) {
  auto f32 = [](std::vector<float> v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  };
  session_dump verifier;
  verifier.tensors = {{"k0", {2, 2}, "f32", f32({1, 2, 3, 100})}, {"ids", {1}, "i32", std::string("\x05\0\0\0", 4)}};
  session_dump same = verifier;
  std::reverse(same.tensors.begin(), same.tensors.end());  // (order does not matter)
  std::string why;
  EXPECT_TRUE(sessions_agree(same, verifier, 0, &why)) << why;
  // one value changed: never on the same kernel path; within the tolerance of the scale on another
  session_dump nudged = verifier;
  nudged.tensors[0].bytes = f32({1, 2.05f, 3, 100});
  EXPECT_FALSE(sessions_agree(nudged, verifier, 0, &why));
  EXPECT_NE(why.find("k0"), std::string::npos) << why;
  EXPECT_TRUE(sessions_agree(nudged, verifier, path_tolerance("f32"), &why)) << why;
  nudged.tensors[0].bytes = f32({1, 2.5f, 3, 100});
  EXPECT_FALSE(sessions_agree(nudged, verifier, path_tolerance("f32"), &why));
  EXPECT_NE(why.find("k0[1]"), std::string::npos) << why;
  // a bf16 cache (rounded from f32 values that differ a little between paths) compares
  // widened, as f32 does: one step of bf16 apart agrees on another path, never on the same one
  auto bf16s = [](std::vector<std::uint16_t> v) {
    return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(std::uint16_t));
  };
  session_dump half_v = verifier, half_theirs = verifier;
  half_v.tensors[0] = {"k0", {2, 2}, "bf16", bf16s({0x3f80, 0x4000, 0x4040, 0x42c8})};  // 1, 2, 3, 100
  half_theirs.tensors[0] = {"k0", {2, 2}, "bf16", bf16s({0x3f80, 0x4001, 0x4040, 0x42c8})};  // 2 → 2.015625
  EXPECT_FALSE(sessions_agree(half_theirs, half_v, 0, &why));
  EXPECT_TRUE(sessions_agree(half_theirs, half_v, path_tolerance("f32"), &why)) << why;
  half_theirs.tensors[0].bytes = bf16s({0x3f80, 0x4080, 0x4040, 0x42c8});  // 2 → 4: 2 % of the scale
  EXPECT_FALSE(sessions_agree(half_theirs, half_v, path_tolerance("f32"), &why));
  EXPECT_NE(why.find("k0[1]"), std::string::npos) << why;
  // tensors that are not floats must be equal whatever the path; missing or reshaped ones never agree
  session_dump other_id = verifier;
  other_id.tensors[1].bytes = std::string("\x06\0\0\0", 4);
  EXPECT_FALSE(sessions_agree(other_id, verifier, path_tolerance("q8"), &why));
  session_dump missing = verifier;
  missing.tensors.pop_back();
  EXPECT_FALSE(sessions_agree(missing, verifier, path_tolerance("q8"), &why));
  session_dump reshaped = verifier;
  reshaped.tensors[0].shape = {4, 1};
  EXPECT_FALSE(sessions_agree(reshaped, verifier, path_tolerance("q8"), &why));
}

}  // namespace
}  // namespace mpakt
