#pragma once
/// A thin RAII layer over SQLite for the accounts store: a connection that owns its prepared
/// statements, a borrowed statement that binds parameters and resets itself, and a write
/// transaction that rolls back unless committed. Every value reaches SQL as a bound parameter.
///
/// Thread-safety: none. One owner uses a connection from one thread at a time.

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "runtime/status.hpp"

namespace mpakt::accounts {

/// One prepared statement borrowed from a `sqlite_db`'s cache. Parameters are 1-based, in the
/// order the SQL text names them. The destructor resets the statement and clears its bindings,
/// so the next borrower starts clean and no secret stays bound.
class sqlite_stmt {
 public:
  explicit sqlite_stmt(sqlite3_stmt* s) : s_(s) {}
  sqlite_stmt(sqlite_stmt&& o) noexcept : s_(o.s_) { o.s_ = nullptr; }
  sqlite_stmt(const sqlite_stmt&) = delete;
  sqlite_stmt& operator=(const sqlite_stmt&) = delete;
  sqlite_stmt& operator=(sqlite_stmt&&) = delete;
  ~sqlite_stmt();

  sqlite_stmt& bind(int i, std::int64_t v);
  sqlite_stmt& bind(int i, std::string_view text);  ///< TEXT
  sqlite_stmt& bind_blob(int i, std::string_view bytes);
  sqlite_stmt& bind_null(int i);

  /// Steps once: true with a row, false when done; an error otherwise.
  result<bool> step();
  /// Steps until done (for statements that return no rows).
  status run();

  std::int64_t column_int(int i) const;
  std::optional<std::int64_t> column_optional_int(int i) const;
  std::string column_text(int i) const;
  std::string column_blob(int i) const;

 private:
  sqlite3_stmt* s_;
};

/// A connection to one database file; owns the statements it prepares (cached by SQL text).
class sqlite_db {
 public:
  /// Opens (creating if missing) the file at `path`, with foreign keys on, WAL journalling and
  /// a busy timeout so that a second process (`mpakt admin`) waits for a writer instead of
  /// failing.
  static result<std::unique_ptr<sqlite_db>> open(const std::string& path);
  ~sqlite_db();
  sqlite_db(const sqlite_db&) = delete;
  sqlite_db& operator=(const sqlite_db&) = delete;

  /// The cached prepared statement for `sql`, ready to bind. Never borrow the same SQL twice at
  /// once.
  result<sqlite_stmt> prepare(const char* sql);
  /// Runs SQL text with no parameters (schema, pragmas, BEGIN/COMMIT).
  status exec(const char* sql);
  /// Rows changed by the last INSERT, UPDATE or DELETE.
  int changes() const;
  /// An internal error naming the failed action and SQLite's message (never parameter values).
  error fail(std::string_view action) const;

 private:
  explicit sqlite_db(sqlite3* db) : db_(db) {}
  sqlite3* db_;
  std::unordered_map<std::string, sqlite3_stmt*> cache_;
};

/// A write transaction (BEGIN IMMEDIATE, so it takes the write lock up front and cannot fail
/// halfway on a lock upgrade). Rolls back in the destructor unless commit() succeeded.
class sqlite_tx {
 public:
  static result<sqlite_tx> begin(sqlite_db& db);
  sqlite_tx(sqlite_tx&& o) noexcept : db_(o.db_) { o.db_ = nullptr; }
  sqlite_tx(const sqlite_tx&) = delete;
  sqlite_tx& operator=(const sqlite_tx&) = delete;
  sqlite_tx& operator=(sqlite_tx&&) = delete;
  ~sqlite_tx();
  status commit();

 private:
  explicit sqlite_tx(sqlite_db* db) : db_(db) {}
  sqlite_db* db_;
};

}  // namespace mpakt::accounts
