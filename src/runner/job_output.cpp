#include "runner/job_output.hpp"

#include <fcntl.h>

#include "base/log.hpp"

namespace motor::runner {
namespace {

// How often output held back by a full disk is offered to the log again.
constexpr uint64_t kLogRetryMs = 1000;

}  // namespace

JobOutput::JobOutput(uv_loop_t* loop, ExecutionSink& sink, std::string job_id, std::function<void()> changed,
                     std::function<void()> before_output)
    : loop_(loop),
      sink_(sink),
      job_id_(std::move(job_id)),
      changed_(std::move(changed)),
      before_output_(std::move(before_output)) {}

JobOutput::~JobOutput() = default;

Status JobOutput::start(UniqueFd out_read, UniqueFd err_read) {
  out_ = std::make_unique<Pipe>();
  err_ = std::make_unique<Pipe>();
  if (auto s = open(*out_, std::move(out_read), JobLog::Kind::kStdout); !s) return s;
  return open(*err_, std::move(err_read), JobLog::Kind::kStderr);
}

Status JobOutput::open(Pipe& p, UniqueFd fd, JobLog::Kind kind) {
  p.owner = this;
  p.kind = kind;
  if (auto s = reactor::uv_status(p.pipe.init(&p, uv_pipe_init, loop_, 0), "an output pipe"); !s) return s;
  // Best effort: a pipe left at the kernel's size is read the same way.
  (void)fcntl(fd.get(), F_SETPIPE_SZ, kPipeBytes);
  if (auto s = reactor::uv_status(uv_pipe_open(p.pipe.get(), fd.get()), "opening an output pipe"); !s) return s;
  (void)fd.release();  // the pipe handle owns it now
  p.eof = false;
  p.buf = std::make_unique_for_overwrite<char[]>(kReadBytes);  // not zeroed: only what a read filled is used
  return read(p);
}

Status JobOutput::read(Pipe& p) {
  const int rc = uv_read_start(
      p.pipe.stream(),
      [](uv_handle_t* h, size_t, uv_buf_t* buf) {
        auto* pipe = static_cast<Pipe*>(h->data);
        *buf = uv_buf_init(pipe->buf.get(), kReadBytes);
      },
      [](uv_stream_t* h, ssize_t nread, const uv_buf_t*) {
        if (auto* pipe = static_cast<Pipe*>(h->data)) pipe->owner->on_read(*pipe, nread);
      });
  return reactor::uv_status(rc, "reading the job's output");
}

bool JobOutput::drained() const {
  for (const Pipe* p : {out_.get(), err_.get()}) {
    if (p && (!p->eof || !p->pending.empty())) return false;
  }
  return true;
}

void JobOutput::on_read(Pipe& p, ssize_t nread) {
  if (nread > 0) {
    if (before_output_) before_output_();
    append(p, std::string_view(p.buf.get(), static_cast<size_t>(nread)));
    return;
  }
  if (nread == 0) return;
  end_stream(p);
  changed_();  // may destroy this
}

void JobOutput::end_stream(Pipe& p) {
  p.eof = true;
  p.pipe.close();
  p.buf.reset();  // libuv is done with it: the read callback has returned or never comes again
}

void JobOutput::append_own(JobLog::Kind kind, std::string_view bytes) {
  if (Pipe* p = kind == JobLog::Kind::kStderr ? err_.get() : out_.get()) (void)append(*p, bytes);
}

void JobOutput::abandon() {
  for (Pipe* p : {out_.get(), err_.get()}) {
    if (p && !p->eof) end_stream(*p);
  }
}

void JobOutput::resume(Pipe& p) {
  if (!p.pipe.live() || p.eof) return;
  if (auto s = read(p); !s) {
    log_job(job_id_, "{}; the rest of this stream is not read", s.error().message);
    end_stream(p);  // else the job would wait for its EOF for good
  }
}

bool JobOutput::append(Pipe& p, std::string_view bytes) {
  auto s = sink_.execution_output(p.kind, bytes);
  if (s) return true;
  if (shutting_down_) {
    log_job(job_id_, "{}; {} bytes of output dropped (the runner is stopping)", s.error().message, bytes.size());
    return true;
  }
  p.pending.assign(bytes);
  if (p.pipe.live()) uv_read_stop(p.pipe.stream());
  log_job(job_id_, "{}; output paused until the log can be written", s.error().message);
  int rc = retry_timer_.live() ? 0 : retry_timer_.init(this, uv_timer_init, loop_);
  if (rc == 0) {
    rc = uv_timer_start(retry_timer_.get(), [](uv_timer_t* h) {
      if (auto* self = reactor::owner_of<JobOutput>(h)) self->retry();
    }, kLogRetryMs, 0);
  }
  if (auto st = reactor::uv_status(rc, "the log retry timer"); !st) {
    log_job(job_id_, "{}; {} bytes of output dropped", st.error().message, p.pending.size());
    p.pending.clear();  // never held without a retry: the job would block for good
    resume(p);
  }
  return false;
}

void JobOutput::retry() {
  for (Pipe* p : {out_.get(), err_.get()}) {
    if (!p || p->pending.empty()) continue;
    std::string chunk = std::move(p->pending);
    p->pending.clear();
    if (!append(*p, chunk)) return;
    resume(*p);
  }
  changed_();  // may destroy this
}

void JobOutput::shutdown() {
  shutting_down_ = true;
  if (out_ && err_) retry();
}

}  // namespace motor::runner
