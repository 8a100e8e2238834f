// A small RAII wrapper over Debian's libsqlite3: a connection and its prepared statements, with
// every failure an Error that names the file and says why (the system's errno where there is one:
// "No space left on device" rather than SQLite's "database or disk is full").
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "motor/expected.hpp"

namespace motor {

class SqliteStatement;

class SqliteDb {
 public:
  // Opens (creating it if `create`) the database at `path`; never follows an existing symlink.
  static Expected<SqliteDb> open(const std::string& path, bool create);
  SqliteDb(SqliteDb&&) noexcept = default;
  SqliteDb& operator=(SqliteDb&&) noexcept = default;

  // Runs statements that return no rows (pragmas, DDL, BEGIN/COMMIT).
  Status exec(const char* sql);
  Expected<SqliteStatement> prepare(std::string_view sql);
  // The first column of the first row of `sql`, as an integer (PRAGMA user_version and the like).
  Expected<int64_t> query_int(const char* sql);
  // An error from SQLite's last failure on this connection, prefixed by `what`.
  Error error(std::string_view what) const { return error_of(db_.get(), what); }
  static Error error_of(sqlite3* db, std::string_view what);
  const std::string& path() const { return path_; }

 private:
  struct Close {
    void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
  };
  SqliteDb(std::unique_ptr<sqlite3, Close> db, std::string path) : db_(std::move(db)), path_(std::move(path)) {}
  std::unique_ptr<sqlite3, Close> db_;
  std::string path_;
  friend class SqliteStatement;
};

class SqliteStatement {
 public:
  SqliteStatement(SqliteStatement&&) noexcept = default;
  SqliteStatement& operator=(SqliteStatement&&) noexcept = default;

  // Binds are 1-based, as in SQLite. Text is copied (SQLITE_TRANSIENT).
  SqliteStatement& bind(int index, std::string_view text);
  SqliteStatement& bind(int index, int64_t value);
  SqliteStatement& bind_null(int index);
  // One step: true while there is a row, false when done; an error otherwise.
  Expected<bool> step();
  // Runs a statement that returns no rows, then resets it for the next binds.
  Status run();
  void reset();
  std::string text(int column) const;
  int64_t integer(int column) const;
  bool is_null(int column) const;

 private:
  struct Finalize {
    void operator()(sqlite3_stmt* s) const { sqlite3_finalize(s); }
  };
  explicit SqliteStatement(sqlite3_stmt* s) : stmt_(s) {}
  std::unique_ptr<sqlite3_stmt, Finalize> stmt_;  // its connection outlives it (and may move)
  friend class SqliteDb;
};

}  // namespace motor
