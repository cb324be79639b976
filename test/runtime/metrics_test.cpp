#include "runtime/metrics.hpp"

#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <vector>

namespace mpakt::metrics {
namespace {

TEST(Metrics, CounterFamilyRendersHelpTypeAndOneLinePerLabelSet) {
  family<counter> f("test_things_total", "Things, by colour", kind::counter, {"colour"});
  f.with({"red"}).inc();
  f.with({"red"}).inc(2);
  f.with({"blue \"sky\"\n"}).inc();
  std::string out;
  f.render(out);
  EXPECT_EQ(out,
            "# HELP test_things_total Things, by colour\n"
            "# TYPE test_things_total counter\n"
            "test_things_total{colour=\"blue \\\"sky\\\"\\n\"} 1\n"
            "test_things_total{colour=\"red\"} 3\n");
}

TEST(Metrics, UnlabelledCounterShowsZeroBeforeItsFirstIncrement) {
  family<counter> f("test_zero_total", "Nothing yet", kind::counter, {});
  std::string out;
  f.render(out);
  EXPECT_NE(out.find("\ntest_zero_total 0\n"), std::string::npos) << out;
}

TEST(Metrics, HistogramBucketsAreCumulativeWithInfSumAndCount) {
  family<histogram> f("test_seconds", "Durations", kind::histogram, {"route"}, {0.1, 1});
  auto& h = f.with({"/x"});
  h.observe(0.05);
  h.observe(0.1);  // on a bound: counted in it (le)
  h.observe(0.5);
  h.observe(7);
  std::string out;
  f.render(out);
  EXPECT_NE(out.find("test_seconds_bucket{route=\"/x\",le=\"0.10000000000000001\"} 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("test_seconds_bucket{route=\"/x\",le=\"1\"} 3\n"), std::string::npos) << out;
  EXPECT_NE(out.find("test_seconds_bucket{route=\"/x\",le=\"+Inf\"} 4\n"), std::string::npos) << out;
  EXPECT_NE(out.find("test_seconds_sum{route=\"/x\"} 7.6500000000000004\n"), std::string::npos) << out;
  EXPECT_NE(out.find("test_seconds_count{route=\"/x\"} 4\n"), std::string::npos) << out;
}

TEST(Metrics, CountsFromManyThreadsAddUp) {
  family<counter> f("test_threads_total", "Concurrent", kind::counter, {"t"});
  std::vector<std::thread> ts;
  for (int i = 0; i < 4; ++i)
    ts.emplace_back([&] {
      for (int j = 0; j < 10000; ++j) f.with({"x"}).inc();
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(f.with({"x"}).value(), 40000);
}

TEST(Metrics, EveryProcessMetricIsListedOnceWithConventionalNames) {
  std::set<std::string> names;
  for (const auto* f : m().all()) {
    EXPECT_TRUE(names.insert(f->name()).second) << f->name() << " is listed twice";
    EXPECT_EQ(f->name().rfind("mpakt_", 0), 0u) << f->name();
  }
  EXPECT_EQ(names.size(), 26u);  // (a member missing from all() would not be served)
  const std::string text = render();
  EXPECT_NE(text.find("# TYPE mpakt_tokens_generated_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE mpakt_http_request_duration_seconds histogram\n"), std::string::npos);
}

}  // namespace
}  // namespace mpakt::metrics
