// `cfdb-worker dispatch|attach|jobs|cancel`: the commands on jobs as
// handles. A job outlives the call that started it (its detach grace), so
// `dispatch` comes back to it after a lost stream, `attach` reads it again
// from any process, `jobs` lists what a worker holds and `cancel` ends one.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <iostream>
#include <iterator>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "cfdb/worker/connection.h"
#include "cfdb/worker/errors.h"
#include "cfdb/worker/exec.h"
#include "cfdb/worker/limits.h"
#include "cli/cli_flags.h"
#include "cli/client_calls.h"
#include "cli/commands.h"
#include "nlohmann/json.hpp"
#include "serve/backoff.h"
#include "spdlog/spdlog.h"

namespace cfdb::worker::cli {
namespace {

// A signal cancels the job with this kill grace (the worker's default).
constexpr Duration kSignalCancelGrace = std::chrono::seconds(10);

// Output writes a job's output to our stdout and stderr and counts where it
// got to in each stream: the offsets to attach again from.
class Output {
 public:
  explicit Output(std::string job_id) : job_id_(std::move(job_id)) {}

  // Callbacks writes the output; `on_started` runs once the job is
  // accepted or attached to.
  DispatchCallbacks Callbacks(const std::function<void()>& on_started = {}) {
    DispatchCallbacks callbacks;
    callbacks.on_accepted = on_started;
    callbacks.on_attached = [this,
                             on_started](const JobJournal::Attachment& a) {
      if (on_started) on_started();
      if (a.lost.stdout_bytes + a.lost.stderr_bytes > 0) {
        std::cerr << "cfdb-worker: job " << job_id_ << ": "
                  << a.lost.stdout_bytes << " bytes of stdout and "
                  << a.lost.stderr_bytes
                  << " of stderr are no longer kept by the worker and are "
                     "missing here\n";
      }
      from_ = a.from;
    };
    callbacks.on_output = [this](OutputStream stream, std::string_view data) {
      WriteAll(stream == OutputStream::kStdout ? STDOUT_FILENO : STDERR_FILENO,
               data);
      from_.of(stream) += data.size();
    };
    callbacks.on_lost = [this](OutputStream stream, uint64_t bytes) {
      std::cerr << "cfdb-worker: job " << job_id_ << ": " << bytes
                << " bytes of "
                << (stream == OutputStream::kStdout ? "stdout" : "stderr")
                << " went past the worker's buffer before this call read "
                   "them and are missing here\n";
      from_.of(stream) += bytes;
    };
    return callbacks;
  }

  StreamOffsets from() const { return from_; }

 private:
  const std::string job_id_;
  StreamOffsets from_;
};

// CancelJob cancels job `job_id` (Cancel, with the signal's kill grace) for
// `reason`, saying so on stderr, and how it failed if it did.
void CancelJob(WorkerConnection& connection, const std::string& job_id,
               std::string_view reason) {
  std::cerr << "cfdb-worker: " << reason << ": cancelling job " << job_id
            << "\n";
  absl::StatusOr<JobOutcome> ended =
      connection.Cancel(job_id, kSignalCancelGrace,
                        kSignalCancelGrace + std::chrono::seconds(30));
  if (!ended.ok()) {
    std::cerr << "cfdb-worker: cancelling job " << job_id
              << " failed: " << ended.status() << "\n";
  }
}

// CancelOnSignal cancels the job (Cancel RPC) when this process gets
// SIGINT, SIGTERM or SIGHUP: a command that is asked to end ends its job,
// rather than leaving it to its detach grace. A second signal ends the
// process at once. Before the job is accepted a signal waits for the
// acceptance (Accepted), so that a job it reaches too early is not left
// running.
class CancelOnSignal {
 public:
  CancelOnSignal(WorkerConnection& connection, std::string job_id)
      : connection_(connection), job_id_(std::move(job_id)) {
    if (pipe2(pipe_, O_CLOEXEC | O_NONBLOCK) != 0) return;
    Self() = this;
    struct sigaction action {};
    action.sa_handler = [](int signo) {
      CancelOnSignal* self = Self();
      if (self == nullptr) return;
      if (self->signal_.exchange(signo) != 0) {
        ::signal(signo, SIG_DFL);  // the second: end now
        raise(signo);
        return;
      }
      const char byte = 1;
      (void)!write(self->pipe_[1], &byte, 1);
    };
    for (int signo : {SIGINT, SIGTERM, SIGHUP})
      sigaction(signo, &action, nullptr);
    thread_ = std::thread([this] { Watch(); });
  }
  ~CancelOnSignal() {
    for (int signo : {SIGINT, SIGTERM, SIGHUP}) ::signal(signo, SIG_DFL);
    Self() = nullptr;
    done_ = true;
    const char byte = 0;
    if (pipe_[1] >= 0) (void)!write(pipe_[1], &byte, 1);
    if (thread_.joinable()) thread_.join();
    for (int fd : pipe_) {
      if (fd >= 0) close(fd);
    }
  }
  CancelOnSignal(const CancelOnSignal&) = delete;
  CancelOnSignal& operator=(const CancelOnSignal&) = delete;

  // Accepted says the worker accepted the job: a signal may cancel it now.
  void Accepted() {
    accepted_ = true;
    const char byte = 0;
    if (pipe_[1] >= 0) (void)!write(pipe_[1], &byte, 1);
  }

  // signal returns the signal that came, or 0.
  int signal() const { return signal_.load(); }

 private:
  static CancelOnSignal*& Self() {
    static CancelOnSignal* self = nullptr;
    return self;
  }

  void Watch() {
    bool cancelled = false;
    while (!done_) {
      pollfd fd{pipe_[0], POLLIN, 0};
      if (poll(&fd, 1, -1) < 0 && errno != EINTR) return;
      char bytes[16];
      while (read(pipe_[0], bytes, sizeof bytes) > 0) {
      }
      if (cancelled || signal_ == 0 || !accepted_ || done_) continue;
      cancelled = true;
      CancelJob(connection_, job_id_,
                absl::StrCat("SIG", sigabbrev_np(signal_)));
    }
  }

  WorkerConnection& connection_;
  const std::string job_id_;
  int pipe_[2] = {-1, -1};
  std::atomic<int> signal_{0};
  std::atomic<bool> accepted_{false};
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// Ended reports a job's outcome, its end; returns the command's exit code:
// the job's shell status, or 128 + the signal that cancelled it.
int Ended(const std::string& job_id, const JobOutcome& outcome, int signo) {
  if (outcome.kind == JobOutcome::Kind::kFailed) {
    std::cerr << "cfdb-worker: job " << job_id << " " << outcome.ToString()
              << "\n";
  }
  return signo != 0 ? 128 + signo : outcome.ShellStatus();
}

// ReattachWindow is how long after a lost stream `dispatch` tries to attach
// again (cfdb/worker/limits.h).
Duration ReattachWindow(double detach_grace_seconds) {
  if (detach_grace_seconds < 0) return kReattachUnlimitedWindow;
  return std::max<Duration>(ToDuration(Seconds(detach_grace_seconds)),
                            kReattachMinWindow);
}

// LostStream says whether a failed job call left a job that may run on to
// be attached again: it was accepted and the stream broke, and no other
// call took it over.
bool LostStream(Rpc rpc, const absl::Status& status) {
  return ClassifyError(rpc, status) == ErrorKind::kOutcomeUnknown &&
         !absl::IsAborted(status);
}

// RequestOf is the request `dispatch` sends (a generated id if none).
JobRequest RequestOf(const DispatchOptions& dispatch) {
  JobRequest request;
  request.job_id =
      dispatch.job_id.empty()
          ? absl::StrCat(
                "cli-", getpid(), "-",
                std::chrono::system_clock::now().time_since_epoch().count())
          : dispatch.job_id;
  request.kind = dispatch.kind;
  if (request.kind == kExecKind) {
    MutableExec(request).argv = dispatch.argv;
    MutableExec(request).env = dispatch.env;
    MutableExec(request).cwd = dispatch.cwd;
    MutableExec(request).time_limit =
        ToDuration(Seconds(dispatch.time_limit_seconds));
  } else {
    request.payload = dispatch.payload;
  }
  request.detach_grace = GraceFromSeconds(dispatch.detach_grace_seconds);
  request.attach_if_exists = dispatch.attach_if_exists;
  request.drop_oldest = dispatch.drop_oldest;
  return request;
}

// StreamsStdin says whether our stdin goes to the job as a stream: unless
// it is a terminal (a job should not wait on someone's keyboard by
// accident), it was closed, or --no-stdin says no. A stdin inherited from
// our parent has no close-on-exec flag (it survived the exec); a
// descriptor 0 that has one was opened in this process (gRPC's libraries
// open an eventfd before main), so the real stdin was closed (`<&-`) and
// fd 0 is not ours to read.
bool StreamsStdin(const DispatchOptions& dispatch) {
  const int stdin_flags = fcntl(STDIN_FILENO, F_GETFD);
  return dispatch.read_stdin && stdin_flags != -1 &&
         (stdin_flags & FD_CLOEXEC) == 0 && !isatty(STDIN_FILENO);
}

// A Dispatching is one `dispatch` command's job in flight: its calls on
// one connection, and the outcome and RPC of the last of them.
class Dispatching {
 public:
  Dispatching(const ClientOptions& options, WorkerConnection& connection,
              JobRequest request)
      : options_(options),
        connection_(connection),
        request_(std::move(request)),
        signals_(connection, request_.job_id),
        output_(request_.job_id),
        callbacks_(output_.Callbacks([this] { signals_.Accepted(); })) {
    if (options.timeout > Duration::zero()) timeout_ = options.timeout;
  }

  // Run sends the job, follows it to its end through lost streams, and
  // returns the command's exit code.
  int Run(bool stream_stdin, double detach_grace_seconds) {
    Send(stream_stdin);
    Reattach(detach_grace_seconds);
    if (!outcome_.ok() && rpc_ == Rpc::kAttach &&
        !Accepted(outcome_.status()) &&
        IsTransient(ClassifyError(rpc_, outcome_.status()))) {
      // The job had started, and attaching again ran out: not "nothing
      // started" but its outcome unknown.
      outcome_ = MarkAccepted(outcome_.status());
    }
    if (!outcome_.ok() && ClassifyError(rpc_, outcome_.status()) ==
                              ErrorKind::kAcceptedDeadlineExceeded) {
      // --timeout-seconds is the caller's deadline for the job, not only
      // for watching it: a job nobody waits for any more is cancelled now
      // rather than left running detached for its grace.
      CancelJob(connection_, request_.job_id, "--timeout-seconds passed");
    }
    if (!outcome_.ok()) return Fail(rpc_, options_, outcome_.status());
    return Ended(request_.job_id, *outcome_, signals_.signal());
  }

 private:
  // Send dispatches the job, with retries. A retry sends the same id: a
  // job under it is the one an earlier attempt started, its Accepted lost
  // with the call, so it is attached to.
  void Send(bool stream_stdin) {
    outcome_ = WithRetries(options_.attempts, Rpc::kDispatch, [&] {
      if (++attempt_ > 1) request_.attach_if_exists = true;
      return stream_stdin
                 ? connection_.DispatchStream(request_, STDIN_FILENO,
                                              callbacks_, timeout_)
                 : connection_.Dispatch(request_, callbacks_, timeout_);
    });
    if (!stream_stdin || !absl::IsUnimplemented(outcome_.status()) ||
        Accepted(outcome_.status())) {
      return;
    }
    // A worker from before DispatchStream: none of stdin was read (that
    // starts at acceptance), so an exec job's goes whole in the request, as
    // it did; another kind's input is its payload.
    const bool exec = request_.kind == kExecKind;
    spdlog::warn("{}: the worker predates streamed stdin; sending {}",
                 options_.address, exec ? "it whole" : "the job without it");
    if (exec) {
      MutableExec(request_).stdin_data.assign(
          std::istreambuf_iterator<char>(std::cin),
          std::istreambuf_iterator<char>());
    }
    Send(false);
  }

  // Reattach follows a lost stream, which is not the job's end: it
  // attaches again from where the output got to, with a backoff, while
  // the job may still be there. The window for trying starts at each loss
  // (a stream that was attached again and broke later gets a window of its
  // own); an attach that took lasts as long as the job, bounded only by
  // --timeout-seconds. A dispatch lost before its Accepted came may have
  // started the job all the same: attach to see (again while that attach
  // is itself lost on the way); if it finds no job (or no worker), the
  // dispatch's own error stands. A signal ends the watching, but not that
  // look: the attach lets its cancel reach the job.
  void Reattach(double detach_grace_seconds) {
    const TimePoint deadline = timeout_ ? start_ + *timeout_ : TimePoint::max();
    TimePoint give_up = TimePoint::min();
    Backoff backoff(kRetryInitialDelay, Backoff::kDefaultFactor,
                    kRetryMaxDelay);
    std::optional<absl::Status> unanswered;  // the dispatch's, while probing
    while (!outcome_.ok()) {
      const absl::Status& status = outcome_.status();
      // The attach that looks for the job has not reached it (yet).
      const bool probing = unanswered && !Accepted(status);
      const bool probe_lost = probing &&
                              IsTransient(ClassifyError(rpc_, status)) &&
                              LostOnTheWay(status);
      if (probing && !probe_lost) {
        outcome_ = *std::move(unanswered);
        rpc_ = Rpc::kDispatch;
        return;
      }
      const bool first_loss = MayHaveBeenAccepted(rpc_, status);
      if (!first_loss && !probe_lost) {
        unanswered.reset();
        if (signals_.signal() != 0 ||
            (!LostStream(rpc_, status) &&
             !(rpc_ == Rpc::kAttach &&
               IsTransient(ClassifyError(rpc_, status))))) {
          return;
        }
      }
      const TimePoint now = std::chrono::steady_clock::now();
      if (first_loss) unanswered = status;
      if (first_loss || LostStream(rpc_, status)) {
        give_up =
            std::min(now + ReattachWindow(detach_grace_seconds), deadline);
        backoff.Succeeded();  // each loss starts the schedule again
      }
      const Duration delay = backoff.Failed();
      if (now + delay >= give_up) return;
      spdlog::warn("job {}: {}; attaching {} in {:.1f} s from offsets {}/{}",
                   request_.job_id, status.ToString(),
                   unanswered ? "to see whether it started" : "again",
                   ToSeconds(delay), output_.from().stdout_bytes,
                   output_.from().stderr_bytes);
      std::this_thread::sleep_for(delay);
      rpc_ = Rpc::kAttach;
      std::optional<Duration> left;
      if (timeout_) left = deadline - std::chrono::steady_clock::now();
      outcome_ =
          connection_.Attach(request_.job_id, output_.from(), callbacks_, left);
    }
  }

  const ClientOptions& options_;
  WorkerConnection& connection_;
  JobRequest request_;
  const TimePoint start_ = std::chrono::steady_clock::now();
  CancelOnSignal signals_;
  Output output_;
  const DispatchCallbacks callbacks_;
  std::optional<Duration> timeout_;
  int attempt_ = 0;
  Rpc rpc_ = Rpc::kDispatch;
  absl::StatusOr<JobOutcome> outcome_ = absl::UnknownError("not sent");
};

}  // namespace

namespace {

// RunDetached is `dispatch --detach`: the job is sent (its stdin, if we
// have one to give, whole in the request), and once it is accepted its id
// is printed and the command exits 0, the job running on. A retry sends the
// same id with attach_if_exists: a job an earlier attempt started is the
// one accepted.
int RunDetached(const ClientOptions& options, WorkerConnection& connection,
                JobRequest request, bool with_stdin, bool json) {
  if (with_stdin && request.kind == kExecKind) {
    MutableExec(request).stdin_data.assign(
        std::istreambuf_iterator<char>(std::cin),
        std::istreambuf_iterator<char>());
  }
  std::optional<Duration> timeout;
  if (options.timeout > Duration::zero()) timeout = options.timeout;
  int attempt = 0;
  absl::StatusOr<StreamOffsets> from =
      WithRetries(options.attempts, Rpc::kDispatch, [&] {
        if (++attempt > 1) request.attach_if_exists = true;
        return connection.Submit(request, timeout);
      });
  if (!from.ok()) return Fail(Rpc::kDispatch, options, from.status());
  if (!json) {
    std::cout << request.job_id << "\n";
    return kExitOk;
  }
  nlohmann::ordered_json line;
  line["job_id"] = request.job_id;
  line["stdout_offset"] = from->stdout_bytes;
  line["stderr_offset"] = from->stderr_bytes;
  std::cout << line.dump(-1, ' ', false,
                         nlohmann::json::error_handler_t::replace)
            << "\n";
  return kExitOk;
}

}  // namespace

int RunDispatch(const ClientOptions& options, const DispatchOptions& dispatch) {
  const bool stream_stdin = StreamsStdin(dispatch);  // before we open any fd
  auto connection = Connect(options.address, options);
  if (!connection.ok()) {
    return Fail(Rpc::kDispatch, options, connection.status());
  }
  if (dispatch.detach) {
    return RunDetached(options, **connection, RequestOf(dispatch), stream_stdin,
                       dispatch.json);
  }
  return Dispatching(options, **connection, RequestOf(dispatch))
      .Run(stream_stdin, dispatch.detach_grace_seconds);
}

int RunAttach(const ClientOptions& options, const std::string& job_id,
              StreamOffsets from, bool take_over) {
  auto connection = Connect(options.address, options);
  if (!connection.ok()) return Fail(Rpc::kAttach, options, connection.status());
  Output output(job_id);
  std::optional<Duration> timeout;
  if (options.timeout > Duration::zero()) timeout = options.timeout;
  absl::StatusOr<JobOutcome> outcome =
      WithRetries(options.attempts, Rpc::kAttach, [&] {
        return (*connection)
            ->Attach(job_id, from, output.Callbacks(), timeout,
                     take_over ? JobJournal::Role::kControl
                               : JobJournal::Role::kFollow);
      });
  if (!outcome.ok()) return Fail(Rpc::kAttach, options, outcome.status());
  return Ended(job_id, *outcome, 0);
}

namespace {

// JobLine is one job as `jobs --format json` prints it.
nlohmann::ordered_json JobLine(const JobInfo& job, const std::string& started) {
  nlohmann::ordered_json line;
  line["job_id"] = job.job_id;
  line["kind"] = job.kind;
  line["state"] = job.running ? "running" : "ended";
  line["client"] = job.client;
  line["program"] = job.program;
  line["started"] = started;
  line["running_seconds"] = ToSeconds(job.running_for);
  line["attached"] = job.attached;
  line["stdout_bytes"] = job.written.stdout_bytes;
  line["stderr_bytes"] = job.written.stderr_bytes;
  line["retained_bytes"] = job.retained_bytes;
  line["dropped_bytes"] = job.dropped_bytes;
  line["detach_grace_seconds"] =
      job.detach_grace < Duration::zero() ? -1.0 : ToSeconds(job.detach_grace);
  if (job.outcome) {
    line["outcome"] = job.outcome->ToString();
    line["exit_status"] = job.outcome->ShellStatus();
  }
  return line;
}

// PrintTable prints `rows` (the first is the header) in columns as wide as
// their widest cell, the last left ragged; a numeric column (`right`) is
// aligned right.
void PrintTable(const std::vector<std::vector<std::string>>& rows,
                const std::vector<bool>& right) {
  std::vector<std::size_t> widths(right.size(), 0);
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < row.size(); ++i) {
      widths[i] = std::max(widths[i], row[i].size());
    }
  }
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      const bool last = i + 1 == row.size();
      const std::string pad(last ? 0 : widths[i] - row[i].size(), ' ');
      absl::StrAppend(&line, right[i] ? pad : "", row[i], right[i] ? "" : pad,
                      last ? "" : " ");
    }
    std::cout << line << "\n";
  }
}

}  // namespace

int RunJobs(const ClientOptions& options, bool json) {
  auto connection = Connect(options.address, options);
  if (!connection.ok())
    return Fail(Rpc::kListJobs, options, connection.status());
  // Page by page, each with the deadline; the counts of the jobs of other
  // identities come with every page.
  std::vector<JobInfo> jobs;
  JobsPage last;
  do {
    absl::StatusOr<JobsPage> page =
        WithRetries(options.attempts, Rpc::kListJobs, [&] {
          return (*connection)
              ->ListJobsPage(0, last.next_page_token, options.timeout);
        });
    if (!page.ok()) return Fail(Rpc::kListJobs, options, page.status());
    last = *std::move(page);
    std::move(last.jobs.begin(), last.jobs.end(), std::back_inserter(jobs));
  } while (!last.next_page_token.empty());
  std::vector<std::vector<std::string>> rows = {
      {"JOB", "STATE", "CLIENT", "PROGRAM", "STARTED", "SECONDS", "ATTACHED",
       "OUTCOME"}};
  for (const JobInfo& job : jobs) {
    const std::string started =
        absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromChrono(job.started),
                         absl::UTCTimeZone());
    if (json) {
      std::cout << JobLine(job, started)
                       .dump(-1, ' ', false,
                             nlohmann::json::error_handler_t::replace)
                << "\n";
      continue;
    }
    rows.push_back({job.job_id, job.running ? "running" : "ended", job.client,
                    job.program, started,
                    absl::StrFormat("%.1f", ToSeconds(job.running_for)),
                    job.attached ? "yes" : "no",
                    job.outcome ? job.outcome->ToString() : std::string()});
  }
  if (!json) {
    PrintTable(rows, {false, false, false, false, false, true, false, false});
    if (last.others_running + last.others_ended > 0) {
      std::cout << absl::StrFormat(
          "(and %d running, %d ended, of other identities: not shown)\n",
          last.others_running, last.others_ended);
    }
  }
  return kExitOk;
}

int RunCancel(const ClientOptions& options, const std::string& job_id,
              double grace_seconds) {
  auto connection = Connect(options.address, options);
  if (!connection.ok()) return Fail(Rpc::kCancel, options, connection.status());
  absl::StatusOr<JobOutcome> outcome =
      WithRetries(options.attempts, Rpc::kCancel, [&] {
        return (*connection)
            ->Cancel(job_id, ToDuration(Seconds(grace_seconds)),
                     options.timeout);
      });
  if (!outcome.ok()) return Fail(Rpc::kCancel, options, outcome.status());
  std::cout << "job " << job_id << " " << outcome->ToString() << "\n";
  return kExitOk;
}

namespace {

Runner AddDispatch(CLI::App& command) {
  struct Flags {
    explicit Flags(CLI::App* command)
        : client(command,
                 "deadline of the whole call in seconds, > 0 (default none)"),
          job(command) {}
    Client client;
    DispatchFlags job;
  };
  auto flags = std::make_shared<Flags>(&command);
  return [flags](const std::vector<std::string>& after) -> int {
    auto options = flags->client.Resolve(Duration::zero());
    if (!options) return kExitUsage;
    if (absl::Status s = flags->job.Finish(after); !s.ok()) {
      return Usage(flags->client.command, s.message());
    }
    return RunDispatch(*options, flags->job.job);
  };
}

Runner AddJobs(CLI::App& command) {
  struct Flags {
    explicit Flags(CLI::App* command)
        : client(command, "deadline in seconds, > 0 (default 5)") {}
    Client client;
    std::string format = "text";
  };
  auto flags = std::make_shared<Flags>(&command);
  AddFormatFlag(command, flags->format,
                "text (a table) or json (one object a line)");
  return [flags](const std::vector<std::string>&) -> int {
    if (absl::Status s = CheckFormat(flags->format); !s.ok()) {
      return Usage(flags->client.command, s.message());
    }
    auto options = flags->client.Resolve(std::chrono::seconds(5));
    return options ? RunJobs(*options, flags->format == "json") : kExitUsage;
  };
}

Runner AddAttach(CLI::App& command) {
  struct Flags {
    explicit Flags(CLI::App* command)
        : client(command,
                 "deadline of the whole call in seconds, > 0 (default none)"),
          job(command, /*offsets=*/true) {}
    Client client;
    JobFlags job;
  };
  auto flags = std::make_shared<Flags>(&command);
  return [flags](const std::vector<std::string>&) -> int {
    absl::StatusOr<StreamOffsets> from = flags->job.Offsets();
    if (!from.ok())
      return Usage(flags->client.command, from.status().message());
    auto options = flags->client.Resolve(Duration::zero());
    return options ? RunAttach(*options, flags->job.job_id, *from,
                               flags->job.take_over)
                   : kExitUsage;
  };
}

Runner AddCancel(CLI::App& command) {
  struct Flags {
    explicit Flags(CLI::App* command)
        : client(command, "deadline in seconds, > 0 (default: grace + 60)"),
          job(command, /*offsets=*/false) {}
    Client client;
    JobFlags job;
  };
  auto flags = std::make_shared<Flags>(&command);
  return [flags](const std::vector<std::string>&) -> int {
    absl::StatusOr<double> seconds = ParseSecondsFlag(
        "--grace-seconds", flags->job.grace, SecondsRange::kNonNegative);
    if (!seconds.ok()) {
      return Usage(flags->client.command, seconds.status().message());
    }
    auto options = flags->client.Resolve(StopDeadline(*seconds));
    return options ? RunCancel(*options, flags->job.job_id, *seconds)
                   : kExitUsage;
  };
}

}  // namespace

std::vector<Command> JobCommands() {
  return {
      RpcCommand(Rpc::kDispatch, "[FLAGS] -- PROGRAM [ARGS...]", &AddDispatch,
                 /*takes_arguments=*/true),
      RpcCommand(Rpc::kListJobs, "[--format text|json]", &AddJobs),
      RpcCommand(Rpc::kAttach, "JOB_ID (exit codes as dispatch)", &AddAttach),
      RpcCommand(Rpc::kCancel, "JOB_ID [--grace-seconds S]", &AddCancel)};
}

}  // namespace cfdb::worker::cli
