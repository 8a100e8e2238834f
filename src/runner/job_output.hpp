// A job's stdout and stderr pipes on the loop, read into its ExecutionSink (the job log): a chunk
// the log cannot take (a full disk) is held and reading that pipe pauses (the job blocks on its
// writes, so nothing is lost) until a retry takes it; while the runner stops, such output is
// dropped instead. The systemd backend's reader (job_systemd.hpp); the direct backend keeps its
// own in job_linux.cpp.
#pragma once

#include <uv.h>

#include <functional>
#include <memory>
#include <string>

#include "motor/expected.hpp"
#include "motor/unique_fd.hpp"
#include "reactor/uv_handle.hpp"
#include "runner/job_execution.hpp"

namespace motor::runner {

class JobOutput {
 public:
  // `changed` runs after a stream reached its end or held output was taken (the job may be done).
  JobOutput(uv_loop_t* loop, ExecutionSink& sink, std::string job_id, std::function<void()> changed);
  ~JobOutput();
  JobOutput(const JobOutput&) = delete;
  JobOutput& operator=(const JobOutput&) = delete;

  // Reads the two pipes' read ends (it owns them from now on). On error nothing is read.
  Status start(UniqueFd out_read, UniqueFd err_read);
  // Both streams at EOF and nothing held back.
  bool drained() const;
  // The runner stops: held output is dropped, and so is what the log cannot take from now on.
  void shutdown();

 private:
  struct Pipe {
    JobOutput* owner = nullptr;
    reactor::UvHandle<uv_pipe_t> pipe;
    JobLog::Kind kind = JobLog::Kind::kStdout;
    bool eof = true;
    std::string pending;
    char buf[64 * 1024];
  };
  Status open(Pipe& p, UniqueFd fd, JobLog::Kind kind);
  Status read(Pipe& p);
  void on_read(Pipe& p, ssize_t nread);
  bool append(Pipe& p, std::string_view bytes);
  void retry();
  void end_stream(Pipe& p);

  uv_loop_t* loop_;
  ExecutionSink& sink_;
  std::string job_id_;
  std::function<void()> changed_;
  bool shutting_down_ = false;
  std::unique_ptr<Pipe> out_, err_;
  reactor::UvHandle<uv_timer_t> retry_timer_;
};

}  // namespace motor::runner
