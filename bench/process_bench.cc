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
//   process-bench trickle --worker BIN --reps R
//       `producer | BIN dispatch -- cat`, the producer writing a line every
//       100 ms and never closing: spawn -> first line back, and each later
//       line's write -> return.
//   process-bench retire --worker BIN --reps R --idle-timeout S
//       `BIN serve --idle-timeout-seconds S`, all R at once: exit time minus
//       spawn time plus S (idle self-retirement).
//   process-bench fleet --worker BIN --workers N --reps R
//       N workers, then `BIN reap` over all of them: R dry runs, then one
//       that stops them all; wall time of each.
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

// CpuSeconds is the user + system time of a live process so far (its own,
// not its children's).
double CpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  // Fields after the command's closing parenthesis: state is field 3, utime
  // and stime fields 14 and 15.
  std::vector<std::string> fields =
      absl::StrSplit(stat.substr(stat.rfind(')') + 2), ' ');
  if (fields.size() < 13) return 0;
  return static_cast<double>(std::stol(fields[11]) + std::stol(fields[12])) /
         static_cast<double>(sysconf(_SC_CLK_TCK));
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
      json += sep + ("\"" + carrier + "\": {");
      const char* field_sep = "";
      for (const auto& [field, values] : series) {
        json += field_sep + ("\"" + field + "\": ") + Json(values);
        field_sep = ", ";
      }
      json += "}";
      sep = ", ";
    }
    json += "}";
  }
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

// ReapWall runs `worker reap ARGS` over `ports` (given on its stdin) and
// returns its wall time in ms; it must exit 0.
double ReapWall(const std::string& worker, const std::vector<int>& ports,
                std::vector<std::string> args) {
  std::string addresses;
  for (const int port : ports) {
    addresses += "127.0.0.1:" + std::to_string(port) + "\n";
  }
  const std::string list = "/tmp/process-bench-fleet.txt";
  std::ofstream(list) << addresses;
  args.insert(args.begin(), {worker, "reap", "--addresses-from", list});
  const Clock::time_point start = Clock::now();
  Child reap(args);
  const int status = reap.Wait();
  const double ms = Millis(reap.exited_at() - start);
  if (status != 0) Die("reap failed: " + reap.log());
  return ms;
}

int Fleet(const std::string& worker, int workers, int reps) {
  std::vector<std::unique_ptr<Child>> children;
  std::vector<int> ports;
  for (int i = 0; i < workers; ++i) {
    children.push_back(std::make_unique<Child>(std::vector<std::string>{
        worker, "serve", "--port", "0", "--idle-timeout-seconds", "0",
        "--max-concurrent-tasks", "1"}));
  }
  for (auto& child : children) ports.push_back(child->Port());
  std::vector<double> dry_ms;
  for (int r = 0; r < reps; ++r) {
    dry_ms.push_back(ReapWall(
        worker, ports, {"--idle-threshold-seconds", "0.001", "--dry-run"}));
  }
  const double stop_ms =
      ReapWall(worker, ports, {"--idle-threshold-seconds", "0.001"});
  for (auto& child : children) {
    if (child->Wait() != 0) Die("a worker did not exit 0: " + child->log());
  }
  std::printf("{\"workers\": %d, \"dry_run_ms\": %s, \"stop_ms\": %g}\n",
              workers, Json(dry_ms).c_str(), stop_ms);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  if (argc < 2)
    Die("usage: process-bench start|pipes|trickle|retire|fleet ...");
  const std::string mode = argv[1];
  int reps = 3;
  long mib = 1024;
  double idle_timeout = 2;
  int workers = 200;
  std::string worker, bare;
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
  if (mode == "trickle" && !worker.empty()) return Trickle(worker, reps);
  if (mode == "retire" && !worker.empty())
    return Retire(worker, reps, idle_timeout);
  if (mode == "fleet" && !worker.empty()) return Fleet(worker, workers, reps);
  Die("bad mode or missing --worker / --bare / program");
}
