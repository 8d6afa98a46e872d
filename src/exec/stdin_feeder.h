// StdinFeeder: a job's input into its program's stdin pipe, for the exec
// kind's poll loop (exec.cc).
#pragma once

#include <string>
#include <string_view>

#include "cfdb/worker/job.h"
#include "exec/spawn.h"

namespace cfdb::worker::internal {

// StdinFeeder writes a job's input into its program's stdin pipe without
// blocking: the request's stdin first, then each chunk streamed in
// (JobContext::TakeStdin), as the pipe has room. The poll loop watches
// pipe() for room while in_hand(), else ctx.stdin_fd() for the next chunk,
// and calls Write when either is ready.
//
// Not thread-safe: the job's thread only. Owns the pipe's write end;
// borrows the context and the request's stdin, which outlive it.
class StdinFeeder {
 public:
  // `data` is the request's stdin; `pipe` the write end of the program's
  // stdin, closed at once when there is no input at all.
  StdinFeeder(JobContext& ctx, std::string_view data, Fd pipe);

  // open says whether the pipe is still open; pipe() is its descriptor.
  bool open() const { return static_cast<bool>(pipe_); }
  int pipe() const { return pipe_.get(); }
  // in_hand says whether input waits for room in the pipe.
  bool in_hand() const { return !pending_.empty(); }

  // Write writes what input is in hand, taking the next streamed chunk
  // whenever the last is written, until the pipe is full or no chunk is
  // waiting. At the end of the input, or when the program closed its stdin,
  // the pipe is closed.
  void Write();

  // Close closes the pipe: at the end of the input, or before it (the
  // program closed its end, or exited), which the client then hears of
  // (Stop).
  void Close();

  // Stop takes no more input, telling the client if more could have come
  // (JobContext::CloseStdin). A cancelled job stops here and keeps its pipe
  // open until the program is reaped: closing it would hand the program an
  // end of file on an input cut short, and a program that handles SIGTERM
  // (or reads before it arrives) would take it for whole.
  void Stop();

 private:
  JobContext& ctx_;
  Fd pipe_;
  // Input not yet written: the rest of the request's stdin, then of the
  // streamed chunk in chunk_ (a buffer reused for every chunk).
  std::string_view pending_;
  std::string chunk_;
  bool more_;  // more chunks may come
};

}  // namespace cfdb::worker::internal
