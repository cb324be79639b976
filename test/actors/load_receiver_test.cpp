// The worker's receiver (actors/worker/load_receiver.hpp) builds the tensors it is sent in the
// form the worker's kernels read: a q8/q4 matrix whose rows come in groups of 16 is held in
// lanes when the backend reads lanes (worker_shared::lanes), in rows otherwise — the same
// values either way.

#include "actors/worker/load_receiver.hpp"

#include <gtest/gtest.h>

#include <caf/all.hpp>

#include <chrono>
#include <cstring>
#include <random>
#include <string>

#include "actors/errors.hpp"
#include "actors/protocol.hpp"
#include "actors/worker/worker_shared.hpp"
#include "runtime/dtype.hpp"
#include "runtime/tensor.hpp"
#include "test/support/actors.hpp"

namespace mpakt {
namespace {

using namespace std::chrono_literals;

TEST(LoadReceiver, QuantizedMatricesAreHeldInLanesWhereTheWorkerReadsLanes) {
  MPAKT_SKIP_ACTOR_TEST_UNDER_SANITIZERS();
  test::protocol_system actors;
  caf::actor_system& sys = actors.sys;
  caf::scoped_actor me{sys};
  auto fail = [](caf::error& e) { FAIL() << from_caf(e).message; };
  std::mt19937 rng(3);
  for (bool lanes : {false, true}) {
    worker_config wc;
    wc.worker_id = "w_recv";
    wc.memory_bytes = 1 << 24;
    auto shared = std::make_shared<worker_shared>(wc);
    shared->lanes = lanes;
    auto receiver = spawn_load_receiver(sys, shared, compute_actor());
    // a matrix lanes fit (48 rows) and one they do not (40 rows); q8 and q4; two pieces each
    for (const shape_t& shape : {shape_t{48, 64}, shape_t{40, 64}})
      for (dtype q : {dtype::q8, dtype::q4}) {
        const std::string name = "w" + std::to_string(shape[0]) + std::string(dtype_name(q));
        std::string bytes(std::size_t(shape_numel(shape)) * 2, '\0');
        for (std::size_t i = 0; i < bytes.size(); i += 2) {
          const std::uint16_t h = f32_to_bf16(std::normal_distribution<float>(0, 0.5f)(rng));
          std::memcpy(&bytes[i], &h, 2);
        }
        me->request(receiver, 10s, tbegin_atom::value,
                    tensor_begin_request{"m", name, "BF16", shape, std::string(dtype_name(q)), bytes.size()})
            .receive([](bool) {}, fail);
        const std::size_t cut = bytes.size() / 3 + 5;  // (mid-row)
        for (auto [off, len] : {std::pair{std::size_t(0), cut}, std::pair{cut, bytes.size() - cut}})
          me->request(receiver, 10s, tpiece_atom::value, tensor_piece{"m", name, off, bytes.substr(off, len)})
              .receive([](std::uint64_t) {}, fail);
        me->request(receiver, 10s, tend_atom::value, std::string("m"), name).receive([](std::uint64_t) {}, fail);

        auto whole = tensor::make(dtype::bf16, shape);
        ASSERT_TRUE(whole.ok());
        std::memcpy(whole->data(), bytes.data(), bytes.size());
        auto want = convert_tensor(*whole, q);
        ASSERT_TRUE(want.ok());
        const bool in_lanes = lanes && lanes_fit(q, shape);
        if (in_lanes) {
          ASSERT_TRUE(want->to_lanes16().ok());
        }
        std::lock_guard<std::mutex> lock(shared->m);
        ASSERT_FALSE(shared->inbox.empty());
        const tensor& got = shared->inbox.back().t;
        EXPECT_EQ(shared->inbox.back().name, name);
        EXPECT_EQ(got.lanes16(), in_lanes) << name << (lanes ? " on a worker reading lanes" : "");
        ASSERT_EQ(got.nbytes(), want->nbytes());
        EXPECT_EQ(std::memcmp(got.data(), want->data(), got.nbytes()), 0) << name;
      }
    anon_send_exit(receiver, caf::exit_reason::user_shutdown);
  }
}

}  // namespace
}  // namespace mpakt
