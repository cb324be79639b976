// The op table: every fixture case of test/fixtures/ops/<op>.json (made from PyTorch and
// transformers by tools/goldens/gen_ops.py) runs through the real parser, validator and
// executor on every backend this build has, and must match within the case's tolerance.
//
// Adding an op = adding its fixture file; adding a backend = adding it to `backends()`.
// A backend that declines a step (kernel() == nullptr) falls back to the reference, so
// NOT_SUPPORTED never fails; everything it does run is checked.

#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <optional>

#include "backends/cpu/cpu_backend.hpp"
#include "backends/cpu/fast/parallel.hpp"
#include "runtime/executor.hpp"
#include "runtime/graph.hpp"
#include "runtime/schema.hpp"
#include "runtime/tensor_store.hpp"
#include "test/support/files.hpp"
#include "test/support/levels.hpp"
#include "test/support/op_fixtures.hpp"

namespace mpakt {
namespace {

using test::fixture_ops;
using test::run_case;

struct backend_entry {
  std::string name;
  std::function<std::unique_ptr<backend>()> make;
  /// The kernel level the entry plans with (the CPU's best unless set): every level this
  /// machine supports gets its own run, so each path is checked, not only the best.
  std::optional<cpu_isa::level> level;
};

std::vector<backend_entry> backends() {
  std::vector<backend_entry> out = {
      {"cpu_ref", [] { return std::make_unique<cpu_backend>(cpu_backend::config{true}); }, {}},
      {"cpu", [] { return std::make_unique<cpu_backend>(); }, {}},
      // the fast kernels splitting their work over two threads
      {"cpu_2threads", [] { return std::make_unique<cpu_backend>(); }, {}},
  };
  for (auto l : cpu_isa::supported_levels())
    if (l != cpu_isa::best())
      out.push_back({"cpu_" + std::string(cpu_isa::level_name(l)), [] { return std::make_unique<cpu_backend>(); }, l});
  return out;
}

class op_table : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(op_table, MatchesGoldens) {
  const auto& [op, backend_name] = GetParam();
  rapidjson::Document doc;
  const std::string text = test::read_file((test::op_fixtures_dir() / (op + ".json")).string());
  doc.Parse(text.c_str());
  ASSERT_FALSE(doc.HasParseError()) << op << ".json is not valid JSON";
  std::unique_ptr<backend> be;
  test::level_guard restore_level;
  for (const auto& b : backends())
    if (b.name == backend_name) {
      be = b.make();
      if (b.level) {
        ASSERT_TRUE(cpu_isa::set_level(*b.level));
      }
    }
  ASSERT_TRUE(be);
  cpu_fast::set_kernel_threads(backend_name == "cpu_2threads" ? 2 : 1);
  int n = 0;
  for (const auto& c : doc["cases"].GetArray()) {
    const std::string failure = run_case(c, *be);
    EXPECT_EQ(failure, "") << op << " on " << backend_name;
    ++n;
  }
  cpu_fast::set_kernel_threads(1);
  EXPECT_GT(n, 0) << op << " has no cases";
  RecordProperty("cases", n);
}

std::vector<std::tuple<std::string, std::string>> table_params() {
  std::vector<std::tuple<std::string, std::string>> out;
  for (const auto& op : fixture_ops())
    for (const auto& b : backends()) out.emplace_back(op, b.name);
  return out;
}

INSTANTIATE_TEST_SUITE_P(ops, op_table, ::testing::ValuesIn(table_params()),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

TEST(op_table_coverage, EverySchemaOpHasGoldenRows) {
  const auto ops = fixture_ops();
  for (const auto& spec : schema::instance().ops())
    EXPECT_NE(std::find(ops.begin(), ops.end(), spec.name), ops.end()) << "no fixture file for op " << spec.name;
}

}  // namespace
}  // namespace mpakt
