// Windows of a volunteer's later passes (actors/coordinator/check_windows.hpp): every pass on a
// session lies in a window, windows open and close (each with its sessions dumped) the same way
// whether they are checked or not, and a pass across windows waits until they are quiet.

#include "actors/coordinator/check_windows.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace mpakt {
namespace {

std::set<std::string> set_of(std::initializer_list<const char*> names) {
  std::set<std::string> out;
  for (const char* n : names) out.insert(n);
  return out;
}

TEST(check_windows, AFirstPassOnASessionOpensAWindowBeginningWithItsDump) {
  check_windows w(0.5, 1e6, 1);
  auto a = w.admit({"s1"});
  ASSERT_TRUE(a.into);
  ASSERT_TRUE(a.turned);
  EXPECT_TRUE(a.turned->closed.empty());
  EXPECT_EQ(a.turned->opened, a.into);
  EXPECT_EQ(a.into->sessions, set_of({"s1"}));
  EXPECT_EQ(a.into->in_flight, 1u);
  // the next passes join it, with no dump, for as long as it lasts
  EXPECT_FALSE(w.answered(a.into));
  for (int i = 0; i < 100; ++i) {
    auto b = w.admit({"s1"});
    ASSERT_EQ(b.into, a.into);
    EXPECT_FALSE(b.turned);
    EXPECT_FALSE(w.answered(b.into));
  }
  EXPECT_EQ(a.into->passes, 101u);
  EXPECT_EQ(w.open_windows(), 1u);
}

TEST(check_windows, AWindowsLastPassIsAnsweredBeforeTheNextOneOpensAndThePassesBetweenWait) {
  check_windows w(1, 1, 7);  // (every window one pass long)
  auto first = w.admit({"s"});
  ASSERT_TRUE(first.into);
  EXPECT_TRUE(first.into->closing);
  // a pass sent while the last one is on its way waits
  EXPECT_FALSE(w.admit({"s"}).into);
  // its answer closes the window: the session is dumped (ending it, beginning the next)
  auto t = w.answered(first.into);
  ASSERT_TRUE(t);
  ASSERT_EQ(t->closed.size(), 1u);
  EXPECT_EQ(t->closed.front(), first.into);
  ASSERT_TRUE(t->opened);
  EXPECT_EQ(t->opened->sessions, set_of({"s"}));
  EXPECT_NE(t->opened, first.into);
  // the waiting pass, admitted again, goes into the new window without another dump
  auto again = w.admit({"s"});
  EXPECT_EQ(again.into, t->opened);
  EXPECT_FALSE(again.turned);
}

TEST(check_windows, APassAcrossWindowsWaitsForThemThenOneWindowTakesAllTheirSessions) {
  check_windows w(0, 1e6, 3);
  auto a = w.admit({"a"});
  auto b = w.admit({"b"});
  ASSERT_NE(a.into, b.into);
  EXPECT_FALSE(w.answered(a.into));
  // b's pass is on its way: the pass on both waits (and both windows stop taking passes)
  EXPECT_FALSE(w.admit({"a", "b"}).into);
  EXPECT_TRUE(w.of("a")->closing && w.of("b")->closing);
  // once b's is answered, b's window closes and another opens over b; admitted again, the pass
  // on both closes that and a's, and one window opens over both
  auto tb = w.answered(b.into);
  ASSERT_TRUE(tb);
  auto both = w.admit({"a", "b"});
  ASSERT_TRUE(both.into);
  ASSERT_TRUE(both.turned);
  EXPECT_EQ(both.turned->closed.size(), 2u);
  EXPECT_EQ(both.into->sessions, set_of({"a", "b"}));
  EXPECT_EQ(w.of("a"), both.into);
  EXPECT_EQ(w.of("b"), both.into);
  // a session in no window yet joins the same way
  EXPECT_FALSE(w.answered(both.into));
  auto three = w.admit({"b", "c"});
  ASSERT_TRUE(three.into);
  EXPECT_EQ(three.into->sessions, set_of({"a", "b", "c"}));
  EXPECT_EQ(w.open_windows(), 1u);
}

TEST(check_windows, WhatTheVolunteerSeesDoesNotDependOnWhetherAWindowIsChecked) {
  // The same draws decide the windows' lengths either way: the dumps come at the same passes.
  auto script = [](double fraction, std::vector<bool>* checked) {
    check_windows w(fraction, 4, 42);
    std::vector<std::string> dumps;  // one line per pass: the sessions dumped before or after it
    const std::vector<std::vector<std::string>> passes = {{"a"}, {"a"}, {"b"}, {"a"}, {"a", "b"}, {"b"}, {"a"}, {"c"}, {"b"}};
    for (int round = 0; round < 40; ++round)
      for (const auto& p : passes) {
        auto adm = w.admit(p);
        if (!adm.into) {
          dumps.push_back("waits");
          continue;
        }
        std::string line;
        if (adm.turned) {
          for (const auto& s : adm.turned->opened->sessions) line += s;
          checked->push_back(adm.turned->opened->checked);
        }
        line += "|";
        if (auto t = w.answered(adm.into); t && t->opened) {
          for (const auto& s : t->opened->sessions) line += s;
          checked->push_back(t->opened->checked);
        }
        dumps.push_back(line);
      }
    return dumps;
  };
  std::vector<bool> none, all;
  const auto unchecked = script(0, &none);
  const auto checked = script(1, &all);
  EXPECT_EQ(unchecked, checked);
  ASSERT_FALSE(none.empty());
  EXPECT_EQ(std::count(none.begin(), none.end(), true), 0);
  EXPECT_EQ(std::count(all.begin(), all.end(), false), 0);
}

TEST(check_windows, AboutTheFractionOfWindowsIsCheckedAndTheyLastTheMeanNumberOfPasses) {
  check_windows w(0.25, 8, 9);
  int windows = 0, checked = 0, passes = 0;
  check_windows::ptr current;
  for (int i = 0; i < 40000; ++i) {
    auto a = w.admit({"s"});
    ASSERT_TRUE(a.into);
    ++passes;
    if (a.into != current) {
      current = a.into;
      ++windows;
      checked += current->checked;
    }
    w.answered(a.into);
  }
  const double mean = double(passes) / windows;
  EXPECT_GT(mean, 7.0);
  EXPECT_LT(mean, 9.0);
  const double share = double(checked) / windows;
  EXPECT_GT(share, 0.21);
  EXPECT_LT(share, 0.29);
  // a pass on no session is a window of its own, drawn the same way and kept nowhere
  int singles = 0;
  for (int i = 0; i < 4000; ++i) singles += w.single()->checked;
  EXPECT_GT(singles, 850);
  EXPECT_LT(singles, 1150);
  EXPECT_EQ(w.open_windows(), 1u);
}

TEST(check_windows, AClosedOrRestoredSessionLeavesItsWindow) {
  check_windows w(1, 1e6, 5);
  auto a = w.admit({"a", "b"});
  ASSERT_TRUE(a.into);
  EXPECT_FALSE(w.answered(a.into));
  EXPECT_EQ(w.leave("a"), a.into);
  EXPECT_EQ(a.into->sessions, set_of({"b"}));
  EXPECT_FALSE(w.of("a"));
  EXPECT_FALSE(w.leave("a"));
  // its next pass opens a window of its own (its state is dumped again)
  auto again = w.admit({"a"});
  ASSERT_TRUE(again.turned);
  EXPECT_EQ(again.into->sessions, set_of({"a"}));
  EXPECT_EQ(w.open_windows(), 2u);
  // a window whose every session left while its pass was on its way closes with nothing to dump
  EXPECT_EQ(w.leave("a"), again.into);
  auto t = w.answered(again.into);
  EXPECT_TRUE(!t || !t->opened);
}

}  // namespace
}  // namespace mpakt
