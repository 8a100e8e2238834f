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
// One line on stdout; exit 0 on success, 1 with "error MESSAGE" otherwise.
#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace {

int fail(const std::string& what) {
  std::string msg = what;
  if (const char* e = virGetLastErrorMessage(); e && std::strcmp(e, "no error") != 0) msg += ": " + std::string(e);
  for (char& c : msg) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  std::printf("error %s\n", msg.substr(0, 2000).c_str());
  return 1;
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

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  virSetErrorFunc(nullptr, [](void*, virErrorPtr) {});  // errors go out on stdout, once
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
