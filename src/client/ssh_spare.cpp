#include "client/ssh_spare.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <list>
#include <optional>
#include <string_view>
#include <vector>

#include "client/detached_helper.hpp"
#include "client/ssh_session.hpp"
#include "motor/fd_message.hpp"
#include "protocol/frame.hpp"

namespace motor::client {
namespace {

// What a spare comes with: the runner's answer to runner.hello follows in a second message; the
// hello was sent and its answer is still to come; (an older keeper's) nothing was sent on it.
constexpr char kVerifiedByte = 'v';
constexpr char kHelloSentByte = 'o';
constexpr char kBareByte = 's';
constexpr std::string_view kSpareHello = R"({"id":0,"method":"runner.hello","params":{}})";
constexpr size_t kMaxHelloReply = 65536;
// As the master's ControlPersist: a keeper nobody called for this long ends.
constexpr std::chrono::seconds kIdleLimit{300};
// How often an idle keeper looks at its socket file and the clock.
constexpr int kTickMs = 1000;
// How long a call waits for the keeper's answer (it answers at once; a stuck one costs this).
constexpr int kAnswerWaitMs = 1000;

}  // namespace

std::string spare_keeper_path(const std::string& control_path) { return control_path + ".keeper"; }

bool spare_sessions_enabled() {
  const char* v = std::getenv("MOTOR_SSH_SPARE");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

SpareAnswer take_spare_session(const std::string& keeper_path) {
  SpareAnswer answer;
  sockaddr_un addr;
  if (!unix_address(keeper_path, addr)) return answer;
  UniqueFd fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd || connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) < 0) return answer;
  answer.keeper_answered = true;
  if (!peer_is_this_user(fd.get())) return answer;
  pollfd p{fd.get(), POLLIN, 0};
  if (poll(&p, 1, kAnswerWaitMs) != 1) return answer;
  FdMessage message;
  const ssize_t n = recvmsg(fd.get(), &message.msg, MSG_CMSG_CLOEXEC);
  UniqueFd session(message.carried(n));
  if (!session) return answer;
  if (message.byte == kVerifiedByte) {
    std::string reply(kMaxHelloReply, '\0');
    if (poll(&p, 1, kAnswerWaitMs) != 1) return answer;
    const ssize_t got = ::recv(fd.get(), reply.data(), reply.size(), 0);
    if (got <= 0) return answer;
    reply.resize(static_cast<size_t>(got));
    answer.hello_reply = std::move(reply);
  } else if (message.byte == kHelloSentByte) {
    answer.hello_sent = true;
  } else if (message.byte != kBareByte) {
    return answer;
  }
  answer.session = std::move(session);
  return answer;
}

void start_spare_keeper(const SshTarget& target, const std::string& ssh_command, const std::string& control_path) {
  start_detached_self({kSpareKeeperFlag, control_path, target.url, target.user, target.host, std::to_string(target.port),
                       ssh_command});
}

int run_spare_keeper(int argc, char** argv) {
  if (argc != 8) return 64;
  const std::string control_path = argv[2];
  SshTarget target{argv[3], argv[4], argv[5], std::atoi(argv[6])};
  const std::string ssh_command = argv[7];
  // Only for the master a call of this user with this command rides: nothing else to hold.
  if (control_path.empty() || SshSession::control_path_for(target, ssh_command) != control_path) return 64;
  // SIGTERM and SIGHUP end it as its other ends do: socket removed, spare closed.
  catch_stop_signals();
  auto listener = SoleListener::open(spare_keeper_path(control_path));
  if (!listener) return 0;

  std::optional<SshSession> spare;
  UniqueFd spare_stream;
  protocol::FrameDecoder decoder;
  std::optional<std::string> hello_reply;  // the runner's answer on the current spare
  bool reply_begun = false;                // some of it was read
  std::list<SshSession> handed_out;  // serving calls; reaped as they end
  auto last_call = std::chrono::steady_clock::now();
  for (;;) {
    handed_out.remove_if([](SshSession& s) { return s.exited(); });
    if (!spare) {
      if (!is_socket(control_path)) break;  // no master to ride
      auto s = SshSession::start(target, ssh_command.c_str(), spare_stream, MasterUse::kRideOnly);
      if (!s) break;
      spare.emplace(std::move(*s));
      // runner.hello at once (ssh holds it until the session is up): a call takes a spare whose
      // runner already answered.
      const std::string hello = protocol::encode_frame(kSpareHello);
      if (::send(spare_stream.get(), hello.data(), hello.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(hello.size())) break;
      decoder = protocol::FrameDecoder();
      hello_reply.reset();
      reply_begun = false;
    }
    pollfd p[2] = {{listener->fd(), POLLIN, 0}, {spare_stream.get(), POLLIN, 0}};
    const int ready = poll(p, 2, kTickMs);
    if (stop_requested() || (ready < 0 && errno != EINTR)) break;
    if (ready > 0 && p[1].revents != 0) {
      // Nothing but the hello's answer comes on a spare before a call speaks: anything else, or
      // its end, is the master, the network or the runner gone, or a host that answered with
      // something else. The next call starts afresh.
      if (hello_reply) break;
      char buf[4096];
      const ssize_t n = ::read(spare_stream.get(), buf, sizeof buf);
      if (n <= 0) break;
      reply_begun = true;
      std::vector<std::string> frames;
      if (!decoder.feed(std::string_view(buf, static_cast<size_t>(n)), frames)) break;
      if (frames.size() > 1) break;
      if (frames.size() == 1) {
        if (frames[0].find("\"result\"") == std::string::npos || frames[0].size() > kMaxHelloReply) break;
        hello_reply = std::move(frames[0]);
      }
    }
    if (ready > 0 && (p[0].revents & POLLIN)) {
      UniqueFd caller(accept4(listener->fd(), nullptr, nullptr, SOCK_CLOEXEC));
      // A spare part of whose answer the keeper read cannot be handed over (the call would miss
      // that part): the call opens its own session this once.
      if (caller && peer_is_this_user(caller.get()) && (hello_reply || !reply_begun)) {
        FdMessage message;
        message.byte = hello_reply ? kVerifiedByte : kHelloSentByte;
        message.carry(spare_stream.get());
        if (sendmsg(caller.get(), &message.msg, MSG_NOSIGNAL) == 1 &&
            (!hello_reply || ::send(caller.get(), hello_reply->data(), hello_reply->size(), MSG_NOSIGNAL) >= 0)) {
          spare_stream.reset();  // the call's now; ssh stays our child until it ends
          handed_out.push_back(std::move(*spare));
          spare.reset();
          last_call = std::chrono::steady_clock::now();
        }
      }
    }
    if (std::chrono::steady_clock::now() - last_call > kIdleLimit) break;
    if (!listener->still_ours()) break;  // removed, or another keeper's now
  }
  listener.reset();  // its file removed if still ours
  spare_stream.reset();  // the spare's ssh sees EOF and ends; ~SshSession reaps it
  spare.reset();
  for (auto& s : handed_out) s.release();  // they serve their calls to the end
  return 0;
}

}  // namespace motor::client
