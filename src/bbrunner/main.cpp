// motor-bb-runner: Buildbarn's runner service (buildbarn.runner.Runner, gRPC on Unix sockets)
// in front of motor-runner's socket; each Run becomes a Motor job (docs/buildbarn.md). A process
// of its own so the runner's one loop never carries gRPC's threads.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <optional>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "bbrunner/build_directory.hpp"
#include "bbrunner/gate_transport.hpp"
#include "config/config.hpp"
#include "gate/gate_run.hpp"
#include "gate/gate_setup.hpp"
#include "bbrunner/service.hpp"
#include "protocol/size.hpp"

namespace {

constexpr const char* kUsage =
    "usage: motor-bb-runner --build-directory DIR --listen SOCKET [--outbound-listen SOCKET]\n"
    "                       [--runner-socket SOCKET] [--memory SIZE] [--cpus N]\n"
    "       motor-bb-runner gate [--config FILE] [--runner PATH] [--state-dir DIR] [--json] [--attack ID[,ID]]\n"
    "  --build-directory  bb_worker's build directory (the runner's bb_build_directory)\n"
    "  --listen           socket for actions without network (bb_worker's runner endpoint)\n"
    "  --outbound-listen  socket for actions whose platform asks for outbound network\n"
    "  --runner-socket    motor-runner's socket (default /run/motor/motor.sock)\n"
    "  --memory, --cpus   each action's memory cap and whole cores (default: the runner's)\n"
    "gate: motor-runner gate's host checks and attacks, each attack's job sent as bb_worker sends an\n"
    "action (a Run to a motor-bb-runner of this executable, its workspace an input root); exit 0\n"
    "only if every control held (docs/buildbarn.md, docs/server-gate.md)\n"
    "  --config           the runner's config file (default: the embedded one)\n"
    "  --runner           the motor-runner to start (default: beside this one, else /usr/sbin/motor-runner)\n"
    "  --state-dir, --json, --attack  as motor-runner gate's\n";

struct Options {
  std::string build_directory, listen, outbound_listen, runner_socket = "/run/motor/motor.sock";
  std::optional<int64_t> memory, cpus;
  bool help = false;
};

bool parse_options(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") return o.help = true;
    if (i + 1 >= argc) return std::fprintf(stderr, "motor-bb-runner: %s needs a value\n", flag.c_str()), false;
    const std::string value = argv[++i];
    if (flag == "--build-directory") o.build_directory = value;
    else if (flag == "--listen") o.listen = value;
    else if (flag == "--outbound-listen") o.outbound_listen = value;
    else if (flag == "--runner-socket") o.runner_socket = value;
    else if (flag == "--memory" || flag == "--cpus") {
      int64_t n = 0;
      if (flag == "--memory") {
        auto size = motor::protocol::parse_size(value);
        n = size ? *size : 0;
      } else if (auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
                 ec != std::errc() || end != value.data() + value.size()) {
        n = 0;
      }
      if (n <= 0) return std::fprintf(stderr, "motor-bb-runner: bad %s %s\n", flag.c_str(), value.c_str()), false;
      (flag == "--memory" ? o.memory : o.cpus) = n;
    } else {
      return std::fprintf(stderr, "motor-bb-runner: unknown option %s\n", flag.c_str()), false;
    }
  }
  if (o.build_directory.empty() || o.listen.empty()) return std::fprintf(stderr, "motor-bb-runner: --build-directory and --listen are required\n"), false;
  return true;
}

// `gate`: motor-runner gate with each attack's job sent through a motor-bb-runner. Exit codes as
// motor-runner gate's (docs/server-gate.md): 0 passed, 1 not, 2 the attacks could not run, 64
// bad arguments, 78 a config the runner refuses.
constexpr int kUsageError = 64, kConfigError = 78;

int gate(int argc, char** argv) {
  motor::gate::GateOptions options;
  std::optional<std::string> config_path;
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") return std::fputs(kUsage, stdout), 0;
    if (flag == "--json") {
      options.json = true;
      continue;
    }
    if (i + 1 >= argc) return std::fprintf(stderr, "motor-bb-runner gate: %s needs a value\n", flag.c_str()), kUsageError;
    const std::string value = argv[++i];
    if (flag == "--config") config_path = value;
    else if (flag == "--runner") options.runner_exe = value;
    else if (flag == "--state-dir") options.state_dir = value;
    else if (flag == "--attack") {
      if (auto s = motor::gate::add_attack_list(value, options.attacks); !s) {
        return std::fprintf(stderr, "motor-bb-runner gate: %s\n", s.error().message.c_str()), kUsageError;
      }
    } else {
      return std::fprintf(stderr, "motor-bb-runner gate: unknown option %s\n", flag.c_str()), kUsageError;
    }
  }
  const std::string self = motor::gate::self_exe();
  if (options.runner_exe.empty()) {
    const std::string beside = self.substr(0, self.rfind('/') + 1) + "motor-runner";
    options.runner_exe = ::access(beside.c_str(), X_OK) == 0 ? beside : "/usr/sbin/motor-runner";
  }
  if (::access(options.runner_exe.c_str(), X_OK) != 0)
    return std::fprintf(stderr, "motor-bb-runner gate: no motor-runner at %s (--runner)\n", options.runner_exe.c_str()), kUsageError;
  std::string origin;
  auto config = motor::config::load_runner_config(config_path, origin);
  if (!config) return std::fprintf(stderr, "motor-bb-runner gate: %s\n", config.error().message.c_str()), kConfigError;
  if (origin != motor::config::kEmbeddedConfigOrigin) options.config_path = origin;
  options.transport = std::make_shared<motor::bbrunner::BbWorkerTransport>(self);
  return motor::gate::run_gate(*config, options);
}

// One server per socket: which socket a call came in on says its network policy.
std::unique_ptr<grpc::Server> serve(const std::string& socket, motor::bbrunner::RunnerService& service) {
  ::unlink(socket.c_str());  // a stale socket of an earlier run
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + socket, grpc::InsecureServerCredentials());
  builder.RegisterService(&service);
  auto server = builder.BuildAndStart();
  // bb_worker runs as its own account: the socket is for the owner and the group only.
  if (server && ::chmod(socket.c_str(), 0660) != 0) std::fprintf(stderr, "motor-bb-runner: chmod %s: %s\n", socket.c_str(), std::strerror(errno));
  return server;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "gate") return gate(argc, argv);
  Options o;
  if (!parse_options(argc, argv, o)) return std::fputs(kUsage, stderr), 2;
  if (o.help) return std::fputs(kUsage, stdout), 0;
  auto build = motor::bbrunner::BuildDirectory::open(o.build_directory);
  if (!build) return std::fprintf(stderr, "motor-bb-runner: %s\n", build.error().message.c_str()), 1;
  // Blocked before gRPC starts its threads, so only sigwait below sees them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  std::vector<std::unique_ptr<motor::bbrunner::RunnerService>> services;
  std::vector<std::unique_ptr<grpc::Server>> servers;
  for (const auto& [socket, network] : {std::pair{o.listen, "offline"}, std::pair{o.outbound_listen, "outbound"}}) {
    if (socket.empty()) continue;
    motor::bbrunner::RunSettings settings{o.runner_socket, network, o.memory, o.cpus};
    services.push_back(std::make_unique<motor::bbrunner::RunnerService>(settings, *build));
    servers.push_back(serve(socket, *services.back()));
    if (!servers.back()) return std::fprintf(stderr, "motor-bb-runner: cannot listen on %s\n", socket.c_str()), 1;
    std::fprintf(stderr, "motor-bb-runner: serving %s actions on %s\n", network, socket.c_str());
  }
  int sig = 0;
  sigwait(&stop, &sig);
  // Calls still running get a few seconds, then are cancelled: their jobs are cancelled with them.
  for (auto& server : servers) server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  for (auto& server : servers) server->Wait();
  for (const auto& socket : {o.listen, o.outbound_listen})
    if (!socket.empty()) ::unlink(socket.c_str());
  return 0;
}
