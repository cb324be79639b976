#include "actors/accounts/accounts_store.hpp"

#include <ctime>
#include <optional>

#include "actors/accounts/secrets.hpp"
#include "actors/accounts/sqlite.hpp"
#include "actors/ids.hpp"

namespace mpakt::accounts {

namespace {

constexpr int schema_version = 3;

// Version 1. Times are Unix seconds (UTC). Secrets are stored only as hashes.
constexpr const char* schema_v1 = R"sql(
CREATE TABLE accounts (
  id                  INTEGER PRIMARY KEY,
  username            TEXT NOT NULL COLLATE NOCASE UNIQUE,
  password_scheme     TEXT NOT NULL,            -- 'pbkdf2-sha256'
  password_salt       BLOB NOT NULL,
  password_iterations INTEGER NOT NULL,
  password_hash       BLOB NOT NULL,
  status              TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'revoked')),
  admin               INTEGER NOT NULL DEFAULT 0 CHECK (admin IN (0, 1)),
  created_at          INTEGER NOT NULL
);
CREATE TABLE sessions (
  token_hash  BLOB PRIMARY KEY,                 -- SHA-256 of the token
  account_id  INTEGER NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  expires_at  INTEGER NOT NULL
);
CREATE INDEX sessions_by_account ON sessions(account_id);
CREATE TABLE api_keys (
  key_id       TEXT PRIMARY KEY,
  key_hash     BLOB NOT NULL UNIQUE,            -- SHA-256 of the key
  account_id   INTEGER NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  label        TEXT NOT NULL,
  state        TEXT NOT NULL CHECK (state IN ('active', 'revoked', 'deactivated')),
  created_at   INTEGER NOT NULL,
  last_used_at INTEGER                          -- NULL: never used
);
CREATE INDEX api_keys_by_account ON api_keys(account_id);
INSERT INTO schema_version (version) VALUES (1);
)sql";

// Version 2: volunteers' join tokens (added to a version 1 file in place).
constexpr const char* schema_v2 = R"sql(
CREATE TABLE volunteer_tokens (
  name        TEXT PRIMARY KEY COLLATE NOCASE,
  token_hash  BLOB NOT NULL UNIQUE,             -- SHA-256 of the token
  memory_cap  INTEGER NOT NULL DEFAULT 0,       -- bytes; 0: what the volunteer offers
  state       TEXT NOT NULL CHECK (state IN ('active', 'revoked')),
  created_at  INTEGER NOT NULL,
  expires_at  INTEGER                           -- NULL: never
);
INSERT INTO schema_version (version) VALUES (2);
)sql";

// Version 3: the join tokens of volunteers quarantined by a spot-check (added in place).
constexpr const char* schema_v3 = R"sql(
CREATE TABLE volunteer_quarantines (
  token_hash  BLOB PRIMARY KEY,                 -- a volunteer_tokens.token_hash
  at          INTEGER NOT NULL
);
INSERT INTO schema_version (version) VALUES (3);
)sql";

constexpr const char* password_scheme = "pbkdf2-sha256";
constexpr const char* volunteer_prefix = "mpv_";
constexpr const char* key_prefix = "mpk_";
constexpr std::size_t secret_bytes = 32;
constexpr std::size_t secret_text_chars = 43;  // base64url of 32 bytes, unpadded
constexpr std::size_t max_password_bytes = 1024;
constexpr std::size_t max_label_bytes = 128;

// Hashed instead of a real salt when the username is unknown, so that a wrong name costs the
// same time as a wrong password and timing does not reveal which names exist.
constexpr char dummy_salt[salt_bytes + 1] = "mpakt-no-account";

const char* const bad_username =
    "username must be 3 to 64 characters of A-Z, a-z, 0-9, '_', '.' or '-'";
const char* const wrong_login = "wrong username or password";
const char* const bad_token = "invalid or expired session token; log in again";

std::int64_t unix_seconds(sys_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::seconds>(t.time_since_epoch()).count();
}

std::string iso8601(std::int64_t unix_s) {
  const std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

bool valid_username(const std::string& u) {
  if (u.size() < 3 || u.size() > 64) return false;
  for (char c : u) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// Characters, not bytes: UTF-8 continuation bytes (10xxxxxx) do not start a character.
std::size_t utf8_chars(const std::string& s) {
  std::size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
bool valid_utf8(const std::string& s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t len;
    std::uint32_t cp;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
    else return false;
    if (i + len > s.size()) return false;
    for (std::size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    static constexpr std::uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

status check_label(const std::string& label) {
  if (label.size() > max_label_bytes)
    return invalid("label must be at most " + std::to_string(max_label_bytes) + " bytes");
  for (unsigned char c : label)
    if (c < 0x20 || c == 0x7F) return invalid("label must not contain control characters");
  if (!valid_utf8(label)) return invalid("label must be valid UTF-8");
  return ok_status();
}

// A key id is echoed in errors only when it has the shape of one, so that a key pasted into
// the wrong field is never repeated back.
bool looks_like_key_id(const std::string& id) {
  if (id.size() != 26 || id.compare(0, 2, "k_") != 0) return false;
  for (std::size_t i = 2; i < id.size(); ++i) {
    const char c = id[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

error unknown_key_id(const std::string& key_id) {
  return make_error(errc::not_found, looks_like_key_id(key_id) ? "no API key with id " + key_id
                                                                : std::string("no API key with that id"));
}

error unknown_account(const std::string& username) {
  return make_error(errc::not_found, valid_username(username) ? "no account named " + username
                                                              : std::string("no such account; ") + bad_username);
}

// A 256-bit random secret in text form; the raw bytes are wiped.
std::string new_secret() {
  std::string raw = random_bytes(secret_bytes);
  std::string text = base64url(raw);
  wipe(raw);
  return text;
}

key_info read_key_row(const sqlite_stmt& s) {
  // Columns: key_id, label, state, created_at, last_used_at.
  key_info k;
  k.key_id = s.column_text(0);
  k.label = s.column_text(1);
  k.state = s.column_text(2);
  k.active = k.state == "active";
  k.created_at = iso8601(s.column_int(3));
  if (auto used = s.column_optional_int(4)) k.last_used_at = iso8601(*used);
  return k;
}

}  // namespace

struct accounts_store::account_row {
  std::int64_t id = 0;
  account_info info;
  std::string salt;
  std::int64_t iterations = 0;
  std::string hash;
};

struct accounts_store::session_owner {
  std::int64_t id = 0;
  std::string username;
};

accounts_store::accounts_store(std::unique_ptr<sqlite_db> db, accounts_options options)
    : db_(std::move(db)), options_(options) {}

accounts_store::~accounts_store() = default;

result<std::unique_ptr<accounts_store>> accounts_store::open(const std::string& path,
                                                             accounts_options options) {
  if (options.pbkdf2_iterations < 1) return invalid("pbkdf2_iterations must be at least 1");
  auto db = sqlite_db::open(path);
  if (!db) return std::move(db).err();
  std::unique_ptr<accounts_store> store(new accounts_store(std::move(*db), options));
  MPAKT_TRY(store->create_schema());
  return store;
}

status accounts_store::create_schema() {
  auto tx = sqlite_tx::begin(*db_);
  if (!tx) return std::move(tx).err();
  MPAKT_TRY(db_->exec("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)"));
  std::optional<std::int64_t> version;
  {
    auto q = db_->prepare("SELECT MAX(version) FROM schema_version");
    if (!q) return std::move(q).err();
    auto row = q->step();
    if (!row) return std::move(row).err();
    if (*row) version = q->column_optional_int(0);
  }
  if (!version) MPAKT_TRY(db_->exec(schema_v1));
  if (!version || *version < 2) MPAKT_TRY(db_->exec(schema_v2));
  if (!version || *version < 3) MPAKT_TRY(db_->exec(schema_v3));
  if (version && *version > schema_version) {
    return make_error(errc::internal, "the accounts database has schema version " +
                                          std::to_string(*version) + ", newer than this mpakt knows (" +
                                          std::to_string(schema_version) + ")");
  }
  return tx->commit();
}

// ---- accounts ----

result<account_info> accounts_store::sign_up(const std::string& username, const std::string& password,
                                             bool approve_now, sys_clock::time_point now) {
  if (!valid_username(username)) return invalid(bad_username);
  if (utf8_chars(password) < 8) return invalid("password must be at least 8 characters");
  if (password.size() > max_password_bytes)
    return invalid("password must be at most " + std::to_string(max_password_bytes) + " bytes");

  // The slow hash runs before the write lock is taken.
  const std::string salt = random_bytes(salt_bytes);
  const digest hash = pbkdf2_sha256(password, salt, options_.pbkdf2_iterations);
  account_info info{username, approve_now ? "approved" : "pending", false, iso8601(unix_seconds(now))};

  auto ins = db_->prepare(
      "INSERT INTO accounts (username, password_scheme, password_salt, password_iterations, "
      "password_hash, status, admin, created_at) VALUES (?, ?, ?, ?, ?, ?, 0, ?)");
  if (!ins) return std::move(ins).err();
  ins->bind(1, username)
      .bind(2, password_scheme)
      .bind_blob(3, salt)
      .bind(4, std::int64_t(options_.pbkdf2_iterations))
      .bind_blob(5, as_bytes(hash))
      .bind(6, info.status)
      .bind(7, unix_seconds(now));
  if (auto st = ins->run(); !st) {
    if (st.err().code == errc::conflict) return make_error(errc::conflict, "username " + username + " is taken");
    return std::move(st).err();
  }
  return info;
}

result<accounts_store::account_row> accounts_store::find_account(const std::string& username) {
  if (!valid_username(username)) return unknown_account(username);
  auto q = db_->prepare(
      "SELECT id, username, status, admin, created_at, password_salt, password_iterations, "
      "password_hash FROM accounts WHERE username = ?");
  if (!q) return std::move(q).err();
  q->bind(1, username);
  auto row = q->step();
  if (!row) return std::move(row).err();
  if (!*row) return unknown_account(username);
  account_row a;
  a.id = q->column_int(0);
  a.info.username = q->column_text(1);
  a.info.status = q->column_text(2);
  a.info.admin = q->column_int(3) != 0;
  a.info.created_at = iso8601(q->column_int(4));
  a.salt = q->column_blob(5);
  a.iterations = q->column_int(6);
  a.hash = q->column_blob(7);
  return a;
}

status accounts_store::approve(const std::string& username) {
  if (!valid_username(username)) return unknown_account(username);
  auto q = db_->prepare("UPDATE accounts SET status = 'approved' WHERE username = ?");
  if (!q) return std::move(q).err();
  MPAKT_TRY(q->bind(1, username).run());
  if (db_->changes() == 0) return unknown_account(username);
  return ok_status();
}

status accounts_store::revoke(const std::string& username) {
  auto tx = sqlite_tx::begin(*db_);
  if (!tx) return std::move(tx).err();
  auto a = find_account(username);
  if (!a) return std::move(a).err();
  {
    auto q = db_->prepare("UPDATE accounts SET status = 'revoked' WHERE id = ?");
    if (!q) return std::move(q).err();
    MPAKT_TRY(q->bind(1, a->id).run());
  }
  {
    auto q = db_->prepare("UPDATE api_keys SET state = 'revoked' WHERE account_id = ?");
    if (!q) return std::move(q).err();
    MPAKT_TRY(q->bind(1, a->id).run());
  }
  {
    auto q = db_->prepare("DELETE FROM sessions WHERE account_id = ?");
    if (!q) return std::move(q).err();
    MPAKT_TRY(q->bind(1, a->id).run());
  }
  return tx->commit();
}

status accounts_store::set_admin(const std::string& username, bool admin) {
  if (!valid_username(username)) return unknown_account(username);
  auto q = db_->prepare("UPDATE accounts SET admin = ? WHERE username = ?");
  if (!q) return std::move(q).err();
  MPAKT_TRY(q->bind(1, std::int64_t(admin ? 1 : 0)).bind(2, username).run());
  if (db_->changes() == 0) return unknown_account(username);
  return ok_status();
}

result<std::vector<account_info>> accounts_store::list() {
  auto q = db_->prepare("SELECT username, status, admin, created_at FROM accounts ORDER BY created_at, id");
  if (!q) return std::move(q).err();
  std::vector<account_info> out;
  for (;;) {
    auto row = q->step();
    if (!row) return std::move(row).err();
    if (!*row) break;
    out.push_back({q->column_text(0), q->column_text(1), q->column_int(2) != 0, iso8601(q->column_int(3))});
  }
  return out;
}

// ---- sessions ----

result<std::string> accounts_store::login(const std::string& username, const std::string& password,
                                          sys_clock::time_point now) {
  auto a = find_account(username);
  if (!a) {
    if (a.err().code != errc::not_found) return std::move(a).err();
    (void)pbkdf2_sha256(password, std::string_view(dummy_salt, salt_bytes), options_.pbkdf2_iterations);
    return make_error(errc::unauthorized, wrong_login);
  }
  const digest hash = pbkdf2_sha256(password, a->salt, int(a->iterations));
  if (!constant_time_equal(as_bytes(hash), a->hash)) return make_error(errc::unauthorized, wrong_login);
  // Only someone who knows the password learns the account's state.
  if (a->info.status == "pending") return make_error(errc::forbidden, "account not approved");
  if (a->info.status != "approved") return make_error(errc::forbidden, "account revoked");

  std::string token = new_secret();
  const std::int64_t now_s = unix_seconds(now);
  auto tx = sqlite_tx::begin(*db_);
  if (!tx) return std::move(tx).err();
  {
    // Expired sessions are swept here, the only place sessions are made.
    auto q = db_->prepare("DELETE FROM sessions WHERE expires_at <= ?");
    if (!q) return std::move(q).err();
    MPAKT_TRY(q->bind(1, now_s).run());
  }
  {
    auto q = db_->prepare("INSERT INTO sessions (token_hash, account_id, expires_at) VALUES (?, ?, ?)");
    if (!q) return std::move(q).err();
    const auto lifetime = std::chrono::duration_cast<std::chrono::seconds>(session_lifetime).count();
    MPAKT_TRY(q->bind_blob(1, as_bytes(sha256(token))).bind(2, a->id).bind(3, now_s + lifetime).run());
  }
  MPAKT_TRY(tx->commit());
  return token;
}

result<accounts_store::session_owner> accounts_store::session_account(const std::string& token,
                                                                      sys_clock::time_point now) {
  if (token.size() != secret_text_chars) return make_error(errc::unauthorized, bad_token);
  // The account must still be approved: revoking it also deletes its sessions, but an
  // operator's revoke from another process may race with this call.
  auto q = db_->prepare(
      "SELECT a.id, a.username FROM sessions s JOIN accounts a ON a.id = s.account_id "
      "WHERE s.token_hash = ? AND s.expires_at > ? AND a.status = 'approved'");
  if (!q) return std::move(q).err();
  q->bind_blob(1, as_bytes(sha256(token))).bind(2, unix_seconds(now));
  auto row = q->step();
  if (!row) return std::move(row).err();
  if (!*row) return make_error(errc::unauthorized, bad_token);
  return session_owner{q->column_int(0), q->column_text(1)};
}

// ---- keys, by their owner ----

result<key_info> accounts_store::create_key(const std::string& token, const std::string& label,
                                            sys_clock::time_point now) {
  MPAKT_TRY(check_label(label));
  auto tx = sqlite_tx::begin(*db_);
  if (!tx) return std::move(tx).err();
  auto owner = session_account(token, now);
  if (!owner) return std::move(owner).err();
  {
    auto q = db_->prepare("SELECT COUNT(*) FROM api_keys WHERE account_id = ?");
    if (!q) return std::move(q).err();
    auto row = q->bind(1, owner->id).step();
    if (!row) return std::move(row).err();
    if (q->column_int(0) >= max_keys_per_account)
      return make_error(errc::limit, "account " + owner->username + " has " +
                                         std::to_string(max_keys_per_account) +
                                         " API keys, the most allowed; delete one first");
  }
  key_info k;
  k.key = key_prefix + new_secret();
  k.key_id = new_id("k_");
  k.label = label;
  k.created_at = iso8601(unix_seconds(now));
  k.active = true;
  k.state = "active";
  {
    auto q = db_->prepare(
        "INSERT INTO api_keys (key_id, key_hash, account_id, label, state, created_at, last_used_at) "
        "VALUES (?, ?, ?, ?, 'active', ?, NULL)");
    if (!q) return std::move(q).err();
    MPAKT_TRY(q->bind(1, k.key_id)
                  .bind_blob(2, as_bytes(sha256(k.key)))
                  .bind(3, owner->id)
                  .bind(4, label)
                  .bind(5, unix_seconds(now))
                  .run());
  }
  MPAKT_TRY(tx->commit());
  return k;
}

result<std::vector<key_info>> accounts_store::keys_of_account(std::int64_t account_id,
                                                              sys_clock::time_point now) {
  auto tx = sqlite_tx::begin(*db_);
  if (!tx) return std::move(tx).err();
  {
    // Listings show idle keys as deactivated, and make it so, as check_key would.
    auto q = db_->prepare(
        "UPDATE api_keys SET state = 'deactivated' WHERE account_id = ? AND state = 'active' "
        "AND COALESCE(last_used_at, created_at) < ?");
    if (!q) return std::move(q).err();
    const auto limit = std::chrono::duration_cast<std::chrono::seconds>(key_idle_limit).count();
    MPAKT_TRY(q->bind(1, account_id).bind(2, unix_seconds(now) - limit).run());
  }
  std::vector<key_info> out;
  {
    auto q = db_->prepare(
        "SELECT key_id, label, state, created_at, last_used_at FROM api_keys WHERE account_id = ? "
        "ORDER BY created_at, rowid");
    if (!q) return std::move(q).err();
    q->bind(1, account_id);
    for (;;) {
      auto row = q->step();
      if (!row) return std::move(row).err();
      if (!*row) break;
      out.push_back(read_key_row(*q));
    }
  }
  MPAKT_TRY(tx->commit());
  return out;
}

result<std::vector<key_info>> accounts_store::list_keys(const std::string& token, sys_clock::time_point now) {
  auto owner = session_account(token, now);
  if (!owner) return std::move(owner).err();
  return keys_of_account(owner->id, now);
}

status accounts_store::delete_key(const std::string& token, const std::string& key_id,
                                  sys_clock::time_point now) {
  auto tx = sqlite_tx::begin(*db_);
  if (!tx) return std::move(tx).err();
  auto owner = session_account(token, now);
  if (!owner) return std::move(owner).err();
  auto q = db_->prepare("DELETE FROM api_keys WHERE key_id = ? AND account_id = ?");
  if (!q) return std::move(q).err();
  MPAKT_TRY(q->bind(1, key_id).bind(2, owner->id).run());
  // Another account's key id is refused exactly as an unknown one.
  if (db_->changes() == 0) return unknown_key_id(key_id);
  return tx->commit();
}

// ---- keys, on every API call ----

result<key_identity> accounts_store::check_key(const std::string& key, sys_clock::time_point now) {
  const auto invalid_key = [] { return make_error(errc::unauthorized, "invalid API key"); };
  if (key.size() != 4 + secret_text_chars || key.compare(0, 4, key_prefix) != 0) return invalid_key();

  key_identity id;
  std::string state, account_status;
  std::int64_t created = 0;
  std::optional<std::int64_t> last_used;
  {
    auto q = db_->prepare(
        "SELECT k.key_id, k.state, k.created_at, k.last_used_at, a.username, a.status, a.admin "
        "FROM api_keys k JOIN accounts a ON a.id = k.account_id WHERE k.key_hash = ?");
    if (!q) return std::move(q).err();
    auto row = q->bind_blob(1, as_bytes(sha256(key))).step();
    if (!row) return std::move(row).err();
    if (!*row) return invalid_key();
    id.key_id = q->column_text(0);
    state = q->column_text(1);
    created = q->column_int(2);
    last_used = q->column_optional_int(3);
    id.username = q->column_text(4);
    account_status = q->column_text(5);
    id.admin = q->column_int(6) != 0;
  }
  const auto deactivated = [] {
    return make_error(errc::unauthorized, "API key deactivated after 30 days unused");
  };
  if (state == "revoked") return make_error(errc::unauthorized, "API key revoked");
  if (state == "deactivated") return deactivated();
  if (account_status == "revoked") return make_error(errc::unauthorized, "account revoked");
  if (account_status != "approved") return make_error(errc::unauthorized, "account not approved");

  const std::int64_t now_s = unix_seconds(now);
  const std::int64_t idle_limit = std::chrono::duration_cast<std::chrono::seconds>(key_idle_limit).count();
  if (now_s - last_used.value_or(created) > idle_limit) {
    auto q = db_->prepare("UPDATE api_keys SET state = 'deactivated' WHERE key_id = ? AND state = 'active'");
    if (!q) return std::move(q).err();
    MPAKT_TRY(q->bind(1, id.key_id).run());
    return deactivated();
  }
  if (!last_used || now_s - *last_used >= last_used_granularity.count()) {
    auto q = db_->prepare("UPDATE api_keys SET last_used_at = ? WHERE key_id = ?");
    if (!q) return std::move(q).err();
    MPAKT_TRY(q->bind(1, now_s).bind(2, id.key_id).run());
  }
  return id;
}

// ---- operator helpers ----

result<std::vector<key_info>> accounts_store::keys_of(const std::string& username, sys_clock::time_point now) {
  auto a = find_account(username);
  if (!a) return std::move(a).err();
  return keys_of_account(a->id, now);
}

status accounts_store::revoke_key(const std::string& key_id) {
  auto q = db_->prepare("UPDATE api_keys SET state = 'revoked' WHERE key_id = ?");
  if (!q) return std::move(q).err();
  MPAKT_TRY(q->bind(1, key_id).run());
  if (db_->changes() == 0) return unknown_key_id(key_id);
  return ok_status();
}

// ---- volunteers' join tokens ----

result<volunteer_token_info> accounts_store::create_volunteer_token(const std::string& name, std::uint64_t memory_cap,
                                                                    double expires_days, sys_clock::time_point now) {
  if (!valid_username(name)) return invalid("a volunteer's name must be 3 to 64 characters of A-Z, a-z, 0-9, '_', '.' or '-'");
  if (!(expires_days >= 0) || expires_days > 36500) return invalid("expiry must be 0 (never) to 36500 days");
  if (memory_cap > (std::uint64_t(1) << 62)) return invalid("memory cap is too large");
  volunteer_token_info t;
  t.token = volunteer_prefix + new_secret();
  t.name = name;
  t.memory_cap = memory_cap;
  const std::int64_t now_s = unix_seconds(now);
  t.created_at = iso8601(now_s);
  std::optional<std::int64_t> expires;
  if (expires_days > 0) {
    expires = now_s + std::int64_t(expires_days * 86400.0 + 0.5);
    t.expires_at = iso8601(*expires);
  }
  t.state = "active";
  auto tx = sqlite_tx::begin(*db_);
  if (!tx) return std::move(tx).err();
  {
    auto q = db_->prepare("DELETE FROM volunteer_tokens WHERE name = ?");
    if (!q) return std::move(q).err();
    MPAKT_TRY(q->bind(1, name).run());
  }
  {
    auto q = db_->prepare(
        "INSERT INTO volunteer_tokens (name, token_hash, memory_cap, state, created_at, expires_at) "
        "VALUES (?, ?, ?, 'active', ?, ?)");
    if (!q) return std::move(q).err();
    q->bind(1, name).bind_blob(2, as_bytes(sha256(t.token))).bind(3, std::int64_t(memory_cap)).bind(4, now_s);
    if (expires) q->bind(5, *expires);
    else q->bind_null(5);
    MPAKT_TRY(q->run());
  }
  MPAKT_TRY(tx->commit());
  return t;
}

result<std::vector<volunteer_token_info>> accounts_store::volunteer_tokens(sys_clock::time_point now) {
  auto q = db_->prepare(
      "SELECT name, memory_cap, state, created_at, expires_at, "
      "EXISTS (SELECT 1 FROM volunteer_quarantines q WHERE q.token_hash = t.token_hash) "
      "FROM volunteer_tokens t ORDER BY created_at, name");
  if (!q) return std::move(q).err();
  std::vector<volunteer_token_info> out;
  for (;;) {
    auto row = q->step();
    if (!row) return std::move(row).err();
    if (!*row) break;
    volunteer_token_info t;
    t.name = q->column_text(0);
    t.memory_cap = std::uint64_t(q->column_int(1));
    t.state = q->column_text(2);
    t.created_at = iso8601(q->column_int(3));
    if (t.state == "active" && q->column_int(5) != 0) t.state = "quarantined";
    if (auto e = q->column_optional_int(4)) {
      t.expires_at = iso8601(*e);
      if (t.state == "active" && *e <= unix_seconds(now)) t.state = "expired";
    }
    out.push_back(std::move(t));
  }
  return out;
}

status accounts_store::revoke_volunteer(const std::string& name) {
  auto q = db_->prepare("UPDATE volunteer_tokens SET state = 'revoked' WHERE name = ?");
  if (!q) return std::move(q).err();
  MPAKT_TRY(q->bind(1, name).run());
  if (db_->changes() == 0) return make_error(errc::not_found, "no volunteer token named " + name);
  return {};
}

status accounts_store::quarantine_volunteer(const std::string& digest, sys_clock::time_point now) {
  auto q = db_->prepare(
      "INSERT OR IGNORE INTO volunteer_quarantines (token_hash, at) "
      "SELECT token_hash, ? FROM volunteer_tokens WHERE token_hash = ? AND state = 'active'");
  if (!q) return std::move(q).err();
  return q->bind(1, unix_seconds(now)).bind_blob(2, digest).run();
}

result<volunteer_grant> accounts_store::check_volunteer_token(const std::string& token, sys_clock::time_point now) {
  if (token.size() != 4 + secret_text_chars || token.compare(0, 4, volunteer_prefix) != 0)
    return make_error(errc::unauthorized, "invalid volunteer token");
  return check_volunteer_digest(as_bytes(sha256(token)), now);
}

result<volunteer_grant> accounts_store::check_volunteer_digest(const std::string& digest, sys_clock::time_point now) {
  auto q = db_->prepare(
      "SELECT name, memory_cap, state, expires_at, "
      "EXISTS (SELECT 1 FROM volunteer_quarantines q WHERE q.token_hash = t.token_hash) "
      "FROM volunteer_tokens t WHERE token_hash = ?");
  if (!q) return std::move(q).err();
  auto row = q->bind_blob(1, digest).step();
  if (!row) return std::move(row).err();
  if (!*row) return make_error(errc::unauthorized, "invalid volunteer token");
  volunteer_grant g{q->column_text(0), std::uint64_t(q->column_int(1)), digest};
  if (q->column_text(2) != "active") return make_error(errc::unauthorized, "volunteer token " + g.name + " was revoked");
  if (q->column_int(4) != 0)
    return make_error(errc::unauthorized, "volunteer token " + g.name +
                                              " was quarantined (its results differed from the verifier's); ask the "
                                              "operator for a new token");
  if (auto e = q->column_optional_int(3); e && *e <= unix_seconds(now))
    return make_error(errc::unauthorized, "volunteer token " + g.name + " expired at " + iso8601(*e));
  return g;
}

}  // namespace mpakt::accounts
