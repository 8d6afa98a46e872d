// process-bench: whole-process figures, measured on real processes. Each mode
// prints one JSON object on stdout with the per-repetition values; the
// driver (bench/run.py) takes medians and writes the table.
//
//   process-bench start --reps N -- PROGRAM ARGS...
//       cold start (spawn -> first answered Idle), resident memory once idle,
//       SIGTERM -> exit. PROGRAM must log "listening on 127.0.0.1:PORT".
//   process-bench pipes --worker BIN --bare BIN --mib N --reps R
//                       [--directions output,input,both] [--input-job PROG]
//       N MiB streamed three ways through a job of `BIN serve`, called by
//       `BIN dispatch`, and through the same shape of bare gRPC pipeline
//       (`bare-pipe serve` + `bare-pipe client`), and the same programs as a
//       local pipeline (context): output (`cat FILE` in the job, its stdout
//       drained here), input (`cat FILE |` the job, PROG: sha256sum), both
//       (`cat FILE |` a job `cat`, drained). Per run: the rate, the server's
//       peak RSS growth and CPU time, the client's peak RSS and CPU time.
//   process-bench exec --worker BIN --bare BIN --jobs K --reps R [--pause-ms P]
//       the job start: K jobs of `/bin/true` called in turn on one channel
//       to a `BIN serve` and, interleaved by repetition, to a `bare-pipe
//       serve` (which spawns with posix_spawn and waits with waitpid), P ms
//       apart (default 0: back to back). Per repetition and server: its CPU
//       time per job, and the median and 99th percentile of the calls' wall
//       time (call -> the stream's end).
//   process-bench trickle --worker BIN --reps R
//       `producer | BIN dispatch -- cat`, the producer writing a line every
//       100 ms and never closing: spawn -> first line back, and each later
//       line's write -> return.
//   process-bench detached --worker BIN --mib N --reps R [--jobs K]
//       jobs as handles: N MiB of a job's output through `dispatch`
//       (attached) and, interleaved, the same job left detached and read by
//       `attach` later, byte-exact; then K detached jobs (K =
//       --max-concurrent-tasks) each filling its output buffer: the worker's
//       peak RSS growth.
//   process-bench retire --worker BIN --reps R --idle-timeout S
//       `BIN serve --idle-timeout-seconds S`, all R at once: exit time minus
//       spawn time plus S (idle self-retirement).
//   process-bench fleet --worker BIN --workers N --reps R
//       N workers, then `BIN reap` over all of them: R dry runs, then one
//       that stops them all. Per run: reap's wall time, time to its first
//       line, CPU, peak RSS and most sockets at once; for the stop, each
//       worker's exit time and CPU from the stop on.
//   process-bench stub-fleet --worker BIN --stub BIN --workers N --reps R
//                            [--concurrency C] [--tls DIR]
//       `BIN reap` over N ports of one fleet-stub process (idle workers that
//       answer Stop and stay): R dry runs and R runs that stop, with
//       --concurrency C (default 64), plaintext or mutual TLS from DIR.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "cfdb/worker/v1/worker.grpc.pb.h"
#include "grpcpp/grpcpp.h"

extern char** environ;

namespace {

namespace v1 = ::cfdb::worker::v1;
using Clock = std::chrono::steady_clock;

double Millis(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "process-bench: %s\n", message.c_str());
  std::exit(1);
}

// Io is where a Child's stdin and stdout go.
struct Io {
  int stdin_fd = -1;         // -1: /dev/null
  bool pipe_stdout = false;  // false: /dev/null; true: a pipe, stdout_fd()
};

// Child is a spawned process whose stderr is collected by a thread and whose
// stdout goes to /dev/null or to a pipe the caller reads.
class Child {
 public:
  explicit Child(const std::vector<std::string>& argv, Io io = {}) {
    int err[2];
    int out[2] = {-1, -1};
    const bool pipe_stdout = io.pipe_stdout;
    if (pipe2(err, O_CLOEXEC) != 0) Die("pipe");
    if (pipe_stdout && pipe2(out, O_CLOEXEC) != 0) Die("pipe");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    if (io.stdin_fd >= 0) {
      posix_spawn_file_actions_adddup2(&actions, io.stdin_fd, 0);
    } else {
      posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    }
    if (pipe_stdout) {
      posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    } else {
      posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    }
    posix_spawn_file_actions_adddup2(&actions, err[1], 2);
    std::vector<char*> args;
    for (const std::string& a : argv)
      args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    started_ = Clock::now();
    if (posix_spawnp(&pid_, args[0], &actions, nullptr, args.data(), environ) !=
        0) {
      Die("cannot spawn " + argv[0]);
    }
    posix_spawn_file_actions_destroy(&actions);
    close(err[1]);
    if (pipe_stdout) {
      close(out[1]);
      stdout_fd_ = out[0];
    }
    reader_ = std::thread([this, fd = err[0]] {
      char buf[4096];
      for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) {
        absl::MutexLock lock(&mu_);
        log_.append(buf, static_cast<std::size_t>(n));
      }
      close(fd);
    });
  }
  ~Child() {
    if (!exited_) {
      kill(pid_, SIGKILL);
      Wait();
    }
    CloseStdout();
    reader_.join();
  }

  // CloseStdout closes this end of the stdout pipe (once it has been handed
  // to another child).
  void CloseStdout() {
    if (stdout_fd_ >= 0) close(stdout_fd_);
    stdout_fd_ = -1;
  }

  // Port waits (up to 30 s) for the "listening on" line and returns its port.
  int Port() {
    absl::MutexLock lock(&mu_);
    auto seen = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return log_.find("listening on 127.0.0.1:") != std::string::npos &&
             log_.find('\n', log_.find("listening on")) != std::string::npos;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&seen), absl::Seconds(30))) {
      Die("no listening line from pid " + std::to_string(pid_) + ": " + log_);
    }
    std::smatch m;
    std::regex_search(log_, m,
                      std::regex(R"(listening on 127\.0\.0\.1:(\d+))"));
    return std::stoi(m[1]);
  }

  // Wait reaps the child and returns its wait status; exited_at(),
  // max_rss_kib() and cpu_seconds() are then set.
  int Wait() {
    int status = 0;
    while (wait4(pid_, &status, 0, &usage_) < 0 && errno == EINTR) {
    }
    exited_at_ = Clock::now();
    exited_ = true;
    return status;
  }

  pid_t pid() const { return pid_; }
  int stdout_fd() const { return stdout_fd_; }
  Clock::time_point started() const { return started_; }
  Clock::time_point exited_at() const { return exited_at_; }
  // Peak resident set (getrusage's ru_maxrss), in KiB.
  long max_rss_kib() const { return usage_.ru_maxrss; }
  // User + system time.
  double cpu_seconds() const {
    auto seconds = [](const timeval& t) {
      return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6;
    };
    return seconds(usage_.ru_utime) + seconds(usage_.ru_stime);
  }
  std::string log() {
    absl::MutexLock lock(&mu_);
    return log_;
  }

 private:
  pid_t pid_ = 0;
  int stdout_fd_ = -1;
  bool exited_ = false;
  Clock::time_point started_, exited_at_;
  rusage usage_ = {};
  std::thread reader_;
  absl::Mutex mu_;
  std::string log_ ABSL_GUARDED_BY(mu_);
};

// StatusKiB reads a "VmRSS:"-style line of /proc/PID/status in KiB.
long StatusKiB(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0)
      return std::atol(line.c_str() + field.size() + 1);
  }
  return -1;
}

// CpuSeconds is the user + system time of a live process so far: its own,
// and with `with_reaped_children` that of the children it has reaped too
// (as wait4 counts it at its exit).
double CpuSeconds(pid_t pid, bool with_reaped_children = false) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  // Fields after the command's closing parenthesis: state is field 3,
  // utime, stime, cutime and cstime fields 14 to 17.
  std::vector<std::string> fields =
      absl::StrSplit(stat.substr(stat.rfind(')') + 2), ' ');
  if (fields.size() < 15) return 0;
  long ticks = 0;
  for (int i = 11; i <= (with_reaped_children ? 14 : 12); ++i) {
    ticks += std::stol(fields[i]);
  }
  return static_cast<double>(ticks) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// IdleOnce calls Idle on a fresh channel, waiting for the server to be ready.
bool IdleOnce(v1::Worker::Stub& stub) {
  grpc::ClientContext context;
  context.set_wait_for_ready(true);
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  v1::IdleTime reply;
  return stub.Idle(&context, v1::IdleRequest(), &reply).ok();
}

std::string Json(const std::vector<double>& values) {
  std::string s = "[";
  for (std::size_t i = 0; i < values.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(values[i]);
  }
  return s + "]";
}

int Start(int reps, const std::vector<std::string>& argv) {
  std::vector<double> cold_ms, rss_kib, sigterm_ms;
  for (int i = 0; i < reps; ++i) {
    Child child(argv);
    const int port = child.Port();
    auto stub = v1::Worker::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                            grpc::InsecureChannelCredentials()));
    if (!IdleOnce(*stub)) Die("no Idle answer: " + child.log());
    cold_ms.push_back(Millis(Clock::now() - child.started()));
    // Resident memory once it has served a few calls and settled.
    for (int j = 0; j < 50; ++j) IdleOnce(*stub);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    rss_kib.push_back(static_cast<double>(StatusKiB(child.pid(), "VmRSS")));
    stub.reset();
    const auto t0 = Clock::now();
    kill(child.pid(), SIGTERM);
    child.Wait();
    sigterm_ms.push_back(Millis(child.exited_at() - t0));
  }
  std::printf(
      "{\"cold_start_ms\": %s, \"rss_kib\": %s, \"sigterm_exit_ms\": %s}\n",
      Json(cold_ms).c_str(), Json(rss_kib).c_str(), Json(sigterm_ms).c_str());
  return 0;
}

// Drain reads `fd` to its end and returns the byte count; the first bytes
// (up to 256) are kept in `*head` if given.
long Drain(int fd, std::string* head = nullptr) {
  static std::vector<char> buf(1 << 20);
  long total = 0;
  for (ssize_t n; (n = read(fd, buf.data(), buf.size())) > 0;) {
    if (head != nullptr && head->size() < 256) {
      head->append(buf.data(),
                   std::min<std::size_t>(static_cast<std::size_t>(n),
                                         256 - head->size()));
    }
    total += n;
  }
  return total;
}

// SparseFile is a temporary file of zeros that takes no disk: reading it
// costs no I/O.
class SparseFile {
 public:
  explicit SparseFile(long bytes) {
    const int fd = mkstemp(path_);
    if (fd < 0 || ftruncate(fd, bytes) != 0) Die("cannot make the input file");
    close(fd);
  }
  ~SparseFile() { unlink(path_); }
  std::string path() const { return path_; }

 private:
  char path_[32] = "/tmp/cfdb-bench-XXXXXX";
};

// Leg is one run of a pipeline: `cat FILE |` (with an input) a client whose
// stdout this process drains.
struct Leg {
  double mib_per_s = 0;
  long out_bytes = 0;
  std::string head;  // the first bytes of the output
  // ru_maxrss of the client. It counts the address space the client was
  // spawned from until its exec (this process's, bench_peak_kib), so only a
  // figure above that is the client's own; a local program's is not.
  long client_peak_kib = 0;
  long server_growth_kib = 0;  // the server's VmHWM minus VmRSS before
  double client_cpu_s = 0;     // user + system
  double server_cpu_s = 0;     // the server's own (its jobs' not included)
};

// RunLeg runs `client` (fed `cat input` when an input is given, else
// /dev/null) and drains its stdout; it must exit 0. With a server, its peak
// RSS is reset first. The rate is `mib` over spawn-to-exit of the pipeline.
Leg RunLeg(Child* server, const std::vector<std::string>& client,
           const std::string* input, long mib) {
  long rss_before = 0;
  double cpu_before = 0;
  if (server != nullptr) {
    cpu_before = CpuSeconds(server->pid());
    std::ofstream("/proc/" + std::to_string(server->pid()) + "/clear_refs")
        << "5";
    rss_before = StatusKiB(server->pid(), "VmRSS");
  }
  const Clock::time_point start = Clock::now();
  std::optional<Child> producer;
  if (input != nullptr) {
    producer.emplace(std::vector<std::string>{"/bin/cat", *input},
                     Io{.pipe_stdout = true});
  }
  Child job(client, {.stdin_fd = producer ? producer->stdout_fd() : -1,
                     .pipe_stdout = true});
  if (producer) producer->CloseStdout();
  Leg leg;
  leg.out_bytes = Drain(job.stdout_fd(), &leg.head);
  const int status = job.Wait();
  if (status != 0 || (producer && producer->Wait() != 0)) {
    Die(client[0] + " exited with status " + std::to_string(status) + ": " +
        job.log());
  }
  leg.mib_per_s =
      mib / std::chrono::duration<double>(job.exited_at() - start).count();
  leg.client_peak_kib = job.max_rss_kib();
  leg.client_cpu_s = job.cpu_seconds();
  if (server != nullptr) {
    leg.server_growth_kib = StatusKiB(server->pid(), "VmHWM") - rss_before;
    leg.server_cpu_s = CpuSeconds(server->pid()) - cpu_before;
  }
  return leg;
}

// Series is one carrier's figures in one direction by name, a value per
// repetition.
using Series = std::map<std::string, std::vector<double>>;

// Json renders a series as an object of arrays.
std::string Json(const Series& series) {
  std::string json = "{";
  const char* sep = "";
  for (const auto& [field, values] : series) {
    json += sep + ("\"" + field + "\": ") + Json(values);
    sep = ", ";
  }
  return json + "}";
}

int Pipes(const std::string& worker, const std::string& bare, long mib,
          int reps, const std::vector<std::string>& directions,
          const std::string& input_job) {
  const SparseFile file(mib << 20);
  const std::string path = file.path();
  Child ours_server({worker, "serve", "--port", "0", "--max-concurrent-tasks",
                     "1", "--idle-timeout-seconds", "0"});
  Child bare_server({bare, "serve", "--port", "0"});
  const std::string ours_address =
      "127.0.0.1:" + std::to_string(ours_server.Port());
  const std::string bare_address =
      "127.0.0.1:" + std::to_string(bare_server.Port());

  // The job of each direction, and whether it is fed the file.
  struct Direction {
    bool input;
    std::vector<std::string> job;
  };
  const std::map<std::string, Direction> shapes = {
      {"output", {false, {"/bin/cat", path}}},
      {"input", {true, {input_job}}},
      {"both", {true, {"/bin/cat"}}},
  };
  // The client command that runs `job` through each carrier; "local" runs
  // the job itself.
  auto command = [&](const std::string& carrier, const Direction& d) {
    std::vector<std::string> argv;
    if (carrier == "ours") {
      argv = {worker, "dispatch", "--address", ours_address};
      if (!d.input) argv.push_back("--no-stdin");
    } else if (carrier == "bare") {
      argv = {bare, "client", bare_address};
      if (d.input) argv.push_back("--stdin");
    }
    if (!argv.empty()) argv.push_back("--");
    argv.insert(argv.end(), d.job.begin(), d.job.end());
    return argv;
  };
  auto server_of = [&](const std::string& carrier) -> Child* {
    return carrier == "ours"   ? &ours_server
           : carrier == "bare" ? &bare_server
                               : nullptr;
  };

  const std::vector<std::string> carriers = {"local", "ours", "bare"};
  std::map<std::string, std::map<std::string, Series>> results;
  std::map<std::string, std::vector<double>> idle_peak_kib;
  for (int r = 0; r < reps; ++r) {
    // A client's own peak for a job without output: the baseline of growth.
    for (const std::string carrier : {"ours", "bare"}) {
      const Leg idle =
          RunLeg(server_of(carrier), command(carrier, {false, {"/bin/true"}}),
                 nullptr, 0);
      idle_peak_kib[carrier].push_back(
          static_cast<double>(idle.client_peak_kib));
    }
    for (const std::string& name : directions) {
      if (!shapes.contains(name)) Die("unknown direction " + name);
      const Direction& d = shapes.at(name);
      std::string local_head;
      for (const std::string& carrier : carriers) {
        const Leg leg = RunLeg(server_of(carrier), command(carrier, d),
                               d.input ? &path : nullptr, mib);
        // The output must be the local run's: the whole file, or the digest.
        if (carrier == "local") local_head = leg.head;
        const bool whole = name != "input";
        if ((whole && leg.out_bytes != mib << 20) ||
            (!whole && leg.head != local_head)) {
          Die(carrier + " " + name + ": wrong output (" +
              std::to_string(leg.out_bytes) + " bytes)");
        }
        Series& s = results[name][carrier];
        s["mib_per_s"].push_back(leg.mib_per_s);
        if (carrier == "local") continue;
        s["client_peak_kib"].push_back(
            static_cast<double>(leg.client_peak_kib));
        s["server_growth_kib"].push_back(
            static_cast<double>(leg.server_growth_kib));
        s["client_cpu_s"].push_back(leg.client_cpu_s);
        s["server_cpu_s"].push_back(leg.server_cpu_s);
      }
    }
  }
  for (Child* server : {&ours_server, &bare_server}) {
    kill(server->pid(), SIGTERM);
    server->Wait();
  }

  std::string json =
      "{\"mib\": " + std::to_string(mib) +
      ", \"reps\": " + std::to_string(reps) + ", \"input_job\": \"" +
      input_job + "\", \"idle_client_peak_kib\": {\"ours\": " +
      Json(idle_peak_kib["ours"]) +
      ", \"bare\": " + Json(idle_peak_kib["bare"]) +
      "}, \"bench_peak_kib\": " + std::to_string(StatusKiB(getpid(), "VmHWM"));
  for (const auto& [name, by_carrier] : results) {
    json += ", \"" + name + "\": {";
    const char* sep = "";
    for (const auto& [carrier, series] : by_carrier) {
      json += sep + ("\"" + carrier + "\": ") + Json(series);
      sep = ", ";
    }
    json += "}";
  }
  std::printf("%s}\n", json.c_str());
  return 0;
}

// ExecCalls makes `jobs` Dispatch calls of `/bin/true` (job ids
// `prefix`-N) on `stub` in turn, each read to its end; it dies unless every
// one exits 0. Returns each call's wall time in microseconds.
std::vector<double> ExecCalls(v1::Worker::Stub& stub, const std::string& prefix,
                              int jobs, int pause_ms = 0) {
  std::vector<double> us;
  v1::DispatchRequest request;
  request.set_kind("exec");
  request.mutable_exec()->add_argv("/bin/true");
  for (int i = 0; i < jobs; ++i) {
    if (pause_ms > 0) usleep(static_cast<useconds_t>(pause_ms) * 1000);
    request.set_job_id(prefix + "-" + std::to_string(i));
    grpc::ClientContext context;
    const Clock::time_point start = Clock::now();
    auto reader = stub.Dispatch(&context, request);
    bool exited_0 = false;
    for (v1::DispatchEvent event; reader->Read(&event);) {
      if (event.has_exit()) {
        exited_0 = !event.exit().has_signal() && event.exit().code() == 0;
      }
    }
    const grpc::Status status = reader->Finish();
    if (!status.ok() || !exited_0) {
      Die("exec " + prefix + ": " + status.error_message());
    }
    us.push_back(Millis(Clock::now() - start) * 1000);
  }
  return us;
}

// Quantile is the q-quantile (nearest rank) of `values`.
double Quantile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  const auto at = static_cast<std::size_t>(q * (values.size() - 1) + 0.5);
  return values[at];
}

// Exec measures the job start: `/bin/true` through the worker and through
// the bare pipeline's server, interleaved by repetition (A B A B ...), so
// drift on a shared machine hits both alike. A server's CPU is read before
// and after its K calls (clock ticks: K is what makes them precise).
int Exec(const std::string& worker, const std::string& bare, int jobs, int reps,
         int pause_ms) {
  Child ours({worker, "serve", "--port", "0", "--max-concurrent-tasks", "1",
              "--idle-timeout-seconds", "0"});
  Child floor({bare, "serve", "--port", "0"});
  std::map<std::string, Child*> servers = {{"ours", &ours}, {"bare", &floor}};
  std::map<std::string, std::unique_ptr<v1::Worker::Stub>> stubs;
  for (const auto& [name, server] : servers) {
    stubs[name] = v1::Worker::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(server->Port()),
                            grpc::InsecureChannelCredentials()));
    // Listening already; the first calls warm threads, pages and channel.
    ExecCalls(*stubs[name], "warm-" + name, 10);
  }
  std::map<std::string, Series> series;
  for (int r = 0; r < reps; ++r) {
    for (const std::string name : {"ours", "bare"}) {
      const double cpu_before = CpuSeconds(servers[name]->pid());
      const std::vector<double> us = ExecCalls(
          *stubs[name], "bench-exec-" + std::to_string(r), jobs, pause_ms);
      const double cpu_s = CpuSeconds(servers[name]->pid()) - cpu_before;
      series[name]["server_cpu_us_per_job"].push_back(cpu_s / jobs * 1e6);
      series[name]["p50_us"].push_back(Quantile(us, 0.5));
      series[name]["p99_us"].push_back(Quantile(us, 0.99));
    }
  }
  for (const auto& [name, server] : servers) {
    kill(server->pid(), SIGTERM);
    server->Wait();
  }
  std::printf(
      "{\"jobs\": %d, \"reps\": %d, \"pause_ms\": %d, \"ours\": %s, "
      "\"bare\": %s}\n",
      jobs, reps, pause_ms, Json(series["ours"]).c_str(),
      Json(series["bare"]).c_str());
  return 0;
}

// JobsHeld runs `worker jobs --format json` against `address` and returns
// its output.
std::string JobsHeld(const std::string& worker, const std::string& address) {
  Child jobs({worker, "jobs", "--address", address, "--format", "json"},
             {.pipe_stdout = true});
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(jobs.stdout_fd(), buf, sizeof buf)) > 0;)
    out.append(buf, static_cast<std::size_t>(n));
  if (jobs.Wait() != 0) Die("jobs failed: " + jobs.log());
  return out;
}

// LeaveDetached dispatches `job` as `job_id` with no detach limit, waits
// until the worker lists it, then kills its `dispatch` (SIGKILL: a client
// that died), leaving the job to run with nobody attached.
void LeaveDetached(const std::string& worker, const std::string& address,
                   const std::string& job_id,
                   const std::vector<std::string>& job) {
  std::vector<std::string> argv = {
      worker,       "dispatch", "--address", address,
      "--no-stdin", "--job-id", job_id,      "--detach-grace-seconds",
      "-1",         "--"};
  argv.insert(argv.end(), job.begin(), job.end());
  Child client(argv);
  const std::string listed = "\"job_id\":\"" + job_id + "\"";
  for (int i = 0; JobsHeld(worker, address).find(listed) == std::string::npos;
       ++i) {
    if (i == 300) Die("job " + job_id + " never listed: " + client.log());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(client.pid(), SIGKILL);
  client.Wait();
}

// Detached measures jobs as handles. Per run, interleaved: `cat` of N MiB
// through `dispatch` (attached, as `pipes` output), then the same job left
// detached (its `dispatch` killed before the job writes) and read later by
// `attach` from offset 0, byte-exact: both rates, the worker's CPU. Then
// `jobs` detached jobs at once (`--max-concurrent-tasks jobs`), each filling
// its output buffer and paused: the worker's peak RSS growth.
int Detached(const std::string& worker, long mib, int reps, int jobs) {
  const SparseFile file(mib << 20);
  Child server({worker, "serve", "--port", "0", "--max-concurrent-tasks",
                std::to_string(jobs), "--idle-timeout-seconds", "0"});
  const std::string address = "127.0.0.1:" + std::to_string(server.Port());
  // The job sleeps until its dispatch is gone, then writes the file.
  const std::vector<std::string> late_cat = {
      "/bin/sh", "-c", "sleep 2; exec /bin/cat \"$0\"", file.path()};
  std::map<std::string, Series> series;
  for (int r = 0; r < reps; ++r) {
    const Leg attached = RunLeg(&server,
                                {worker, "dispatch", "--address", address,
                                 "--no-stdin", "--", "/bin/cat", file.path()},
                                nullptr, mib);
    const std::string id = "bench-detached-" + std::to_string(r);
    LeaveDetached(worker, address, id, late_cat);
    // The job now writes with nobody attached until its buffer is full.
    std::this_thread::sleep_for(std::chrono::seconds(3));
    const Leg later = RunLeg(
        &server, {worker, "attach", "--address", address, id}, nullptr, mib);
    for (const Leg* leg : {&attached, &later}) {
      if (leg->out_bytes != mib << 20 ||
          leg->head != std::string(leg->head.size(), '\0')) {
        Die("wrong output: " + std::to_string(leg->out_bytes) + " bytes");
      }
    }
    for (const auto& [name, leg] : {std::pair{"attached", &attached},
                                    std::pair{"attach_later", &later}}) {
      series[name]["mib_per_s"].push_back(leg->mib_per_s);
      series[name]["server_cpu_s"].push_back(leg->server_cpu_s);
    }
  }
  // `jobs` detached jobs that each fill their buffer and wait.
  const long rss_before = StatusKiB(server.pid(), "VmRSS");
  std::ofstream("/proc/" + std::to_string(server.pid()) + "/clear_refs") << "5";
  for (int j = 0; j < jobs; ++j) {
    LeaveDetached(worker, address, "bench-full-" + std::to_string(j),
                  {"/bin/cat", "/dev/zero"});
  }
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const long growth_kib = StatusKiB(server.pid(), "VmHWM") - rss_before;
  kill(server.pid(), SIGKILL);  // the job guard kills the jobs with it
  server.Wait();
  std::string json =
      "{\"mib\": " + std::to_string(mib) +
      ", \"reps\": " + std::to_string(reps) +
      ", \"jobs\": " + std::to_string(jobs) +
      ", \"full_buffers_growth_kib\": " + std::to_string(growth_kib);
  for (const auto& [name, fields] : series)
    json += ", \"" + name + "\": " + Json(fields);
  std::printf("%s}\n", json.c_str());
  return 0;
}

// Retire measures idle self-retirement: how long past its idle timeout a
// worker that never got work exits.
// Trickle: `producer | dispatch -- cat` with a producer that writes a line
// every 100 ms and never closes. Per run: the time from spawning `dispatch`
// to its first line back (the job has started and echoed it), and each
// later line's time from its write to its return.
int Trickle(const std::string& worker, int reps) {
  constexpr int kLines = 20;
  constexpr auto kEvery = std::chrono::milliseconds(100);
  Child server({worker, "serve", "--port", "0", "--idle-timeout-seconds", "0"});
  const std::string address = "127.0.0.1:" + std::to_string(server.Port());
  std::vector<double> first_ms, line_ms;
  for (int r = 0; r < reps; ++r) {
    int in[2];
    if (pipe2(in, O_CLOEXEC) != 0) Die("pipe");
    Child client({worker, "dispatch", "--address", address, "--", "/bin/cat"},
                 {.stdin_fd = in[0], .pipe_stdout = true});
    close(in[0]);
    FILE* out = fdopen(dup(client.stdout_fd()), "r");
    char line[64];
    for (int i = 0; i < kLines; ++i) {
      const Clock::time_point written = Clock::now();
      const std::string text = std::to_string(i) + "\n";
      if (write(in[1], text.data(), text.size()) !=
          static_cast<ssize_t>(text.size())) {
        Die("write to dispatch");
      }
      if (std::fgets(line, sizeof line, out) == nullptr || text != line) {
        Die("line " + std::to_string(i) +
            " did not come back: " + client.log());
      }
      const Clock::time_point back = Clock::now();
      if (i == 0) {
        first_ms.push_back(Millis(back - client.started()));
      } else {
        line_ms.push_back(Millis(back - written));
      }
      std::this_thread::sleep_until(written + kEvery);
    }
    close(in[1]);  // the producer ends only now; the job ends with it
    std::fclose(out);
    if (client.Wait() != 0) Die("dispatch failed: " + client.log());
  }
  kill(server.pid(), SIGTERM);
  server.Wait();
  std::printf("{\"first_line_ms\": %s, \"line_ms\": %s}\n",
              Json(first_ms).c_str(), Json(line_ms).c_str());
  return 0;
}

int Retire(const std::string& worker, int reps, double idle_timeout) {
  std::vector<std::unique_ptr<Child>> children;
  for (int i = 0; i < reps; ++i) {
    children.push_back(std::make_unique<Child>(std::vector<std::string>{
        worker, "serve", "--port", "0", "--idle-timeout-seconds",
        std::to_string(idle_timeout)}));
  }
  std::vector<double> overshoot_ms;
  for (auto& child : children) {
    // Bounded: past the 15 s cadence plus a margin it is killed.
    std::atomic<bool> reaped{false};
    std::thread killer([&reaped, pid = child->pid()] {
      for (int i = 0; i < 600 && !reaped.load(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      if (!reaped.load()) kill(pid, SIGKILL);  // a zombie until reaped
    });
    const int status = child->Wait();
    reaped.store(true);
    killer.join();
    if (status != 0 ||
        child->log().find("exiting: idle") == std::string::npos) {
      Die("worker did not exit idle: " + child->log());
    }
    overshoot_ms.push_back(Millis(child->exited_at() - child->started()) -
                           idle_timeout * 1000);
  }
  std::printf("{\"idle_timeout_s\": %g, \"overshoot_ms\": %s}\n", idle_timeout,
              Json(overshoot_ms).c_str());
  return 0;
}

// Sockets counts the sockets `pid` has open now (0 once it is gone).
int Sockets(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* fds = opendir(dir.c_str());
  if (fds == nullptr) return 0;
  int sockets = 0;
  char target[64];
  while (const dirent* entry = readdir(fds)) {
    const std::string link = dir + "/" + entry->d_name;
    const ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
    if (n > 7 && std::strncmp(target, "socket:", 7) == 0) ++sockets;
  }
  closedir(fds);
  return sockets;
}

// ReapRun is one `reap`, measured from outside.
struct ReapRun {
  double wall_ms = 0;        // spawn -> exit
  double first_line_ms = 0;  // spawn -> its first result line
  double cpu_s = 0;          // its user + system time
  double peak_kib = 0;       // its peak resident set
  int most_sockets = 0;      // the most sockets it held at once (sampled)
};

// RunReapOnce runs `worker reap` over the addresses in `list` (one a line)
// with `args`; it must exit 0 with a line per address.
ReapRun RunReapOnce(const std::string& worker, const std::string& list,
                    int addresses, std::vector<std::string> args) {
  args.insert(args.begin(), {worker, "reap", "--addresses-from", list});
  Child reap(args, {.pipe_stdout = true});
  std::atomic<bool> done{false};
  std::atomic<int> most{0};
  std::thread sampler([&] {
    while (!done.load()) {
      most.store(std::max(most.load(), Sockets(reap.pid())));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  FILE* out = fdopen(dup(reap.stdout_fd()), "r");
  ReapRun run;
  int lines = 0;
  char line[4096];
  while (std::fgets(line, sizeof line, out) != nullptr) {
    if (lines++ == 0) run.first_line_ms = Millis(Clock::now() - reap.started());
  }
  std::fclose(out);
  const int status = reap.Wait();
  done.store(true);
  sampler.join();
  if (status != 0 || lines != addresses) {
    Die("reap failed (" + std::to_string(lines) + " lines): " + reap.log());
  }
  run.wall_ms = Millis(reap.exited_at() - reap.started());
  run.cpu_s = reap.cpu_seconds();
  run.peak_kib = static_cast<double>(reap.max_rss_kib());
  run.most_sockets = most.load();
  return run;
}

std::string Json(const std::vector<ReapRun>& runs) {
  std::vector<double> wall, first, cpu, peak, sockets;
  for (const ReapRun& r : runs) {
    wall.push_back(r.wall_ms);
    first.push_back(r.first_line_ms);
    cpu.push_back(r.cpu_s);
    peak.push_back(r.peak_kib);
    sockets.push_back(r.most_sockets);
  }
  return "{\"wall_ms\": " + Json(wall) + ", \"first_line_ms\": " + Json(first) +
         ", \"cpu_s\": " + Json(cpu) + ", \"peak_kib\": " + Json(peak) +
         ", \"most_sockets\": " + Json(sockets) + "}";
}

// WriteList writes "127.0.0.1:PORT" lines to a file and returns its name.
std::string WriteList(const std::vector<int>& ports) {
  const std::string list =
      "/tmp/process-bench-fleet-" + std::to_string(getpid()) + ".txt";
  std::ofstream out(list);
  for (const int port : ports) out << "127.0.0.1:" << port << "\n";
  return list;
}

// Fleet: N real workers, R dry runs, then one run that stops them all,
// timing each worker's exit and its CPU from the stop on.
int Fleet(const std::string& worker, int workers, int reps) {
  std::vector<std::unique_ptr<Child>> children;
  std::vector<int> ports;
  for (int i = 0; i < workers; ++i) {
    children.push_back(std::make_unique<Child>(std::vector<std::string>{
        worker, "serve", "--port", "0", "--idle-timeout-seconds", "0",
        "--max-concurrent-tasks", "1"}));
  }
  for (auto& child : children) ports.push_back(child->Port());
  const std::string list = WriteList(ports);
  std::vector<ReapRun> dry;
  for (int r = 0; r < reps; ++r) {
    dry.push_back(
        RunReapOnce(worker, list, workers,
                    {"--idle-threshold-seconds", "0.001", "--dry-run"}));
  }
  std::vector<double> cpu_before;
  for (auto& child : children) {
    cpu_before.push_back(
        CpuSeconds(child->pid(), /*with_reaped_children=*/true));
  }
  std::vector<std::thread> waiters;
  for (auto& child : children) {
    waiters.emplace_back([&child] { child->Wait(); });
  }
  const Clock::time_point start = Clock::now();
  const ReapRun stop =
      RunReapOnce(worker, list, workers, {"--idle-threshold-seconds", "0.001"});
  for (std::thread& waiter : waiters) waiter.join();
  std::vector<double> exit_ms, exit_cpu_s;
  for (std::size_t i = 0; i < children.size(); ++i) {
    exit_ms.push_back(Millis(children[i]->exited_at() - start));
    exit_cpu_s.push_back(children[i]->cpu_seconds() - cpu_before[i]);
  }
  std::remove(list.c_str());
  std::printf(
      "{\"workers\": %d, \"dry\": %s, \"stop\": %s, \"worker_exit_ms\": %s, "
      "\"worker_stop_cpu_s\": %s}\n",
      workers, Json(dry).c_str(), Json(std::vector<ReapRun>{stop}).c_str(),
      Json(exit_ms).c_str(), Json(exit_cpu_s).c_str());
  return 0;
}

// StubFleet: `stub --ports N` (fleet-stub), then R dry runs and R runs that
// stop (the stub answers and stays), with mutual TLS from `tls_dir` if set
// (ca.pem, server.pem, server.key, client.pem, client.key; the
// server's SAN is stub.fleet).
int StubFleet(const std::string& worker, const std::string& stub, int ports,
              int reps, int concurrency, const std::string& tls_dir) {
  std::vector<std::string> argv = {stub, "--ports", std::to_string(ports)};
  std::vector<std::string> tls;
  if (!tls_dir.empty()) {
    argv.insert(argv.end(), {"--tls", tls_dir});
    tls = {"--tls-ca",       tls_dir + "/ca.pem",
           "--tls-cert",     tls_dir + "/client.pem",
           "--tls-key",      tls_dir + "/client.key",
           "--tls-identity", "stub.fleet"};
  }
  Child server(argv, {.pipe_stdout = true});
  FILE* out = fdopen(dup(server.stdout_fd()), "r");
  std::vector<int> listening;
  char line[128];
  while (std::fgets(line, sizeof line, out) != nullptr &&
         std::strncmp(line, "ready", 5) != 0) {
    listening.push_back(std::atoi(std::strrchr(line, ':') + 1));
  }
  std::fclose(out);
  if (static_cast<int>(listening.size()) != ports) {
    Die("the stub did not listen: " + server.log());
  }
  const std::string list = WriteList(listening);
  std::vector<ReapRun> dry, stop;
  for (int r = 0; r < reps; ++r) {
    for (const bool dry_run : {true, false}) {
      std::vector<std::string> args = {"--idle-threshold-seconds", "1",
                                       "--concurrency",
                                       std::to_string(concurrency)};
      args.insert(args.end(), tls.begin(), tls.end());
      if (dry_run) args.push_back("--dry-run");
      (dry_run ? dry : stop).push_back(RunReapOnce(worker, list, ports, args));
    }
  }
  const double stub_cpu_s = CpuSeconds(server.pid());
  kill(server.pid(), SIGKILL);
  server.Wait();
  std::remove(list.c_str());
  std::printf(
      "{\"ports\": %d, \"concurrency\": %d, \"tls\": %s, \"dry\": %s, "
      "\"stop\": %s, \"stub_cpu_s\": %g}\n",
      ports, concurrency, tls_dir.empty() ? "false" : "true", Json(dry).c_str(),
      Json(stop).c_str(), stub_cpu_s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  if (argc < 2)
    Die("usage: process-bench start|pipes|exec|trickle|detached|retire|fleet|"
        "stub-fleet ...");
  const std::string mode = argv[1];
  int reps = 3;
  long mib = 1024;
  double idle_timeout = 2;
  int workers = 200;
  int concurrency = 64;
  int jobs = 4;
  int pause_ms = 0;
  std::string worker, bare, stub, tls_dir;
  std::vector<std::string> directions = {"output", "input", "both"};
  std::string input_job = "/usr/bin/sha256sum";
  std::vector<std::string> program;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Die("missing value for " + arg);
      return argv[++i];
    };
    if (arg == "--reps")
      reps = std::stoi(value());
    else if (arg == "--mib")
      mib = std::stol(value());
    else if (arg == "--worker")
      worker = value();
    else if (arg == "--bare")
      bare = value();
    else if (arg == "--directions")
      directions = absl::StrSplit(value(), ',');
    else if (arg == "--input-job")
      input_job = value();
    else if (arg == "--workers")
      workers = std::stoi(value());
    else if (arg == "--stub")
      stub = value();
    else if (arg == "--concurrency")
      concurrency = std::stoi(value());
    else if (arg == "--jobs")
      jobs = std::stoi(value());
    else if (arg == "--pause-ms")
      pause_ms = std::stoi(value());
    else if (arg == "--tls")
      tls_dir = value();
    else if (arg == "--idle-timeout")
      idle_timeout = std::stod(value());
    else if (arg == "--") {
      program.assign(argv + i + 1, argv + argc);
      break;
    } else
      Die("unknown flag " + arg);
  }
  if (mode == "start" && !program.empty()) return Start(reps, program);
  if (mode == "pipes" && !worker.empty() && !bare.empty())
    return Pipes(worker, bare, mib, reps, directions, input_job);
  if (mode == "exec" && !worker.empty() && !bare.empty())
    return Exec(worker, bare, jobs, reps, pause_ms);
  if (mode == "trickle" && !worker.empty()) return Trickle(worker, reps);
  if (mode == "detached" && !worker.empty())
    return Detached(worker, mib, reps, jobs);
  if (mode == "retire" && !worker.empty())
    return Retire(worker, reps, idle_timeout);
  if (mode == "fleet" && !worker.empty()) return Fleet(worker, workers, reps);
  if (mode == "stub-fleet" && !worker.empty() && !stub.empty()) {
    return StubFleet(worker, stub, workers, reps, concurrency, tls_dir);
  }
  Die("bad mode or missing --worker / --bare / program");
}
