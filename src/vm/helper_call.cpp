#include "vm/helper_call.hpp"

namespace motor::vm {
namespace {
constexpr size_t kMaxAnswer = 8192;
}

Expected<std::unique_ptr<HelperCall>> HelperCall::start(uv_loop_t* loop, const std::string& helper,
                                                        const std::vector<std::string>& args, uint64_t timeout_ms, Done done) {
  std::unique_ptr<HelperCall> call(new HelperCall);
  call->done_ = std::move(done);
  call->what_ = args.empty() ? helper : args[0];
  reactor::ChildSpec spec;
  spec.file = helper;
  spec.argv = {helper};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.timeout_ms = timeout_ms;
  spec.max_stdout_bytes = kMaxAnswer;
  // The call owns the child: its callback never outlives it.
  auto child = reactor::ChildProcess::spawn(loop, spec, [self = call.get()](reactor::ChildExit e) { self->answered(std::move(e)); });
  if (!child) return make_error("vm", "cannot start " + child.error().message);
  call->child_ = std::move(*child);
  return call;
}

void HelperCall::answered(reactor::ChildExit exit) {
  finished_ = true;
  std::string text = std::move(exit.out);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  Done done = std::move(done_);
  if (exit.timed_out) return done(make_error("vm", "motor-vm-helper " + what_ + " did not finish in time"));
  if (exit.ok() && (text == "ok" || text.rfind("ok ", 0) == 0)) return done(text.size() > 3 ? text.substr(3) : std::string());
  std::string msg = text.rfind("error ", 0) == 0 ? text.substr(6) : text;
  if (msg.empty()) msg = "motor-vm-helper " + what_ + " failed (" + exit.describe() + ")";
  done(make_error("vm", msg));
}

}  // namespace motor::vm
