#pragma once
/// An actor system that knows the grid's message types (add_protocol_types), for tests that
/// spawn actors in this process.

#include <caf/all.hpp>

#include "actors/protocol.hpp"

/// Ends a test that spawns worker actors in the sanitizer build: CAF 0.17's init_fun_factory
/// binds a reference through the null argument tuple of a typed function actor spawned
/// without arguments (the worker actors), and UBSan stops there, inside CAF. The main build
/// runs these tests.
#if defined(__SANITIZE_ADDRESS__)
#define MPAKT_SKIP_ACTOR_TEST_UNDER_SANITIZERS() GTEST_SKIP() << "spawns worker actors, which UBSan stops inside CAF 0.17"
#else
#define MPAKT_SKIP_ACTOR_TEST_UNDER_SANITIZERS() (void)0
#endif

namespace mpakt::test {

struct protocol_system {
  caf::actor_system_config cfg;
  caf::actor_system sys;
  protocol_system() : sys((add_protocol_types(cfg), cfg)) {}
};

}  // namespace mpakt::test
