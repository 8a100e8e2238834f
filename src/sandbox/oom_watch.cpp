#include "sandbox/oom_watch.hpp"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>

#include "motor/sys_error.hpp"
#include "sandbox/cgroup_internal.hpp"

namespace motor::sandbox {

Expected<OomWatch> OomWatch::on_v1_oom_control(const std::string& memory_dir) {
  const std::string control = memory_dir + "/memory.oom_control";
  UniqueFd oom_control(::open(control.c_str(), O_RDONLY | O_CLOEXEC));
  if (!oom_control) return sys_error("opening " + control);
  UniqueFd event(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!event) return sys_error("eventfd");
  // "<event_fd> <control_fd>": the kernel takes its own references; ours can close afterwards.
  const std::string line = std::to_string(event.get()) + " " + std::to_string(oom_control.get());
  if (auto st = cgroup_detail::write_text(memory_dir + "/cgroup.event_control", line); !st) return st.error();
  return OomWatch(std::move(event), control, "oom_kill", false);
}

Expected<OomWatch> OomWatch::on_v2_events_file(const std::string& dir, const std::string& file, const std::string& key) {
  UniqueFd in(inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  if (!in) return sys_error("inotify_init1");
  const std::string path = dir + "/" + file;
  if (inotify_add_watch(in.get(), path.c_str(), IN_MODIFY) < 0) return sys_error("inotify_add_watch " + path);
  return OomWatch(std::move(in), path, key, true);
}

Expected<int64_t> OomWatch::consume() {
  // Drain: an eventfd gives one 8-byte counter, inotify whole events; either way read until EAGAIN.
  alignas(inotify_event) char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd_.get(), buf, inotify_ ? sizeof buf : 8);
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  auto text = cgroup_detail::read_text(counter_path_);
  if (!text) return text.error();
  auto n = cgroup_detail::keyed_value(*text, key_);
  if (!n) return make_error("io", counter_path_ + " has no " + key_ + " line");
  return *n;
}

}  // namespace motor::sandbox
