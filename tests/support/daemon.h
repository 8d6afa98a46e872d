// Daemon and Command: run the cfdb-worker binary from a test, through the
// exec job runner (so its output is collected and it is always reaped).
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cfdb/worker/exec.h"
#include "gtest/gtest.h"
#include "support/loopback.h"
#include "support/slowdown.h"
#include "support/test_job.h"

namespace cfdb::worker::test_support {

inline std::string Binary() {
  const char* path = std::getenv("CFDB_WORKER_BINARY");
  return path != nullptr ? path : CFDB_WORKER_BINARY_PATH;
}

inline JobRequest Command(std::vector<std::string> args,
                          std::map<std::string, std::string> env = {}) {
  JobRequest request = ExecRequest({Binary()});
  MutableExec(request).argv.insert(MutableExec(request).argv.end(),
                                   args.begin(), args.end());
  MutableExec(request).env.insert(env.begin(), env.end());
  MutableExec(request).time_limit = std::chrono::seconds(60);
  return request;
}

// HeapLikeProduction wraps the daemon so that, under ASan, its heap is
// measured rather than ASan's: freed blocks wait in ASan's quarantine
// (256 MiB by default) before they can be reused, and free pages stay
// resident until their size class allocates again, neither of which the
// production heap (glibc with the worker's malloc_trim) does. The daemon's
// MemoryTrimmer purges ASan's allocator when CFDB_WORKER_ASAN_PURGE is set
// (src/serve/memory_trim.cc); other daemons keep the whole quarantine, to
// catch a use after free. Elsewhere it is no wrapper.
inline std::vector<std::string> HeapLikeProduction() {
#if defined(CFDB_ASAN)
  return {"/usr/bin/env", "CFDB_WORKER_ASAN_PURGE=1",
          "ASAN_OPTIONS=quarantine_size_mb=8:"
          "allocator_release_to_os_interval_ms=100"};
#else
  return {};
#endif
}

// Program is a binary that serves as `cfdb-worker serve` does and takes its
// flags (cfdb::worker::Serve), e.g. one of examples/.
struct Program {
  std::string path;
};

// Daemon runs `cfdb-worker serve --port 0 ARGS` (or `PROGRAM --port 0
// ARGS`) on a thread of its own and reads the port and pid from its
// "listening on" log line. A `wrapper` (e.g. {"prlimit", "--nofile=64"})
// runs the daemon through a program that execs it.
class Daemon {
 public:
  // `wrapper` runs the daemon, e.g. {"unshare", "--pid", "--fork"}.
  explicit Daemon(std::vector<std::string> args,
                  std::vector<std::string> wrapper = {})
      : Daemon(std::in_place, Wrapped(ServeCommand(std::move(args)), wrapper)) {
  }
  Daemon(const Program& program, std::vector<std::string> args)
      : Daemon(std::in_place, ProgramCommand(program, Serve(std::move(args)))) {
  }
  ~Daemon() {
    if (thread_.joinable()) {
      job_.Cancel();
      thread_.join();
    }
  }

  JobOutcome Wait() {
    thread_.join();
    return *outcome_;
  }
  std::string log() { return job_.err(); }
  bool WaitForLog(std::string_view text) { return job_.WaitForOutput(text); }
  int port() const { return port_; }
  // address is the TCP address clients dial: "127.0.0.1:PORT" (the
  // --host given otherwise, "[::1]:PORT" for ::1).
  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }

 private:
  // Runs `request`, a command that serves.
  Daemon(std::in_place_t, JobRequest request) : job_(std::move(request)) {
    thread_ = std::thread([this] { outcome_ = RunExec(job_); });
    EXPECT_TRUE(job_.WaitForOutput("listening on"));
    std::smatch m;
    const std::string log = job_.err();
    if (std::regex_search(
            log, m, std::regex(R"(listening on (\S+):(\d+) \(pid (\d+)\))"))) {
      address_ = absl::StrCat(m[1].str(), ":", m[2].str());
      port_ = std::stoi(m[2]);
      pid_ = std::stoi(m[3]);
    }
  }
  static JobRequest Wrapped(JobRequest request,
                            const std::vector<std::string>& wrapper) {
    MutableExec(request).argv.insert(MutableExec(request).argv.begin(),
                                     wrapper.begin(), wrapper.end());
    return request;
  }
  static JobRequest ServeCommand(std::vector<std::string> args) {
    args = Serve(std::move(args));
    args.insert(args.begin(), "serve");
    return Command(std::move(args));
  }
  static JobRequest ProgramCommand(const Program& program,
                                   std::vector<std::string> args) {
    JobRequest request = Command(std::move(args));
    MutableExec(request).argv[0] = program.path;
    return request;
  }
  // Serve picks a free port unless the test gives one, and pins the
  // lifetime jitter to 0 unless the test sets it, so that a test of the
  // max lifetime sees that lifetime.
  static std::vector<std::string> Serve(std::vector<std::string> args) {
    if (std::find(args.begin(), args.end(), "--max-lifetime-jitter-seconds") ==
        args.end()) {
      args.insert(args.begin(), {"--max-lifetime-jitter-seconds", "0"});
    }
    if (std::find(args.begin(), args.end(), "--port") == args.end()) {
      args.insert(args.begin(), {"--port", "0"});
    }
    return args;
  }
  CollectingJob job_;
  std::thread thread_;
  std::optional<JobOutcome> outcome_;
  std::string address_;
  int port_ = 0;
  pid_t pid_ = 0;
};

}  // namespace cfdb::worker::test_support
