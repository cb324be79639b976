#pragma once
/// Accounts, session tokens and API keys, kept in one SQLite file (`<data-dir>/accounts.sqlite3`).
/// Implements decisions.md "Accounts and keys (Z-01)".
///
/// Lifecycle: an account signs up (pending) → an operator approves it → its owner logs in for
/// a 24-hour session token → creates API keys with that token → each API call presents a key
/// (`check_key`). Revoking an account revokes all its keys; a key unused for more than 30 days
/// is deactivated for good.
///
/// Secrets: passwords are kept only as PBKDF2-HMAC-SHA256 (16-byte random salt, per-account
/// iteration count); API keys and session tokens (256-bit random) only as SHA-256. No secret
/// appears in an error message, and this class logs nothing.
///
/// Ownership and thread-safety: the accounts actor owns the one `accounts_store` of a
/// coordinator and serialises every call; the class is NOT thread-safe. Other processes
/// (`mpakt admin`) may open the same file at the same time: SQLite's locking (WAL, 5 s busy
/// timeout) keeps them consistent, and every read-modify-write runs in one transaction.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/status.hpp"

namespace mpakt::accounts {

class sqlite_db;

using sys_clock = std::chrono::system_clock;

/// The file name of the store inside a data directory.
inline constexpr const char* accounts_file_name = "accounts.sqlite3";

/// A key unused for more than this is deactivated.
inline constexpr std::chrono::hours key_idle_limit{24 * 30};
/// A session token from login() lasts this long.
inline constexpr std::chrono::hours session_lifetime{24};
/// check_key() writes last_used_at at most this often per key (see check_key).
inline constexpr std::chrono::seconds last_used_granularity{60};
/// At most this many keys per account (deleted keys do not count).
inline constexpr int max_keys_per_account = 100;

struct accounts_options {
  /// PBKDF2 rounds for new password hashes; each account keeps the count it was hashed with,
  /// so changing this never locks anyone out. Tests use a small number.
  int pbkdf2_iterations = 200000;
};

/// An account as listings show it; never holds secrets.
struct account_info {
  std::string username;
  std::string status;      ///< "pending" | "approved" | "revoked"
  bool admin = false;
  std::string created_at;  ///< ISO-8601 UTC, e.g. "2025-05-01T12:00:00Z"
};

/// An API key as create_key() returns it (with `key`) or listings show it (without).
struct key_info {
  std::string key;           ///< "mpk_…": set only by create_key(), shown once
  std::string key_id;        ///< "k_" + 24 hex digits
  std::string label;
  std::string created_at;    ///< ISO-8601 UTC
  std::string last_used_at;  ///< ISO-8601 UTC; empty when never used
  bool active = true;        ///< false once revoked or deactivated
  std::string state;         ///< "active" | "revoked" | "deactivated"
};

/// A volunteer's join token as create_volunteer_token() returns it (with `token`) or listings
/// show it (without).
struct volunteer_token_info {
  std::string token;             ///< "mpv_…": set only by create_volunteer_token(), shown once
  std::string name;
  std::uint64_t memory_cap = 0;  ///< bytes the pool may use of the volunteer; 0 = what it offers
  std::string created_at;        ///< ISO-8601 UTC
  std::string expires_at;        ///< ISO-8601 UTC; empty: never
  std::string state;             ///< "active" | "revoked" | "expired"
};

/// What a valid volunteer token grants.
struct volunteer_grant {
  std::string name;
  std::uint64_t memory_cap = 0;
  std::string digest;  ///< the token's SHA-256 (raw bytes), to check it again later
};

/// Who a valid API key belongs to.
struct key_identity {
  std::string username;
  std::string key_id;
  bool admin = false;
};

class accounts_store {
 public:
  /// Opens the store at `path`, creating the file and schema when missing. Refuses a file whose
  /// schema version is newer than this build knows.
  static result<std::unique_ptr<accounts_store>> open(const std::string& path,
                                                      accounts_options options = {});
  ~accounts_store();
  accounts_store(const accounts_store&) = delete;
  accounts_store& operator=(const accounts_store&) = delete;

  // ---- accounts ----

  /// Creates an account: `username` 3–64 characters of [A-Za-z0-9_.-] (unique, ignoring case),
  /// `password` at least 8 characters (at most 1024 bytes). Pending unless `approve_now`
  /// (`mpakt serve --dev`). Errors: invalid (naming the field), conflict "username alice is
  /// taken".
  result<account_info> sign_up(const std::string& username, const std::string& password,
                               bool approve_now, sys_clock::time_point now = sys_clock::now());
  /// Approves a pending account; re-approving a revoked one reinstates the account but not its
  /// keys. not_found for an unknown name.
  status approve(const std::string& username);
  /// Revokes the account, all its keys and its session tokens. not_found for an unknown name.
  status revoke(const std::string& username);
  /// Grants or withdraws the admin flag (admin keys may call /api/admin routes).
  status set_admin(const std::string& username, bool admin);
  /// All accounts, oldest first.
  result<std::vector<account_info>> list();

  // ---- sessions (for key management) ----

  /// A session token (base64url of 32 random bytes) valid for `session_lifetime`.
  /// Errors: unauthorized "wrong username or password" (the same for an unknown name, which
  /// costs the same PBKDF2 work); forbidden "account not approved" / "account revoked".
  result<std::string> login(const std::string& username, const std::string& password,
                            sys_clock::time_point now = sys_clock::now());

  // ---- keys, as their owner manages them (by session token) ----

  /// A new key for the token's account; `key` is returned only here. `label` at most 128 bytes,
  /// no control characters. Errors: unauthorized (bad or expired token), invalid (label),
  /// limit (max_keys_per_account).
  result<key_info> create_key(const std::string& token, const std::string& label,
                              sys_clock::time_point now = sys_clock::now());
  /// The token's account's keys, oldest first, without key material.
  result<std::vector<key_info>> list_keys(const std::string& token, sys_clock::time_point now = sys_clock::now());
  /// Deletes one of the token's account's keys. Another account's key id gets not_found,
  /// exactly as an unknown id.
  status delete_key(const std::string& token, const std::string& key_id,
                    sys_clock::time_point now = sys_clock::now());

  // ---- keys, as every API call checks them ----

  /// Who `key` belongs to. unauthorized with "invalid API key" (unknown or deleted),
  /// "API key revoked", "API key deactivated after 30 days unused", "account revoked" or
  /// "account not approved". A key idle (by last use, else creation) for more than
  /// `key_idle_limit` at `now` is deactivated in the database and refused from then on.
  /// Success records the use, writing last_used_at only when the stored value is at least
  /// `last_used_granularity` old: one write per key per minute at most, so the idle clock is
  /// exact to within a minute.
  result<key_identity> check_key(const std::string& key, sys_clock::time_point now = sys_clock::now());

  // ---- operator helpers (mpakt admin) ----

  /// An account's keys (not_found for an unknown name).
  result<std::vector<key_info>> keys_of(const std::string& username, sys_clock::time_point now = sys_clock::now());
  /// Revokes one key by id (not_found for an unknown id); idempotent.
  status revoke_key(const std::string& key_id);

  // ---- volunteers' join tokens (mpakt admin volunteer-token; the cluster port's gate) ----
  /// A new join token for the volunteer NAME (the rules of a username); `token` is returned only
  /// here. A NAME that already has a token gets a new one and the old one stops working.
  /// `expires_days` > 0 makes it expire that long after `now` (fractions allowed); 0 = never.
  result<volunteer_token_info> create_volunteer_token(const std::string& name, std::uint64_t memory_cap,
                                                      double expires_days, sys_clock::time_point now = sys_clock::now());
  /// Every volunteer token, oldest first, without token material.
  result<std::vector<volunteer_token_info>> volunteer_tokens(sys_clock::time_point now = sys_clock::now());
  /// Revokes NAME's token (not_found for an unknown name); idempotent.
  status revoke_volunteer(const std::string& name);
  /// Marks the token with this digest quarantined (its volunteer's results differed from a
  /// verifier's): refused from then on, across restarts, listed as "quarantined". A token
  /// already revoked or replaced is left as it is; idempotent.
  status quarantine_volunteer(const std::string& digest, sys_clock::time_point now = sys_clock::now());
  /// What `token` grants. unauthorized with "invalid volunteer token" (malformed or unknown),
  /// "volunteer token NAME was revoked", "… was quarantined …" or "volunteer token NAME
  /// expired at …".
  result<volunteer_grant> check_volunteer_token(const std::string& token, sys_clock::time_point now = sys_clock::now());
  /// The same for a token known by its digest (volunteer_grant::digest): whether a connected
  /// volunteer's token still holds.
  result<volunteer_grant> check_volunteer_digest(const std::string& digest, sys_clock::time_point now = sys_clock::now());

 private:
  struct account_row;
  struct session_owner;
  accounts_store(std::unique_ptr<sqlite_db> db, accounts_options options);
  status create_schema();
  result<account_row> find_account(const std::string& username);
  result<session_owner> session_account(const std::string& token, sys_clock::time_point now);
  result<std::vector<key_info>> keys_of_account(std::int64_t account_id, sys_clock::time_point now);

  std::unique_ptr<sqlite_db> db_;
  accounts_options options_;
};

}  // namespace mpakt::accounts
