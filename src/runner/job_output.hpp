// A job's stdout and stderr pipes on the loop, read into its ExecutionSink (the job log): a chunk
// the log cannot take (a full disk) is held and reading that pipe pauses (the job blocks on its
// writes, so nothing is lost) until a retry takes it; while the runner stops, such output is
// dropped instead. The reader of both Linux backends (job_linux.hpp, job_systemd.hpp).
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
  // `changed` runs after a stream reached its end or held output was taken (the job may be done);
  // `before_output`, if given, before each chunk read from a pipe is offered to the log.
  JobOutput(uv_loop_t* loop, ExecutionSink& sink, std::string job_id, std::function<void()> changed,
            std::function<void()> before_output = {});
  ~JobOutput();
  JobOutput(const JobOutput&) = delete;
  JobOutput& operator=(const JobOutput&) = delete;

  // Reads the two pipes' read ends (it owns them from now on). On error nothing is read.
  Status start(UniqueFd out_read, UniqueFd err_read);
  // Both streams at EOF and nothing held back.
  bool drained() const;
  // Bytes of the runner's own on a started stream (a command that could not be exec'd), held
  // back like the pipe's.
  void append_own(JobLog::Kind kind, std::string_view bytes);
  // Ends the streams not at EOF yet without waiting for it (something else holds their write ends).
  void abandon();
  // The runner stops: held output is dropped, and so is what the log cannot take from now on.
  void shutdown();

 private:
  struct Pipe {
    JobOutput* owner = nullptr;
    reactor::UvHandle<uv_pipe_t> pipe;
    JobLog::Kind kind = JobLog::Kind::kStdout;
    bool eof = true;
    std::string pending;
    std::unique_ptr<char[]> buf;  // while the pipe is read: a finished job keeps none
  };
  // One read, one log record. Not larger: the records are what followers are sent whole, and a
  // client buffer (client_buffer_size, 64 KiB at its smallest) takes one at a time; with 256 KiB
  // records the silent followers of RunnerSessions.ClientsThatNeverReadAreBoundedInTotal kept
  // client_buffer_total full and a runner.status waited behind them for seconds.
  static constexpr size_t kReadBytes = 64 * 1024;
  // The pipe itself holds more (F_SETPIPE_SZ): a job writing fast blocks less often, and one
  // wakeup of the loop reads several records.
  static constexpr int kPipeBytes = 256 * 1024;
  Status open(Pipe& p, UniqueFd fd, JobLog::Kind kind);
  Status read(Pipe& p);
  void resume(Pipe& p);  // reading again after a hold-back; a failure ends the stream
  void on_read(Pipe& p, ssize_t nread);
  bool append(Pipe& p, std::string_view bytes);
  void retry();
  void end_stream(Pipe& p);

  uv_loop_t* loop_;
  ExecutionSink& sink_;
  std::string job_id_;
  std::function<void()> changed_, before_output_;
  bool shutting_down_ = false;
  std::unique_ptr<Pipe> out_, err_;
  reactor::UvHandle<uv_timer_t> retry_timer_;
};

}  // namespace motor::runner
