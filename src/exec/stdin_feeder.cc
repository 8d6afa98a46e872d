#include "exec/stdin_feeder.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "cfdb/worker/limits.h"

namespace cfdb::worker::internal {

StdinFeeder::StdinFeeder(JobContext& ctx, std::string_view data, Fd pipe)
    : ctx_(ctx),
      pipe_(std::move(pipe)),
      pending_(data),
      more_(ctx.stdin_streamed()) {
  if (data.empty() && !more_) pipe_.Reset();
  if (pipe_) {
    SetNonBlocking(pipe_.get());
    fcntl(pipe_.get(), F_SETPIPE_SZ, kJobPipeBytes);
  }
}

void StdinFeeder::Write() {
  while (pipe_) {
    if (pending_.empty()) {
      if (!more_) return Close();  // the end of the input
      switch (ctx_.TakeStdin(chunk_)) {
        case JobContext::StdinResult::kChunk:
          pending_ = chunk_;
          continue;
        case JobContext::StdinResult::kEnd:
          more_ = false;
          continue;
        case JobContext::StdinResult::kNotYet:
          return;
      }
    }
    const ssize_t n = write(pipe_.get(), pending_.data(), pending_.size());
    if (n > 0) {
      pending_.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n < 0 && errno == EPIPE) {
      // The program closed its stdin: consume this thread's SIGPIPE.
      sigset_t pipe_set;
      sigemptyset(&pipe_set);
      sigaddset(&pipe_set, SIGPIPE);
      const timespec zero{};
      sigtimedwait(&pipe_set, nullptr, &zero);
    }
    return Close();
  }
}

void StdinFeeder::Close() {
  Stop();
  pipe_.Reset();
}

void StdinFeeder::Stop() {
  pending_ = {};
  if (more_) ctx_.CloseStdin();
  more_ = false;
}

}  // namespace cfdb::worker::internal
