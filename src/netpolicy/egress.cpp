#include "netpolicy/egress.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <simdjson.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cstring>

#include "motor/sys_error.hpp"
#include "sandbox/job_network.hpp"

namespace motor::netpolicy {
namespace {

constexpr const char* kToolPath = "PATH=/usr/sbin:/usr/bin:/sbin:/bin";

std::string egress_name(const std::string& tag) { return "motor-eg-" + tag; }
std::string uplink_table(const std::string& tag) { return "motor_eg_" + tag; }

std::vector<std::string> ip_in(const std::string& netns, std::vector<std::string> args) {
  std::vector<std::string> argv{"ip"};
  if (!netns.empty()) {
    argv.push_back("-n");
    argv.push_back(netns);
  }
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

Status write_sysctls(int netns_fd, const std::vector<std::string>& paths) {
  UniqueFd back(open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC));
  if (!back) return sys_error("opening /proc/self/ns/net");
  if (netns_fd >= 0 && setns(netns_fd, CLONE_NEWNET) != 0) return sys_error("entering a network namespace");
  Status result;
  for (const auto& p : paths) {
    UniqueFd fd(open(p.c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd || write(fd.get(), "1", 1) != 1) {
      result = sys_error("writing 1 to " + p);
      break;
    }
  }
  if (netns_fd >= 0 && setns(back.get(), CLONE_NEWNET) != 0) return sys_error("returning to the runner's namespace");
  return result;
}

}  // namespace

std::string uplink_veth(const std::string& tag) { return "meg-" + tag; }

Expected<std::vector<Ipv4>> namespace_addresses(int uplink_fd) {
  std::vector<Ipv4> out;
  std::string addrs, routes;
  if (auto s = run_tool({"ip", "-4", "-j", "addr", "show"}, uplink_fd, "", &addrs); !s) return s.error();
  if (auto s = run_tool({"ip", "-4", "-j", "route", "show", "table", "all"}, uplink_fd, "", &routes); !s) return s.error();
  simdjson::dom::parser parser;
  simdjson::dom::array list;
  if (parser.parse(addrs).get_array().get(list)) return make_error("io", "cannot parse `ip -j addr` output");
  for (auto link : list) {
    simdjson::dom::array infos;
    if (link["addr_info"].get_array().get(infos)) continue;
    for (auto info : infos) {
      std::string_view local;
      if (info["local"].get_string().get(local)) continue;
      if (auto a = parse_ipv4(local)) out.push_back(*a);
    }
  }
  if (parser.parse(routes).get_array().get(list)) return make_error("io", "cannot parse `ip -j route` output");
  for (auto route : list) {
    std::string_view gw;
    if (route["gateway"].get_string().get(gw)) continue;
    if (auto a = parse_ipv4(gw)) out.push_back(*a);
  }
  return out;
}

Expected<UniqueFd> socket_in_netns(int netns_fd, int type) {
  if (netns_fd < 0) {
    UniqueFd fd(socket(AF_INET, type | SOCK_CLOEXEC, 0));
    if (!fd) return sys_error("socket");
    return fd;
  }
  UniqueFd own(open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC));
  if (!own) return sys_error("opening /proc/self/ns/net");
  if (setns(netns_fd, CLONE_NEWNET) != 0) return sys_error("entering a network namespace");
  UniqueFd fd(socket(AF_INET, type | SOCK_CLOEXEC, 0));
  const int err = errno;
  if (setns(own.get(), CLONE_NEWNET) != 0) abort();
  if (!fd) return sys_error("socket", err);
  return fd;
}

Status run_tool(const std::vector<std::string>& argv, int netns_fd, const std::string& input, std::string* out) {
  int in_pipe[2], out_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) < 0) return sys_error("pipe2");
  UniqueFd in_read(in_pipe[0]), in_write(in_pipe[1]);
  if (pipe2(out_pipe, O_CLOEXEC) < 0) return sys_error("pipe2");
  UniqueFd out_read(out_pipe[0]), out_write(out_pipe[1]);
  UniqueFd err_file(memfd_create("motor-tool-stderr", MFD_CLOEXEC));
  if (!err_file) return sys_error("memfd_create");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  char* env[] = {const_cast<char*>(kToolPath), nullptr};
  const pid_t pid = fork();
  if (pid < 0) return sys_error("fork");
  if (pid == 0) {
    if (netns_fd >= 0 && setns(netns_fd, CLONE_NEWNET) != 0) _exit(126);
    dup2(in_read.get(), 0);
    dup2(out_write.get(), 1);
    dup2(err_file.get(), 2);
    execvpe(args[0], args.data(), env);
    _exit(127);
  }
  in_read.reset();
  out_write.reset();
  // Inputs are small (a ruleset, a few commands): the pipe takes them whole.
  if (!input.empty() && write(in_write.get(), input.data(), input.size()) != static_cast<ssize_t>(input.size())) {
    // The program may have failed early; its status says why.
  }
  in_write.reset();
  std::string text;
  char buf[8192];
  for (ssize_t n; (n = read(out_read.get(), buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    text.append(buf, static_cast<size_t>(n));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (out) *out = std::move(text);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return {};
  std::string err(4096, '\0');
  const ssize_t n = pread(err_file.get(), err.data(), err.size(), 0);
  err.resize(n > 0 ? static_cast<size_t>(n) : 0);
  while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
  std::string cmd;
  for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
  return make_error("io", fmt::format("`{}` failed ({}){}{}", cmd,
                                      WIFEXITED(status) ? fmt::format("exit {}", WEXITSTATUS(status))
                                                        : fmt::format("signal {}", WTERMSIG(status)),
                                      err.empty() ? "" : ": ", err));
}

void Egress::remove_leftovers(const std::string& tag, const std::string& uplink_netns) {
  // The uplink veth dies with the egress namespace; deleted by name too, in case the namespace
  // was already gone but its peer was not.
  (void)run_tool({"ip", "netns", "del", egress_name(tag)});
  (void)run_tool(ip_in(uplink_netns, {"link", "del", uplink_veth(tag)}));
  UniqueFd uplink;
  if (!uplink_netns.empty()) uplink.reset(open(("/run/netns/" + uplink_netns).c_str(), O_RDONLY | O_CLOEXEC));
  if (uplink_netns.empty() || uplink) {
    (void)run_tool({"nft", "delete", "table", "ip", uplink_table(tag)}, uplink.get());
  }
}

Expected<std::unique_ptr<Egress>> Egress::create(const EgressConfig& config) {
  if (config.tag.empty() || config.tag.size() > 8) return make_error("internal", "egress tag must be 1 to 8 characters");
  if (sandbox::slot_count(config.subnet) < 2) return make_error("config", "outbound_subnet is too small (at most a /29)");
  remove_leftovers(config.tag, config.uplink_netns);
  std::unique_ptr<Egress> e(new Egress);
  e->config_ = config;
  e->name_ = egress_name(config.tag);
  if (!config.uplink_netns.empty()) {
    e->uplink_.reset(open(("/run/netns/" + config.uplink_netns).c_str(), O_RDONLY | O_CLOEXEC));
    if (!e->uplink_) return sys_error("outbound_uplink_netns: opening /run/netns/" + config.uplink_netns);
  }
  const Ipv4 uplink_end = config.subnet.base + 1;  // slot 0: the uplink namespace's end
  const Ipv4 egress_end = config.subnet.base + 2;
  const std::string& up = config.uplink_netns;
  if (auto s = run_tool({"ip", "netns", "add", e->name_}); !s) return s.error();
  e->netns_.reset(open(("/run/netns/" + e->name_).c_str(), O_RDONLY | O_CLOEXEC));
  if (!e->netns_) return sys_error("opening /run/netns/" + e->name_);
  // Sysctls before any interface exists, so every one inherits them: forwarding, strict
  // reverse-path filtering (a job cannot send with another source), no IPv6.
  if (auto s = write_sysctls(e->netns_.get(), {"/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv4/conf/all/rp_filter",
                                               "/proc/sys/net/ipv4/conf/default/rp_filter",
                                               "/proc/sys/net/ipv6/conf/all/disable_ipv6",
                                               "/proc/sys/net/ipv6/conf/default/disable_ipv6"});
      !s)
    return s.error();
  if (auto s = write_sysctls(e->uplink_.get(), {"/proc/sys/net/ipv4/ip_forward"}); !s) return s.error();
  const std::string veth = uplink_veth(config.tag);
  if (auto s = run_tool(ip_in(up, {"link", "add", "name", veth, "type", "veth", "peer", "name", "up0", "netns", e->name_})); !s)
    return s.error();
  if (auto s = run_tool(ip_in(up, {"-batch", "-"}), -1,
                        fmt::format("addr add {}/30 dev {}\nlink set {} up\n", format_ipv4(uplink_end), veth, veth));
      !s)
    return s.error();
  if (auto s = run_tool(ip_in(e->name_, {"-batch", "-"}), -1,
                        fmt::format("link set lo up\naddr add {}/30 dev up0\nlink set up0 up\nroute add default via {}\n",
                                    format_ipv4(egress_end), format_ipv4(uplink_end)));
      !s)
    return s.error();
  auto hosts = namespace_addresses(e->uplink_.get());
  if (!hosts) return hosts.error();
  e->policy_.host_addresses = std::move(*hosts);
  e->policy_.test_allowed = config.test_allowed;
  EgressNames names;
  names.job_subnet = config.subnet;
  e->ruleset_ = egress_ruleset(e->policy_, names);
  if (auto s = run_tool({"nft", "-f", "-"}, e->netns_.get(), e->ruleset_); !s) return s.error();
  if (auto s = run_tool({"nft", "-f", "-"}, e->uplink_.get(), uplink_ruleset(uplink_table(config.tag), veth, egress_end)); !s)
    return s.error();
  return e;
}

Egress::~Egress() {
  if (!name_.empty()) remove_leftovers(config_.tag, config_.uplink_netns);
}

}  // namespace motor::netpolicy
