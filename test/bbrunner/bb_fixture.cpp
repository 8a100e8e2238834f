#include "bbrunner/bb_fixture.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include <fmt/format.h>

namespace motor::test {

BbFarm::BbFarm(const std::string& runner_config, std::vector<std::string> bb_flags) : bb_flags_(std::move(bb_flags)) {
  dir_ = make_temp_dir();
  chmod(dir_.c_str(), 0711);
  build_dir_ = dir_ + "/build";
  mkdir(build_dir_.c_str(), 0711);
  socket_ = dir_ + "/runner.sock";
  outbound_socket_ = dir_ + "/runner-outbound.sock";
  bb_log_ = dir_ + "/motor-bb-runner.log";
  runner_ = std::make_unique<RunnerProcess>(fmt::format("bb_build_directory = {}\n{}", build_dir_, runner_config));
}

BbFarm::~BbFarm() {
  stub_.reset();
  outbound_stub_.reset();
  if (bb_pid_ > 0) {
    kill(bb_pid_, SIGTERM);
    int status = 0;
    for (int i = 0; i < 1000 && waitpid(bb_pid_, &status, WNOHANG) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (waitpid(bb_pid_, &status, WNOHANG) == 0) {
      kill(bb_pid_, SIGKILL);
      waitpid(bb_pid_, &status, 0);
    }
  }
  runner_.reset();
  remove_tree(dir_);
}

std::string BbFarm::bb_log() const { return read_file(bb_log_); }

bool BbFarm::start() {
  if (!runner_->start()) return false;
  bb_pid_ = fork();
  if (bb_pid_ == 0) {
    const int log = ::open(bb_log_.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    dup2(log, 1);
    dup2(log, 2);
    std::vector<std::string> args{MOTOR_BB_RUNNER_BIN, "--build-directory", build_dir_, "--listen", socket_,
                                  "--outbound-listen", outbound_socket_, "--runner-socket", runner_->socket()};
    args.insert(args.end(), bb_flags_.begin(), bb_flags_.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  for (int i = 0; i < 1000; ++i) {
    struct stat a {}, b {};
    if (stat(socket_.c_str(), &a) == 0 && stat(outbound_socket_.c_str(), &b) == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stub_ = buildbarn::runner::Runner::NewStub(grpc::CreateChannel("unix:" + socket_, grpc::InsecureChannelCredentials()));
  outbound_stub_ =
      buildbarn::runner::Runner::NewStub(grpc::CreateChannel("unix:" + outbound_socket_, grpc::InsecureChannelCredentials()));
  return check_readiness().ok();
}

ActionDir BbFarm::make_action(const std::string& name, const std::map<std::string, std::string>& files) {
  ActionDir a{name, build_dir_ + "/" + name};
  mkdir(a.path.c_str(), 0755);
  for (const auto& dir : {a.root(), a.tmp()}) {
    mkdir(dir.c_str(), 0777);
    chmod(dir.c_str(), 0777);
  }
  for (const auto& [path, text] : files) {
    const std::string full = a.root() + "/" + path;
    for (size_t slash = full.find('/', a.root().size() + 1); slash != std::string::npos; slash = full.find('/', slash + 1)) {
      mkdir(full.substr(0, slash).c_str(), 0777);
      chmod(full.substr(0, slash).c_str(), 0777);
    }
    write_file(full, text);
  }
  return a;
}

buildbarn::runner::RunRequest BbFarm::request(const ActionDir& action, std::vector<std::string> argv,
                                              std::map<std::string, std::string> env,
                                              const std::string& working_directory) const {
  buildbarn::runner::RunRequest r;
  for (auto& arg : argv) r.add_arguments(arg);
  for (auto& [name, value] : env) (*r.mutable_environment_variables())[name] = value;
  r.set_working_directory(working_directory);
  r.set_stdout_path(action.name + "/stdout");
  r.set_stderr_path(action.name + "/stderr");
  r.set_input_root_directory(action.name + "/root");
  r.set_temporary_directory(action.name + "/tmp");
  r.set_server_logs_directory(action.name + "/server_logs");
  return r;
}

RunOutcome BbFarm::run(const buildbarn::runner::RunRequest& request, std::chrono::milliseconds deadline, bool outbound,
                       grpc::ClientContext* context) {
  grpc::ClientContext own;
  grpc::ClientContext& ctx = context ? *context : own;
  ctx.set_deadline(std::chrono::system_clock::now() + deadline);
  RunOutcome out;
  out.status = (outbound ? outbound_stub_ : stub_)->Run(&ctx, request, &out.reply);
  out.stdout_text = read_file(build_dir_ + "/" + request.stdout_path());
  out.stderr_text = read_file(build_dir_ + "/" + request.stderr_path());
  for (const auto& any : out.reply.resource_usage()) {
    if (any.UnpackTo(&out.usage)) out.has_usage = true;
    if (any.UnpackTo(&out.motor_job)) out.has_motor_job = true;
  }
  return out;
}

grpc::Status BbFarm::check_readiness(const std::string& path) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  buildbarn::runner::CheckReadinessRequest request;
  request.set_path(path);
  google::protobuf::Empty reply;
  return stub_->CheckReadiness(&ctx, request, &reply);
}

}  // namespace motor::test
