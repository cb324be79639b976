#include "actors/accounts/sqlite.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cassert>
#include <cerrno>
#include <cstring>

namespace mpakt::accounts {

// ---- sqlite_stmt ----

sqlite_stmt::~sqlite_stmt() {
  if (!s_) return;
  sqlite3_reset(s_);
  sqlite3_clear_bindings(s_);
}

sqlite_stmt& sqlite_stmt::bind(int i, std::int64_t v) {
  [[maybe_unused]] const int rc = sqlite3_bind_int64(s_, i, v);
  assert(rc == SQLITE_OK);
  return *this;
}

sqlite_stmt& sqlite_stmt::bind(int i, std::string_view text) {
  // SQLITE_TRANSIENT: SQLite copies the bytes, so the caller's buffer may go away.
  [[maybe_unused]] const int rc = sqlite3_bind_text(s_, i, text.data(), int(text.size()), SQLITE_TRANSIENT);
  assert(rc == SQLITE_OK);
  return *this;
}

sqlite_stmt& sqlite_stmt::bind_blob(int i, std::string_view bytes) {
  [[maybe_unused]] const int rc = sqlite3_bind_blob(s_, i, bytes.data(), int(bytes.size()), SQLITE_TRANSIENT);
  assert(rc == SQLITE_OK);
  return *this;
}

sqlite_stmt& sqlite_stmt::bind_null(int i) {
  [[maybe_unused]] const int rc = sqlite3_bind_null(s_, i);
  assert(rc == SQLITE_OK);
  return *this;
}

result<bool> sqlite_stmt::step() {
  const int rc = sqlite3_step(s_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  sqlite3* db = sqlite3_db_handle(s_);
  // Constraint failures are reported with the extended code so callers can map them.
  const errc code = (rc & 0xff) == SQLITE_CONSTRAINT ? errc::conflict : errc::internal;
  return make_error(code, std::string("accounts database: ") + sqlite3_errmsg(db));
}

status sqlite_stmt::run() {
  for (;;) {
    auto r = step();
    if (!r) return std::move(r).err();
    if (!*r) return ok_status();
  }
}

std::int64_t sqlite_stmt::column_int(int i) const { return sqlite3_column_int64(s_, i); }

std::optional<std::int64_t> sqlite_stmt::column_optional_int(int i) const {
  if (sqlite3_column_type(s_, i) == SQLITE_NULL) return std::nullopt;
  return sqlite3_column_int64(s_, i);
}

std::string sqlite_stmt::column_text(int i) const {
  const auto* p = sqlite3_column_text(s_, i);
  const int n = sqlite3_column_bytes(s_, i);
  return p ? std::string(reinterpret_cast<const char*>(p), std::size_t(n)) : std::string();
}

std::string sqlite_stmt::column_blob(int i) const {
  const void* p = sqlite3_column_blob(s_, i);
  const int n = sqlite3_column_bytes(s_, i);
  return p ? std::string(static_cast<const char*>(p), std::size_t(n)) : std::string();
}

// ---- sqlite_db ----

result<std::unique_ptr<sqlite_db>> sqlite_db::open(const std::string& path) {
  // The file holds password hashes: create it readable by its owner only. SQLite gives the
  // -wal and -shm files the same permissions as the database file.
  if (::access(path.c_str(), F_OK) != 0) {
    const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0)
      return make_error(errc::internal, "cannot create the accounts database " + path + ": " + std::strerror(errno));
    ::close(fd);
  }
  sqlite3* raw = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &raw,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  std::unique_ptr<sqlite_db> db(new sqlite_db(raw));  // owns raw even when opening failed
  if (rc != SQLITE_OK) {
    return make_error(errc::internal, "cannot open the accounts database " + path + ": " +
                                          (raw ? sqlite3_errmsg(raw) : sqlite3_errstr(rc)));
  }
  // A second process (the admin CLI next to a running server) waits up to 5 s for the lock.
  sqlite3_busy_timeout(raw, 5000);
  MPAKT_TRY(db->exec("PRAGMA foreign_keys = ON"));
  // WAL: readers do not block the writer; NORMAL sync is durable across process crashes and
  // loses at most the last commits on power loss, which is fine for last-used timestamps.
  MPAKT_TRY(db->exec("PRAGMA journal_mode = WAL"));
  MPAKT_TRY(db->exec("PRAGMA synchronous = NORMAL"));
  // Deleted rows (old key hashes, session hashes) are overwritten, not left in free pages.
  MPAKT_TRY(db->exec("PRAGMA secure_delete = ON"));
  return db;
}

sqlite_db::~sqlite_db() {
  for (auto& [sql, s] : cache_) sqlite3_finalize(s);
  sqlite3_close_v2(db_);
}

result<sqlite_stmt> sqlite_db::prepare(const char* sql) {
  auto it = cache_.find(sql);
  if (it != cache_.end()) return sqlite_stmt(it->second);
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, nullptr) != SQLITE_OK)
    return fail("prepare a statement");
  cache_.emplace(sql, s);
  return sqlite_stmt(s);
}

status sqlite_db::exec(const char* sql) {
  if (sqlite3_exec(db_, sql, nullptr, nullptr, nullptr) != SQLITE_OK) return fail(sql);
  return ok_status();
}

int sqlite_db::changes() const { return sqlite3_changes(db_); }

error sqlite_db::fail(std::string_view action) const {
  return make_error(errc::internal,
                    "accounts database: " + std::string(action) + ": " + sqlite3_errmsg(db_));
}

// ---- sqlite_tx ----

result<sqlite_tx> sqlite_tx::begin(sqlite_db& db) {
  MPAKT_TRY(db.exec("BEGIN IMMEDIATE"));
  return sqlite_tx(&db);
}

sqlite_tx::~sqlite_tx() {
  if (db_) (void)db_->exec("ROLLBACK");
}

status sqlite_tx::commit() {
  MPAKT_TRY(db_->exec("COMMIT"));
  db_ = nullptr;
  return ok_status();
}

}  // namespace mpakt::accounts
