// The job table in SQLite (state_store.hpp): state.db, its schema and version, a change applied
// in one transaction, the load at start and the one-time migration from state.json.
#include <fcntl.h>
#include <sys/stat.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "base/sqlite.hpp"
#include "motor/fd_io.hpp"
#include "motor/sys_error.hpp"
#include "runner/state_store.hpp"

namespace motor::runner {
namespace {

// PRAGMA application_id: "MOTR". A database without it is not one this runner made.
constexpr int64_t kApplicationId = 0x4d4f5452;

constexpr const char* kSchema =
    "CREATE TABLE jobs (job_id TEXT PRIMARY KEY, caller TEXT NOT NULL, workspace_key TEXT NOT NULL,"
    " summary TEXT NOT NULL, state TEXT NOT NULL, cgroup TEXT NOT NULL, created_at_ms INTEGER NOT NULL,"
    " started_at_ms INTEGER NOT NULL, terminal TEXT, secret_sha256 TEXT NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE runner (key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;"
    "INSERT INTO runner VALUES ('draining', 0);";

std::string db_path(const std::string& state_dir) { return state_dir + "/state.db"; }

// A fresh file gets the schema; an existing one must be ours and of a schema this runner reads.
Status check_or_create_schema(SqliteDb& db) {
  auto app = db.query_int("PRAGMA application_id");
  if (!app) return app.error();
  auto version = db.query_int("PRAGMA user_version");
  if (!version) return version.error();
  auto tables = db.query_int("SELECT count(*) FROM sqlite_schema");
  if (!tables) return tables.error();
  if (*app == 0 && *version == 0 && *tables == 0) {
    if (auto s = db.exec("BEGIN IMMEDIATE"); !s) return s;
    const std::string sql = fmt::format("{} PRAGMA application_id = {}; PRAGMA user_version = {};", kSchema,
                                        kApplicationId, kStateSchemaVersion);
    if (auto s = db.exec(sql.c_str()); !s) {
      (void)db.exec("ROLLBACK");
      return s;
    }
    return db.exec("COMMIT");
  }
  if (*app != kApplicationId) {
    return make_error("state", fmt::format("{} is not a motor-runner state database (application_id {:#x}); move it "
                                           "aside",
                                           db.path(), *app));
  }
  if (*version != kStateSchemaVersion) {
    return make_error("state", fmt::format("{} has schema version {}; this runner reads version {} only (was it "
                                           "written by a newer motor-runner? run that version, or move the state "
                                           "directory aside)",
                                           db.path(), *version, kStateSchemaVersion));
  }
  return {};
}

Status fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return sys_error("opening " + dir);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) return sys_error("syncing " + dir, err);
  return {};
}

Expected<std::string> read_whole(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return sys_error("opening " + path);
  std::string text;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return sys_error("reading " + path, err);
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

}  // namespace

struct StateDb::Impl {
  SqliteDb db;
  SqliteStatement upsert, remove, draining;
};

StateDb::StateDb(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
StateDb::StateDb(StateDb&&) noexcept = default;
StateDb& StateDb::operator=(StateDb&&) noexcept = default;
StateDb::~StateDb() = default;

Expected<StateDb> StateDb::open(const std::string& state_dir) {
  const std::string path = db_path(state_dir);
  const bool existed = ::access(path.c_str(), F_OK) == 0;
  auto db = SqliteDb::open(path, true);
  if (!db) return db.error();
  // Private like the rest of the state directory; the WAL and its index take the same mode.
  if (!existed && ::chmod(path.c_str(), 0600) != 0) return sys_error("making " + path + " private");
  // WAL with synchronous=FULL: a commit is on disk (the WAL fsynced) when it returns, and a
  // save writes only the pages its rows touch. A torn last frame fails its checksum and is
  // ignored: the table is as of the last whole commit.
  if (auto s = db->exec("PRAGMA busy_timeout = 5000; PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;"
                        " PRAGMA journal_size_limit = 4194304;");
      !s) {
    return s.error();
  }
  if (auto s = check_or_create_schema(*db); !s) return s.error();
  if (!existed) {
    if (auto s = fsync_dir(state_dir); !s) return s.error();  // the new file's name is durable too
  }
  auto upsert = db->prepare(
      "INSERT OR REPLACE INTO jobs (job_id, caller, workspace_key, summary, state, cgroup, created_at_ms,"
      " started_at_ms, terminal, secret_sha256) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)");
  if (!upsert) return upsert.error();
  auto remove = db->prepare("DELETE FROM jobs WHERE job_id = ?1");
  if (!remove) return remove.error();
  auto draining = db->prepare("UPDATE runner SET value = ?1 WHERE key = 'draining'");
  if (!draining) return draining.error();
  return StateDb(std::unique_ptr<Impl>(
      new Impl{std::move(*db), std::move(*upsert), std::move(*remove), std::move(*draining)}));
}

Status StateDb::apply(const std::vector<StateChange>& changes) { return apply_all(changes, false); }

Status StateDb::apply_all(const std::vector<StateChange>& changes, bool clear_first) {
  Impl& d = *impl_;
  if (changes.empty()) return {};
  if (auto s = d.db.exec("BEGIN IMMEDIATE"); !s) return s;
  auto body = [&]() -> Status {
    if (clear_first) {
      if (auto s = d.db.exec("DELETE FROM jobs"); !s) return s;
    }
    for (const auto& ch : changes) {
      for (const auto& j : ch.jobs) {
        d.upsert.bind(1, j.job_id).bind(2, j.caller).bind(3, j.workspace_key).bind(4, j.summary);
        d.upsert.bind(5, to_wire(j.state)).bind(6, j.cgroup).bind(7, j.created_at_ms).bind(8, j.started_at_ms);
        if (j.terminal_json.empty()) d.upsert.bind_null(9);
        else d.upsert.bind(9, j.terminal_json);
        d.upsert.bind(10, j.secret_sha256);
        if (auto s = d.upsert.run(); !s) return s;
      }
      for (const auto& id : ch.removed) {
        if (auto s = d.remove.bind(1, id).run(); !s) return s;
      }
    }
    return d.draining.bind(1, int64_t{changes.back().draining}).run();
  };
  if (auto s = body(); !s) {
    (void)d.db.exec("ROLLBACK");
    return s;
  }
  if (auto s = d.db.exec("COMMIT"); !s) {
    (void)d.db.exec("ROLLBACK");  // a failed COMMIT (a full disk) may leave the transaction open
    return s;
  }
  return {};
}

Expected<PersistedState> StateDb::load() {
  SqliteDb& db = impl_->db;
  PersistedState st;
  auto draining = db.query_int("SELECT value FROM runner WHERE key = 'draining'");
  if (!draining) return draining.error();
  st.draining = *draining != 0;
  auto rows = db.prepare(
      "SELECT job_id, caller, workspace_key, summary, state, cgroup, created_at_ms, started_at_ms, terminal,"
      " secret_sha256 FROM jobs ORDER BY job_id");
  if (!rows) return rows.error();
  for (;;) {
    auto row = rows->step();
    if (!row) return row.error();
    if (!*row) break;
    PersistedJob j;
    j.job_id = rows->text(0);
    j.caller = rows->text(1);
    j.workspace_key = rows->text(2);
    j.summary = rows->text(3);
    j.state = parse_job_state(rows->text(4));
    j.cgroup = rows->text(5);
    j.created_at_ms = rows->integer(6);
    j.started_at_ms = rows->integer(7);
    if (!rows->is_null(8)) j.terminal_json = rows->text(8);
    j.secret_sha256 = rows->text(9);
    st.jobs.push_back(std::move(j));
  }
  return st;
}

Status StateDb::replace_all(const PersistedState& state) {
  StateChange all;
  all.draining = state.draining;
  all.jobs = state.jobs;
  return apply_all({all}, true);
}

Status apply_changes_now(const std::string& state_dir, std::string_view changes_json) {
  auto changes = decode_changes(changes_json);
  if (!changes) return changes.error();
  auto db = StateDb::open(state_dir);
  if (!db) return db.error();
  return db->apply(*changes);
}

Expected<PersistedState> load_state(const std::string& state_dir) {
  auto db = StateDb::open(state_dir);
  if (!db) return db.error();
  const std::string json_path = state_dir + "/state.json";
  if (::access(json_path.c_str(), F_OK) == 0) {
    // An older runner's state (or a crash between this migration's commit and its rename: the
    // same state again). It replaces the table, then moves aside; the table is the state from now on.
    auto text = read_whole(json_path);
    if (!text) return text.error();
    auto st = decode_state(*text);
    if (!st) return make_error("state", json_path + ": " + st.error().message);
    if (auto s = db->replace_all(*st); !s) return s.error();
    if (::rename(json_path.c_str(), (json_path + ".migrated").c_str()) != 0) {
      return sys_error("moving " + json_path + " aside after its migration into state.db");
    }
    if (auto s = fsync_dir(state_dir); !s) return s.error();
  }
  return db->load();
}

}  // namespace motor::runner
