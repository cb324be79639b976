#include "actors/accounts/accounts_store.hpp"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "actors/accounts/secrets.hpp"
#include "test/support/files.hpp"

namespace mpakt::accounts {
namespace {

using namespace std::chrono_literals;
using std::chrono::days;

// A fixed, plausible "now"; tests move time by adding to it.
const sys_clock::time_point t0 = sys_clock::time_point{} + std::chrono::seconds(1'700'000'000);

const std::string alice_pw = "a long password";

class AccountsStore : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mpakt-accounts-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/" + accounts_file_name;
    reopen();
  }
  void TearDown() override {
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  void reopen() {
    store_.reset();
    auto s = accounts_store::open(path_, accounts_options{.pbkdf2_iterations = 10});
    ASSERT_TRUE(s.ok()) << s.err().message;
    store_ = std::move(*s);
  }

  // An approved account `name` and a session token for it, made at t0.
  std::string approved_session(const std::string& name, sys_clock::time_point now = t0) {
    auto a = store_->sign_up(name, alice_pw, /*approve_now=*/true, now);
    EXPECT_TRUE(a.ok()) << a.err().message;
    auto token = store_->login(name, alice_pw, now);
    EXPECT_TRUE(token.ok()) << token.err().message;
    return token.ok() ? *token : std::string();
  }

  key_info new_key(const std::string& token, const std::string& label = "script", sys_clock::time_point now = t0) {
    auto k = store_->create_key(token, label, now);
    EXPECT_TRUE(k.ok()) << k.err().message;
    return k.ok() ? *k : key_info{};
  }

  std::string dir_, path_;
  std::unique_ptr<accounts_store> store_;
};

template <class R>
void expect_error(const R& r, errc code, const std::string& message) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, code) << r.err().message;
  EXPECT_EQ(r.err().message, message);
}

TEST_F(AccountsStore, SignUpApproveLoginAndManageKeys) {
  auto a = store_->sign_up("alice", alice_pw, false, t0);
  ASSERT_TRUE(a.ok()) << a.err().message;
  EXPECT_EQ(a->username, "alice");
  EXPECT_EQ(a->status, "pending");
  EXPECT_FALSE(a->admin);
  EXPECT_EQ(a->created_at, "2023-11-14T22:13:20Z");

  expect_error(store_->login("alice", alice_pw, t0), errc::forbidden, "account not approved");
  ASSERT_TRUE(store_->approve("alice").ok());
  auto token = store_->login("alice", alice_pw, t0);
  ASSERT_TRUE(token.ok()) << token.err().message;
  EXPECT_EQ(token->size(), 43u);

  auto k = store_->create_key(*token, "script", t0);
  ASSERT_TRUE(k.ok()) << k.err().message;
  EXPECT_EQ(k->key.rfind("mpk_", 0), 0u);
  EXPECT_EQ(k->key.size(), 47u);
  EXPECT_EQ(k->key_id.rfind("k_", 0), 0u);
  EXPECT_EQ(k->key_id.size(), 26u);
  EXPECT_EQ(k->label, "script");
  EXPECT_EQ(k->created_at, "2023-11-14T22:13:20Z");
  EXPECT_TRUE(k->active);

  auto id = store_->check_key(k->key, t0 + 5min);
  ASSERT_TRUE(id.ok()) << id.err().message;
  EXPECT_EQ(id->username, "alice");
  EXPECT_EQ(id->key_id, k->key_id);
  EXPECT_FALSE(id->admin);

  auto keys = store_->list_keys(*token, t0 + 6min);
  ASSERT_TRUE(keys.ok()) << keys.err().message;
  ASSERT_EQ(keys->size(), 1u);
  EXPECT_TRUE((*keys)[0].key.empty()) << "listings never hold key material";
  EXPECT_EQ((*keys)[0].key_id, k->key_id);
  EXPECT_EQ((*keys)[0].label, "script");
  EXPECT_EQ((*keys)[0].last_used_at, "2023-11-14T22:18:20Z");
  EXPECT_TRUE((*keys)[0].active);
  EXPECT_EQ((*keys)[0].state, "active");

  auto second = store_->create_key(*token, "", t0 + 7min);
  ASSERT_TRUE(second.ok());
  EXPECT_NE(second->key, k->key);
  EXPECT_NE(second->key_id, k->key_id);

  ASSERT_TRUE(store_->delete_key(*token, k->key_id, t0 + 8min).ok());
  expect_error(store_->check_key(k->key, t0 + 9min), errc::unauthorized, "invalid API key");
  keys = store_->list_keys(*token, t0 + 9min);
  ASSERT_TRUE(keys.ok());
  ASSERT_EQ(keys->size(), 1u);
  EXPECT_EQ((*keys)[0].key_id, second->key_id);
  EXPECT_TRUE((*keys)[0].last_used_at.empty());
  EXPECT_TRUE(store_->check_key(second->key, t0 + 9min).ok());

  auto accounts = store_->list();
  ASSERT_TRUE(accounts.ok());
  ASSERT_EQ(accounts->size(), 1u);
  EXPECT_EQ((*accounts)[0].status, "approved");
}

TEST_F(AccountsStore, EverythingPersistsAcrossReopen) {
  const std::string token = approved_session("alice");
  const key_info k = new_key(token);
  ASSERT_TRUE(store_->set_admin("alice", true).ok());
  reopen();
  auto id = store_->check_key(k.key, t0 + 1h);
  ASSERT_TRUE(id.ok()) << id.err().message;
  EXPECT_EQ(id->username, "alice");
  EXPECT_TRUE(id->admin);
  auto keys = store_->list_keys(token, t0 + 2h);
  ASSERT_TRUE(keys.ok()) << keys.err().message;
  ASSERT_EQ(keys->size(), 1u);
  EXPECT_EQ((*keys)[0].last_used_at, "2023-11-14T23:13:20Z");
  EXPECT_TRUE(store_->login("alice", alice_pw, t0).ok());
  auto accounts = store_->list();
  ASSERT_TRUE(accounts.ok());
  ASSERT_EQ(accounts->size(), 1u);
  EXPECT_TRUE((*accounts)[0].admin);
}

TEST_F(AccountsStore, WrongPasswordAndUnknownNameGetTheSameAnswer) {
  approved_session("alice");
  expect_error(store_->login("alice", "not the password", t0), errc::unauthorized, "wrong username or password");
  expect_error(store_->login("bob", alice_pw, t0), errc::unauthorized, "wrong username or password");
  expect_error(store_->login("no such name!", alice_pw, t0), errc::unauthorized, "wrong username or password");
  expect_error(store_->login("alice", "", t0), errc::unauthorized, "wrong username or password");
}

TEST_F(AccountsStore, DuplicateUsernameIsAConflictIgnoringCase) {
  ASSERT_TRUE(store_->sign_up("alice", alice_pw, false, t0).ok());
  expect_error(store_->sign_up("alice", "another password", false, t0), errc::conflict, "username alice is taken");
  expect_error(store_->sign_up("Alice", "another password", false, t0), errc::conflict, "username Alice is taken");
  // The first account's password still works.
  ASSERT_TRUE(store_->approve("alice").ok());
  EXPECT_TRUE(store_->login("alice", alice_pw, t0).ok());
}

TEST_F(AccountsStore, BadUsernamesAndPasswordsAreNamed) {
  for (const std::string& bad : std::vector<std::string>{"ab", std::string(65, 'a'), "bad name", "al!ce", "", "ünïcode", "a/b/c"}) {
    auto r = store_->sign_up(bad, alice_pw, false, t0);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.err().code, errc::invalid);
    EXPECT_EQ(r.err().message.rfind("username must be", 0), 0u) << r.err().message;
  }
  for (const std::string& good : std::vector<std::string>{"abc", std::string(64, 'a'), "A.b-c_9"})
    EXPECT_TRUE(store_->sign_up(good, alice_pw, false, t0).ok()) << good;

  expect_error(store_->sign_up("carol", "short", false, t0), errc::invalid, "password must be at least 8 characters");
  expect_error(store_->sign_up("carol", "ééééééé", false, t0), errc::invalid,
               "password must be at least 8 characters");  // 7 characters in 14 bytes
  expect_error(store_->sign_up("carol", std::string(1025, 'x'), false, t0), errc::invalid,
               "password must be at most 1024 bytes");
  EXPECT_TRUE(store_->sign_up("carol", "12345678", false, t0).ok());
}

TEST_F(AccountsStore, SessionTokensExpireAfter24Hours) {
  const std::string token = approved_session("alice");
  EXPECT_TRUE(store_->create_key(token, "a", t0 + 23h).ok());
  const std::string expired = "invalid or expired session token; log in again";
  expect_error(store_->create_key(token, "b", t0 + 24h), errc::unauthorized, expired);
  expect_error(store_->list_keys(token, t0 + 25h), errc::unauthorized, expired);
  expect_error(store_->list_keys("garbage", t0), errc::unauthorized, expired);
  expect_error(store_->list_keys(std::string(43, 'A'), t0), errc::unauthorized, expired);
  // A fresh login works again, and the expired session was swept.
  auto fresh = store_->login("alice", alice_pw, t0 + 25h);
  ASSERT_TRUE(fresh.ok());
  EXPECT_TRUE(store_->list_keys(*fresh, t0 + 25h).ok());
}

TEST_F(AccountsStore, LabelsAreChecked) {
  const std::string token = approved_session("alice");
  expect_error(store_->create_key(token, std::string(129, 'x'), t0), errc::invalid, "label must be at most 128 bytes");
  expect_error(store_->create_key(token, "a\x1b[31mred", t0), errc::invalid, "label must not contain control characters");
  expect_error(store_->create_key(token, "\xff\xfe", t0), errc::invalid, "label must be valid UTF-8");
  EXPECT_TRUE(store_->create_key(token, "laptop – 日本", t0).ok());
}

TEST_F(AccountsStore, SecretsAreStoredOnlyAsHashes) {
  const std::string password = "correct horse battery staple";
  ASSERT_TRUE(store_->sign_up("alice", password, true, t0).ok());
  auto token = store_->login("alice", password, t0);
  ASSERT_TRUE(token.ok());
  const key_info k = new_key(*token);
  ASSERT_TRUE(store_->check_key(k.key, t0 + 1min).ok());
  const std::string key_body = k.key.substr(4);

  // While the store is open, the bytes may sit in the WAL file; check every file it has.
  for (const char* suffix : {"", "-wal", "-shm"}) {
    const std::string bytes = test::read_file(path_ + suffix);
    for (const std::string& secret : {password, k.key, key_body, *token}) {
      EXPECT_EQ(bytes.find(secret), std::string::npos) << "a secret is in accounts.sqlite3" << suffix;
    }
  }
  store_.reset();  // the last connection checkpoints the WAL into the main file
  const std::string bytes = test::read_file(path_);
  ASSERT_FALSE(bytes.empty());
  for (const std::string& secret : {password, k.key, key_body, *token})
    EXPECT_EQ(bytes.find(secret), std::string::npos);

  // Open the file with plain SQLite and look at what is there.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path_.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  auto scalar_blob = [&](const char* sql) {
    sqlite3_stmt* s = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql, -1, &s, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    std::string out;
    if (sqlite3_step(s) == SQLITE_ROW) {
      const void* p = sqlite3_column_blob(s, 0);
      out.assign(static_cast<const char*>(p), std::size_t(sqlite3_column_bytes(s, 0)));
    }
    sqlite3_finalize(s);
    return out;
  };
  EXPECT_EQ(scalar_blob("SELECT CAST(MAX(version) AS TEXT) FROM schema_version"), "3");
  EXPECT_EQ(scalar_blob("SELECT password_scheme FROM accounts"), "pbkdf2-sha256");
  EXPECT_EQ(scalar_blob("SELECT password_salt FROM accounts").size(), 16u);
  EXPECT_EQ(scalar_blob("SELECT CAST(password_iterations AS TEXT) FROM accounts"), "10");
  const std::string stored_pw = scalar_blob("SELECT password_hash FROM accounts");
  EXPECT_EQ(stored_pw.size(), 32u);
  EXPECT_EQ(stored_pw, as_bytes(pbkdf2_sha256(password, scalar_blob("SELECT password_salt FROM accounts"), 10)));
  EXPECT_EQ(scalar_blob("SELECT key_hash FROM api_keys"), as_bytes(sha256(k.key)));
  EXPECT_EQ(scalar_blob("SELECT token_hash FROM sessions"), as_bytes(sha256(*token)));
  sqlite3_close(db);

  // The file is readable by its owner only.
  const auto perms = std::filesystem::status(path_).permissions();
  EXPECT_EQ(perms & (std::filesystem::perms::group_all | std::filesystem::perms::others_all),
            std::filesystem::perms::none);
}

TEST_F(AccountsStore, KeyIdleMoreThan30DaysIsDeactivatedForGood) {
  const std::string token = approved_session("alice");
  const key_info k = new_key(token);
  const std::string msg = "API key deactivated after 30 days unused";
  expect_error(store_->check_key(k.key, t0 + days(30) + 1s), errc::unauthorized, msg);
  // Stays deactivated, even at a time when it would have been fine, and after reopening.
  expect_error(store_->check_key(k.key, t0 + 1h), errc::unauthorized, msg);
  reopen();
  expect_error(store_->check_key(k.key, t0 + 1h), errc::unauthorized, msg);
  auto fresh = store_->login("alice", alice_pw, t0 + 2h);
  ASSERT_TRUE(fresh.ok());
  auto keys = store_->list_keys(*fresh, t0 + 2h);
  ASSERT_TRUE(keys.ok());
  ASSERT_EQ(keys->size(), 1u);
  EXPECT_FALSE((*keys)[0].active);
  EXPECT_EQ((*keys)[0].state, "deactivated");
}

TEST_F(AccountsStore, IdleTimeCountsFromLastUse) {
  const std::string token = approved_session("alice");
  const key_info k = new_key(token);
  const key_info never_used = new_key(token, "spare");
  // 29 days after creation: fine; this use restarts the idle clock.
  ASSERT_TRUE(store_->check_key(k.key, t0 + days(29)).ok());
  // Exactly 30 days unused is not "more than 30 days".
  EXPECT_TRUE(store_->check_key(k.key, t0 + days(59)).ok());
  EXPECT_TRUE(store_->check_key(k.key, t0 + days(88)).ok());
  expect_error(store_->check_key(k.key, t0 + days(118) + 1s), errc::unauthorized,
               "API key deactivated after 30 days unused");
  // A never-used key counts from its creation; listing shows (and records) it as deactivated.
  auto fresh = store_->login("alice", alice_pw, t0 + days(31));
  ASSERT_TRUE(fresh.ok());
  auto keys = store_->list_keys(*fresh, t0 + days(31));
  ASSERT_TRUE(keys.ok());
  ASSERT_EQ(keys->size(), 2u);
  EXPECT_EQ((*keys)[1].key_id, never_used.key_id);
  EXPECT_EQ((*keys)[1].state, "deactivated");
  expect_error(store_->check_key(never_used.key, t0 + days(1)), errc::unauthorized,
               "API key deactivated after 30 days unused");
}

TEST_F(AccountsStore, LastUsedIsWrittenAtMostOncePerMinute) {
  const std::string token = approved_session("alice");
  const key_info k = new_key(token);
  ASSERT_TRUE(store_->check_key(k.key, t0 + 10s).ok());
  ASSERT_TRUE(store_->check_key(k.key, t0 + 69s).ok());  // under a minute later: not written
  auto keys = store_->list_keys(token, t0 + 70s);
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ((*keys)[0].last_used_at, "2023-11-14T22:13:30Z");
  ASSERT_TRUE(store_->check_key(k.key, t0 + 70s).ok());  // a minute later: written
  keys = store_->list_keys(token, t0 + 71s);
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ((*keys)[0].last_used_at, "2023-11-14T22:14:30Z");
}

TEST_F(AccountsStore, RevokedKeyIsRefused) {
  const std::string token = approved_session("alice");
  const key_info k = new_key(token);
  const key_info other = new_key(token, "other");
  ASSERT_TRUE(store_->revoke_key(k.key_id).ok());
  ASSERT_TRUE(store_->revoke_key(k.key_id).ok()) << "idempotent";
  expect_error(store_->check_key(k.key, t0), errc::unauthorized, "API key revoked");
  EXPECT_TRUE(store_->check_key(other.key, t0).ok());
  auto keys = store_->list_keys(token, t0);
  ASSERT_TRUE(keys.ok());
  EXPECT_FALSE((*keys)[0].active);
  EXPECT_EQ((*keys)[0].state, "revoked");
  expect_error(store_->revoke_key("k_000000000000000000000000"), errc::not_found,
               "no API key with id k_000000000000000000000000");
  // The owner can still delete a revoked key from the list.
  EXPECT_TRUE(store_->delete_key(token, k.key_id, t0).ok());
}

TEST_F(AccountsStore, RevokedAccountIsRefusedEverywhere) {
  const std::string token = approved_session("alice");
  const key_info k = new_key(token);
  ASSERT_TRUE(store_->revoke("alice").ok());
  expect_error(store_->check_key(k.key, t0), errc::unauthorized, "API key revoked");
  expect_error(store_->login("alice", alice_pw, t0), errc::forbidden, "account revoked");
  expect_error(store_->list_keys(token, t0), errc::unauthorized, "invalid or expired session token; log in again");
  auto accounts = store_->list();
  ASSERT_TRUE(accounts.ok());
  EXPECT_EQ((*accounts)[0].status, "revoked");
  // Approving again reinstates the account, not its old keys.
  ASSERT_TRUE(store_->approve("alice").ok());
  auto fresh = store_->login("alice", alice_pw, t0);
  ASSERT_TRUE(fresh.ok());
  expect_error(store_->check_key(k.key, t0), errc::unauthorized, "API key revoked");
  EXPECT_TRUE(store_->check_key(new_key(*fresh).key, t0).ok());

  expect_error(store_->revoke("nobody"), errc::not_found, "no account named nobody");
  expect_error(store_->approve("nobody"), errc::not_found, "no account named nobody");
  expect_error(store_->set_admin("nobody", true), errc::not_found, "no account named nobody");
  expect_error(store_->keys_of("nobody"), errc::not_found, "no account named nobody");
}

TEST_F(AccountsStore, AnotherAccountsKeyIdIsNotFoundLikeAnUnknownOne) {
  const std::string alice = approved_session("alice");
  const std::string bob = approved_session("bob");
  const key_info k = new_key(alice);
  auto theirs = store_->delete_key(bob, k.key_id, t0);
  expect_error(theirs, errc::not_found, "no API key with id " + k.key_id);
  expect_error(store_->delete_key(bob, "k_0123456789abcdef01234567", t0), errc::not_found,
               "no API key with id k_0123456789abcdef01234567");
  EXPECT_TRUE(store_->check_key(k.key, t0).ok());
  auto bobs = store_->list_keys(bob, t0);
  ASSERT_TRUE(bobs.ok());
  EXPECT_TRUE(bobs->empty());
}

TEST_F(AccountsStore, SecretsNeverAppearInErrors) {
  const std::string token = approved_session("alice");
  const key_info k = new_key(token);
  // A key pasted where a key id belongs is not echoed back.
  auto r = store_->delete_key(token, k.key, t0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().message, "no API key with that id");
  auto bad = store_->check_key(k.key + "x", t0);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.err().message.find(k.key), std::string::npos);
  for (const std::string& garbage : std::vector<std::string>{"", "mpk_", "YOUR_KEY", std::string(47, 'm'), "mpk_" + std::string(43, '-')})
    expect_error(store_->check_key(garbage, t0), errc::unauthorized, "invalid API key");
  auto pw_as_name = store_->approve(alice_pw);
  ASSERT_FALSE(pw_as_name.ok());
  EXPECT_EQ(pw_as_name.err().message.find(alice_pw), std::string::npos);
}

TEST_F(AccountsStore, AdminFlagTravelsWithTheKey) {
  const std::string token = approved_session("alice");
  const key_info k = new_key(token);
  ASSERT_TRUE(store_->set_admin("alice", true).ok());
  auto id = store_->check_key(k.key, t0);
  ASSERT_TRUE(id.ok());
  EXPECT_TRUE(id->admin);
  ASSERT_TRUE(store_->set_admin("alice", false).ok());
  EXPECT_FALSE(store_->check_key(k.key, t0)->admin);
}

TEST_F(AccountsStore, KeysPerAccountAreCapped) {
  const std::string token = approved_session("alice");
  for (int i = 0; i < max_keys_per_account; ++i) ASSERT_TRUE(store_->create_key(token, "k", t0).ok()) << i;
  expect_error(store_->create_key(token, "k", t0), errc::limit,
               "account alice has 100 API keys, the most allowed; delete one first");
}

// ---- the `mpakt admin` binary, against the same file while this store has it open ----

struct run_result {
  int code = -1;
  std::string out;
};

run_result run_mpakt(const std::string& args) {
  const std::string cmd = std::string(MPAKT_BINARY) + " " + args + " 2>&1";
  run_result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

TEST_F(AccountsStore, AdminCommandApprovesListsAndRevokes) {
  ASSERT_TRUE(store_->sign_up("alice", alice_pw, false, t0).ok());
  const std::string dd = " --data-dir " + dir_;

  auto r = run_mpakt("admin approve alice" + dd);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("approved account alice"), std::string::npos) << r.out;
  auto token = store_->login("alice", alice_pw);  // real time: the CLI uses the clock
  ASSERT_TRUE(token.ok()) << token.err().message;
  auto k = store_->create_key(*token, "script");
  ASSERT_TRUE(k.ok());

  r = run_mpakt("admin list" + dd);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("alice"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("approved"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(k->key_id), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"script\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("last used never"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(k->key), std::string::npos);

  r = run_mpakt("admin grant-admin alice" + dd);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(store_->check_key(k->key)->admin);

  r = run_mpakt("admin revoke-key " + k->key_id + dd);
  ASSERT_EQ(r.code, 0) << r.out;
  expect_error(store_->check_key(k->key), errc::unauthorized, "API key revoked");

  auto k2 = store_->create_key(*token, "second");
  ASSERT_TRUE(k2.ok());
  r = run_mpakt("admin revoke alice" + dd);
  ASSERT_EQ(r.code, 0) << r.out;
  expect_error(store_->check_key(k2->key), errc::unauthorized, "API key revoked");

  // Errors: exit 1 with the reason on stderr; usage errors exit 2.
  r = run_mpakt("admin approve nobody" + dd);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("no account named nobody"), std::string::npos) << r.out;
  r = run_mpakt("admin list --data-dir " + dir_ + "/missing");
  EXPECT_EQ(r.code, 1) << r.out;
  r = run_mpakt("admin frobnicate" + dd);
  EXPECT_EQ(r.code, 2) << r.out;
  r = run_mpakt("admin approve");
  EXPECT_EQ(r.code, 2) << r.out;
  r = run_mpakt("admin approve alice");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("--data-dir"), std::string::npos) << r.out;
  r = run_mpakt("admin --help");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("revoke-key KEY_ID"), std::string::npos) << r.out;
}

// ---- volunteers' join tokens ----

/// A quarantined volunteer's token (its results differed from a verifier's) is refused from
/// then on, also after the store is opened again (a coordinator restart), and listed as such;
/// only that token: a new one for the name works, and a revoked token stays revoked.
TEST_F(AccountsStore, AQuarantinedVolunteerTokenStaysRefused) {
  auto t = store_->create_volunteer_token("box-q", 0, 0, t0);
  ASSERT_TRUE(t.ok());
  const std::string digest = as_bytes(sha256(t->token));
  ASSERT_TRUE(store_->quarantine_volunteer(digest).ok());
  ASSERT_TRUE(store_->quarantine_volunteer(digest).ok());  // idempotent
  reopen();
  auto r = store_->check_volunteer_token(t->token, t0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.err().code, errc::unauthorized);
  EXPECT_NE(r.err().message.find("volunteer token box-q was quarantined"), std::string::npos) << r.err().message;
  EXPECT_FALSE(store_->check_volunteer_digest(digest, t0).ok());
  auto list = store_->volunteer_tokens(t0);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ(list->front().state, "quarantined");
  // the operator's new token for the name works; quarantining the old digest again leaves it be
  auto t2 = store_->create_volunteer_token("box-q", 0, 0, t0);
  ASSERT_TRUE(t2.ok());
  ASSERT_TRUE(store_->quarantine_volunteer(digest).ok());
  EXPECT_TRUE(store_->check_volunteer_token(t2->token, t0).ok());
  // a revoked token is not turned into a quarantined one
  ASSERT_TRUE(store_->revoke_volunteer("box-q").ok());
  ASSERT_TRUE(store_->quarantine_volunteer(as_bytes(sha256(t2->token))).ok());
  EXPECT_EQ(store_->check_volunteer_token(t2->token, t0).err().message, "volunteer token box-q was revoked");
}

TEST_F(AccountsStore, VolunteerTokensAreCheckedRevokedReplacedAndExpire) {
  auto t = store_->create_volunteer_token("box-1", 300u << 20, 0, t0);
  ASSERT_TRUE(t.ok()) << t.err().message;
  EXPECT_EQ(t->token.rfind("mpv_", 0), 0u);
  EXPECT_EQ(t->token.size(), 4u + 43u);
  EXPECT_EQ(t->state, "active");
  EXPECT_TRUE(t->expires_at.empty());
  auto g = store_->check_volunteer_token(t->token, t0 + days(400));
  ASSERT_TRUE(g.ok()) << g.err().message;
  EXPECT_EQ(g->name, "box-1");
  EXPECT_EQ(g->memory_cap, 300u << 20);
  EXPECT_EQ(g->digest, as_bytes(sha256(t->token)));
  EXPECT_TRUE(store_->check_volunteer_digest(g->digest, t0).ok());

  for (const std::string& bad : {std::string("mpv_") + std::string(43, 'A'), std::string("mpk_") + t->token.substr(4),
                                std::string(""), t->token + "x"}) {
    auto r = store_->check_volunteer_token(bad, t0);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.err().code, errc::unauthorized);
    EXPECT_EQ(r.err().message, "invalid volunteer token");
  }

  // a new token for the name replaces the old one
  auto t2 = store_->create_volunteer_token("box-1", 0, 0, t0);
  ASSERT_TRUE(t2.ok());
  EXPECT_NE(t2->token, t->token);
  EXPECT_FALSE(store_->check_volunteer_token(t->token, t0).ok());
  EXPECT_FALSE(store_->check_volunteer_digest(g->digest, t0).ok());
  EXPECT_EQ(store_->check_volunteer_token(t2->token, t0)->memory_cap, 0u);

  ASSERT_TRUE(store_->revoke_volunteer("box-1").ok());
  auto revoked = store_->check_volunteer_token(t2->token, t0);
  ASSERT_FALSE(revoked.ok());
  EXPECT_EQ(revoked.err().code, errc::unauthorized);
  EXPECT_EQ(revoked.err().message, "volunteer token box-1 was revoked");
  EXPECT_EQ(store_->revoke_volunteer("nobody").err().code, errc::not_found);

  auto e = store_->create_volunteer_token("box-2", 0, 1.5, t0);
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE(e->expires_at.empty());
  EXPECT_TRUE(store_->check_volunteer_token(e->token, t0 + std::chrono::hours(35)).ok());
  auto expired = store_->check_volunteer_token(e->token, t0 + std::chrono::hours(37));
  ASSERT_FALSE(expired.ok());
  EXPECT_NE(expired.err().message.find("volunteer token box-2 expired at"), std::string::npos) << expired.err().message;

  auto list = store_->volunteer_tokens(t0 + days(2));
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  for (const auto& v : *list) {
    EXPECT_TRUE(v.token.empty());
    EXPECT_EQ(v.state, v.name == "box-1" ? "revoked" : "expired");
  }

  EXPECT_EQ(store_->create_volunteer_token("x", 0, 0, t0).err().code, errc::invalid);
  EXPECT_EQ(store_->create_volunteer_token("box 3", 0, 0, t0).err().code, errc::invalid);
  EXPECT_EQ(store_->create_volunteer_token("box-3", 0, -1, t0).err().code, errc::invalid);

  // only the digest is stored
  store_.reset();
  const std::string bytes = test::read_file(path_);
  EXPECT_EQ(bytes.find(t2->token), std::string::npos);
  EXPECT_EQ(bytes.find(e->token), std::string::npos);
}

TEST_F(AccountsStore, AVersionOneFileGainsTheVolunteerTokensTable) {
  store_.reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "DROP TABLE volunteer_tokens; DROP TABLE volunteer_quarantines; "
                         "DELETE FROM schema_version WHERE version >= 2;",
                         nullptr, nullptr, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(db);
  sqlite3_close(db);
  reopen();
  auto t = store_->create_volunteer_token("box-1", 0, 0, t0);
  ASSERT_TRUE(t.ok()) << t.err().message;
  EXPECT_TRUE(store_->check_volunteer_token(t->token, t0).ok());
}


TEST_F(AccountsStore, AVersionTwoFileKeepsItsTokensAndGainsQuarantines) {
  auto t = store_->create_volunteer_token("box-2", 0, 0, t0);
  ASSERT_TRUE(t.ok());
  store_.reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "DROP TABLE volunteer_quarantines; DELETE FROM schema_version WHERE version = 3;", nullptr,
                         nullptr, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(db);
  sqlite3_close(db);
  reopen();
  EXPECT_TRUE(store_->check_volunteer_token(t->token, t0).ok());
  ASSERT_TRUE(store_->quarantine_volunteer(as_bytes(sha256(t->token)), t0).ok());
  EXPECT_FALSE(store_->check_volunteer_token(t->token, t0).ok());
}

}  // namespace
}  // namespace mpakt::accounts
