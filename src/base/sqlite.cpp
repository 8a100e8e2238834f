#include "base/sqlite.hpp"

#include <fmt/format.h>

#include <cstring>

namespace motor {

Expected<SqliteDb> SqliteDb::open(const std::string& path, bool create) {
  sqlite3* raw = nullptr;
  const int flags = SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0) | SQLITE_OPEN_NOFOLLOW |
                    SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  std::unique_ptr<sqlite3, Close> db(raw);
  if (rc != SQLITE_OK) {
    const int sys = raw ? sqlite3_system_errno(raw) : 0;
    return make_error("state", fmt::format("opening {}: {}{}", path, raw ? sqlite3_errmsg(raw) : sqlite3_errstr(rc),
                                           sys ? fmt::format(" ({})", std::strerror(sys)) : ""));
  }
  return SqliteDb(std::move(db), path);
}

Error SqliteDb::error_of(sqlite3* db, std::string_view what) {
  const char* file = sqlite3_db_filename(db, "main");
  const int sys = sqlite3_system_errno(db);
  // A full disk reads as the system's own words, which callers (and operators) look for.
  const int primary = sqlite3_errcode(db) & 0xff;
  const bool io = primary == SQLITE_FULL || primary == SQLITE_IOERR || primary == SQLITE_CANTOPEN;
  std::string why = io && sys ? fmt::format("{} ({})", std::strerror(sys), sqlite3_errmsg(db)) : sqlite3_errmsg(db);
  return make_error(primary == SQLITE_FULL ? "runner_disk_full" : "state", fmt::format("{} ({}): {}", what, file ? file : "?", why));
}

Status SqliteDb::exec(const char* sql) {
  if (sqlite3_exec(db_.get(), sql, nullptr, nullptr, nullptr) != SQLITE_OK) return error(sql);
  return {};
}

Expected<SqliteStatement> SqliteDb::prepare(std::string_view sql) {
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(db_.get(), sql.data(), static_cast<int>(sql.size()), &s, nullptr) != SQLITE_OK) {
    return error(fmt::format("preparing \"{}\"", sql));
  }
  return SqliteStatement(s);
}

Expected<int64_t> SqliteDb::query_int(const char* sql) {
  auto st = prepare(sql);
  if (!st) return st.error();
  auto row = st->step();
  if (!row) return row.error();
  if (!*row) return make_error("state", fmt::format("{} ({}): no row", sql, path_));
  return st->integer(0);
}

SqliteStatement& SqliteStatement::bind(int index, std::string_view text) {
  sqlite3_bind_text(stmt_.get(), index, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
  return *this;
}

SqliteStatement& SqliteStatement::bind(int index, int64_t value) {
  sqlite3_bind_int64(stmt_.get(), index, value);
  return *this;
}

SqliteStatement& SqliteStatement::bind_null(int index) {
  sqlite3_bind_null(stmt_.get(), index);
  return *this;
}

Expected<bool> SqliteStatement::step() {
  const int rc = sqlite3_step(stmt_.get());
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return SqliteDb::error_of(sqlite3_db_handle(stmt_.get()), fmt::format("running \"{}\"", sqlite3_sql(stmt_.get())));
}

Status SqliteStatement::run() {
  auto r = step();
  reset();
  if (!r) return r.error();
  return {};
}

void SqliteStatement::reset() {
  sqlite3_reset(stmt_.get());
  sqlite3_clear_bindings(stmt_.get());
}

std::string SqliteStatement::text(int column) const {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_.get(), column));
  return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(stmt_.get(), column))) : std::string();
}

int64_t SqliteStatement::integer(int column) const { return sqlite3_column_int64(stmt_.get(), column); }

bool SqliteStatement::is_null(int column) const { return sqlite3_column_type(stmt_.get(), column) == SQLITE_NULL; }

}  // namespace motor
