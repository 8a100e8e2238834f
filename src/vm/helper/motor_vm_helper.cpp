// motor-vm-helper: the libvirt calls that would stall the runner's loop, one per process
// (DESIGN.md: what can block runs in a child process, never a thread). A domain create waits
// ~0.4 s for QEMU, a destroy ~2 s for it to exit; the runner's own on-loop connection only
// carries events and keepalives.
//
//   motor-vm-helper create  URI XML_FILE HARD_LIMIT_BYTES   -> "ok PID"  (domain left paused)
//   motor-vm-helper resume  URI NAME                        -> "ok"
//   motor-vm-helper destroy URI NAME [WORK_DIR]             -> "ok" (also when it is already gone);
//                                                              then deletes WORK_DIR (the overlay:
//                                                              a big unlink must not stall the loop)
//
// Where Motor starts QEMU itself, in a transient systemd unit (job_backend = systemd,
// not landed yet: docs/job-isolation.md), no libvirt is asked:
//   motor-vm-helper qmp-cont SOCKET                          -> "ok" once QEMU's monitor answered
//                                                              `cont` (the paused guest runs)
//   motor-vm-helper remove DIR...                            -> "ok" once each DIR is deleted
//
// One line on stdout; exit 0 on success, 1 with "error MESSAGE" otherwise.
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace {

// The one error line of a call that is not libvirt's (qmp-cont, remove): libvirt's last error is
// not theirs, and is not even set up when libvirt was never called.
int fail_plain(std::string msg) {
  for (char& c : msg) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  std::printf("error %s\n", msg.substr(0, 2000).c_str());
  return 1;
}

int fail(const std::string& what) {
  std::string msg = what;
  if (const char* e = virGetLastErrorMessage(); e && std::strcmp(e, "no error") != 0) msg += ": " + std::string(e);
  return fail_plain(std::move(msg));
}

struct Conn {
  virConnectPtr c = nullptr;
  ~Conn() {
    if (c) virConnectClose(c);
  }
};

struct Dom {
  virDomainPtr d = nullptr;
  ~Dom() {
    if (d) virDomainFree(d);
  }
};

int create(virConnectPtr conn, const char* xml_path, const char* hard_limit) {
  std::ifstream in(xml_path);
  if (!in) return fail(std::string("cannot read ") + xml_path);
  std::stringstream xml;
  xml << in.rdbuf();
  char* end = nullptr;
  const unsigned long long limit_bytes = std::strtoull(hard_limit, &end, 10);
  if (!end || *end || limit_bytes == 0) return fail("bad hard limit");
  // Paused: the guest runs no instruction until the runner has checked QEMU's confinement.
  Dom dom{virDomainCreateXML(conn, xml.str().c_str(), VIR_DOMAIN_START_PAUSED | VIR_DOMAIN_START_VALIDATE)};
  if (!dom.d) return fail("creating the domain");
  // The memory hard limit (see vm/domain_xml.hpp for why it is not in the XML).
  virTypedParameter param{};
  std::snprintf(param.field, sizeof param.field, "%s", VIR_DOMAIN_MEMORY_HARD_LIMIT);
  param.type = VIR_TYPED_PARAM_ULLONG;
  param.value.ul = limit_bytes / 1024;
  if (virDomainSetMemoryParameters(dom.d, &param, 1, VIR_DOMAIN_AFFECT_LIVE) != 0) {
    const int rc = fail("setting the memory hard limit");
    virDomainDestroy(dom.d);
    return rc;
  }
  // QEMU's pid: libvirt's pid file for the domain (system instance).
  const std::string name = virDomainGetName(dom.d);
  std::ifstream pidfile("/run/libvirt/qemu/" + name + ".pid");
  long pid = 0;
  if (!(pidfile >> pid) || pid <= 1) {
    const int rc = fail("cannot read QEMU's pid for " + name);
    virDomainDestroy(dom.d);
    return rc;
  }
  std::printf("ok %ld\n", pid);
  return 0;
}

int resume(virConnectPtr conn, const char* name) {
  Dom dom{virDomainLookupByName(conn, name)};
  if (!dom.d) return fail("no such domain");
  if (virDomainResume(dom.d) != 0) return fail("resuming the domain");
  std::printf("ok\n");
  return 0;
}

// virDomainDestroy returns once QEMU is gone (SIGTERM, then SIGKILL): its files may go after it.
int destroy(virConnectPtr conn, const char* name, const char* work_dir) {
  Dom dom{virDomainLookupByName(conn, name)};
  if (!dom.d && virGetLastErrorCode() != VIR_ERR_NO_DOMAIN) return fail("looking up the domain");
  if (dom.d && virDomainDestroy(dom.d) != 0 && virGetLastErrorCode() != VIR_ERR_NO_DOMAIN &&
      virGetLastErrorCode() != VIR_ERR_OPERATION_INVALID) {
    return fail("destroying the domain");
  }
  if (work_dir) {
    std::error_code ec;
    std::filesystem::remove_all(work_dir, ec);
    if (ec) return fail(std::string("deleting ") + work_dir + ": " + ec.message());
  }
  std::printf("ok\n");
  return 0;
}

// QMP, QEMU's monitor protocol: one JSON object per line; a greeting, then each command's
// "return" or "error", with events (`{"event": ...}`) in between that are skipped.
class Qmp {
 public:
  ~Qmp() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool connect(const char* path, std::string& why) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (std::strlen(path) >= sizeof addr.sun_path) return (why = "the monitor's socket path is too long"), false;
    std::strcpy(addr.sun_path, path);
    // QEMU makes the socket while it starts up, which may be after its unit counts as started
    // (Type=exec: at the exec): wait for it, within the same 10 s.
    const time_t deadline = time(nullptr) + 10;
    for (;;) {
      fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd_ < 0) return (why = std::string("making a socket: ") + std::strerror(errno)), false;
      if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) break;
      const int error = errno;
      ::close(fd_);
      fd_ = -1;
      if ((error != ENOENT && error != ECONNREFUSED) || time(nullptr) >= deadline) {
        return (why = std::string("connecting to QEMU's monitor ") + path + ": " + std::strerror(error)), false;
      }
      ::usleep(10 * 1000);  // a helper process of its own: waiting here stalls no loop
    }
    std::string greeting;
    if (!read_line(greeting, why)) return false;
    if (greeting.find("\"QMP\"") == std::string::npos) return (why = "QEMU's monitor did not greet: " + greeting.substr(0, 200)), false;
    return execute("qmp_capabilities", why);
  }
  // Sends {"execute": COMMAND} and waits for its answer.
  bool execute(const char* command, std::string& why) {
    const std::string request = std::string("{\"execute\": \"") + command + "\"}\n";
    if (::write(fd_, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
      return (why = std::string("writing to QEMU's monitor: ") + std::strerror(errno)), false;
    }
    for (;;) {
      std::string line;
      if (!read_line(line, why)) return false;
      if (line.find("\"return\"") != std::string::npos) return true;
      if (line.find("\"error\"") != std::string::npos) return (why = std::string(command) + ": " + line.substr(0, 500)), false;
    }
  }

 private:
  // A line within 10 s of the call (QEMU answers at once; a hung QEMU must not hang the job).
  bool read_line(std::string& line, std::string& why) {
    const time_t deadline = time(nullptr) + 10;
    for (;;) {
      if (const auto nl = buffer_.find('\n'); nl != std::string::npos) {
        line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return true;
      }
      if (buffer_.size() > (1 << 20)) return (why = "QEMU's monitor sent a line over 1 MiB"), false;
      pollfd p{fd_, POLLIN, 0};
      const int wait_ms = static_cast<int>(deadline - time(nullptr)) * 1000;
      if (wait_ms <= 0 || ::poll(&p, 1, wait_ms) <= 0) return (why = "QEMU's monitor did not answer within 10 s"), false;
      char chunk[4096];
      const ssize_t n = ::read(fd_, chunk, sizeof chunk);
      if (n <= 0) return (why = "QEMU's monitor closed the connection"), false;
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  int fd_ = -1;
  std::string buffer_;
};

int qmp_cont(const char* socket_path) {
  Qmp qmp;
  std::string why;
  if (!qmp.connect(socket_path, why) || !qmp.execute("cont", why)) return fail_plain(why);
  std::printf("ok\n");
  return 0;
}

int remove_dirs(int count, char** dirs) {
  for (int i = 0; i < count; ++i) {
    std::error_code ec;
    std::filesystem::remove_all(dirs[i], ec);
    if (ec) return fail_plain(std::string("deleting ") + dirs[i] + ": " + ec.message());
  }
  std::printf("ok\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  virSetErrorFunc(nullptr, [](void*, virErrorPtr) {});  // errors go out on stdout, once
  if (argc == 3 && std::strcmp(argv[1], "qmp-cont") == 0) return qmp_cont(argv[2]);
  if (argc >= 3 && std::strcmp(argv[1], "remove") == 0) return remove_dirs(argc - 2, argv + 2);
  if (argc < 4) {
    std::printf("error usage: motor-vm-helper create|resume|destroy URI ARGS...\n");
    return 2;
  }
  const std::string op = argv[1];
  Conn conn{virConnectOpen(argv[2])};
  if (!conn.c) return fail(std::string("connecting to ") + argv[2]);
  if (op == "create" && argc == 5) return create(conn.c, argv[3], argv[4]);
  if (op == "resume" && argc == 4) return resume(conn.c, argv[3]);
  if (op == "destroy" && (argc == 4 || argc == 5)) return destroy(conn.c, argv[3], argc == 5 ? argv[4] : nullptr);
  std::printf("error usage: motor-vm-helper create|resume|destroy URI ARGS...\n");
  return 2;
}
