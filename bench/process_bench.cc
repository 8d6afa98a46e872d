// process-bench: whole-process figures, measured on real processes. Each mode
// prints one JSON object on stdout with the per-repetition values; the
// driver (bench/run.py) takes medians and writes the table.
//
//   process-bench start --reps N -- PROGRAM ARGS...
//       cold start (spawn -> first answered Idle), resident memory once idle,
//       SIGTERM -> exit. PROGRAM must log "listening on 127.0.0.1:PORT".
//   process-bench stream --worker BIN --mib N --reps R
//       N MiB of stdout through `cat` in a job of `BIN serve`, read by
//       `BIN dispatch`; and the same file through a local `cat`.
//   process-bench reap --worker BIN --reps R --idle-timeout S
//       `BIN serve --idle-timeout-seconds S`, all R at once; exit time minus
//       spawn time plus S.
//   process-bench fleet --worker BIN --workers N --reps R
//       N workers, then `BIN reap` over all of them: R dry runs, then one
//       that stops them all; wall time of each.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

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

// Child is a spawned process whose stderr is collected by a thread and whose
// stdout goes to /dev/null or to a pipe the caller reads.
class Child {
 public:
  Child(const std::vector<std::string>& argv, bool pipe_stdout = false) {
    int err[2];
    int out[2] = {-1, -1};
    if (pipe2(err, O_CLOEXEC) != 0) Die("pipe");
    if (pipe_stdout && pipe2(out, O_CLOEXEC) != 0) Die("pipe");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
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
    if (stdout_fd_ >= 0) close(stdout_fd_);
    reader_.join();
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

  // Wait reaps the child and returns its wait status and when it exited.
  int Wait() {
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    exited_at_ = Clock::now();
    exited_ = true;
    return status;
  }

  pid_t pid() const { return pid_; }
  int stdout_fd() const { return stdout_fd_; }
  Clock::time_point started() const { return started_; }
  Clock::time_point exited_at() const { return exited_at_; }
  std::string log() {
    absl::MutexLock lock(&mu_);
    return log_;
  }

 private:
  pid_t pid_ = 0;
  int stdout_fd_ = -1;
  bool exited_ = false;
  Clock::time_point started_, exited_at_;
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

// Drain reads `fd` to its end and returns the byte count.
long Drain(int fd) {
  static std::vector<char> buf(1 << 20);
  long total = 0;
  for (ssize_t n; (n = read(fd, buf.data(), buf.size())) > 0;) total += n;
  return total;
}

int Stream(const std::string& worker, long mib, int reps) {
  const long bytes = mib << 20;
  // A sparse file: reading it costs no disk.
  char path[] = "/tmp/cfdb-bench-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0 || ftruncate(fd, bytes) != 0) Die("cannot make the input file");
  close(fd);

  Child server({worker, "serve", "--port", "0", "--max-concurrent-tasks", "1",
                "--idle-timeout-seconds", "0"});
  const std::string address = "127.0.0.1:" + std::to_string(server.Port());
  std::vector<double> worker_mib_s, cat_mib_s, rss_growth_kib;
  for (int i = 0; i < reps; ++i) {
    {
      // Reset the peak, so VmHWM afterwards is this run's peak.
      std::ofstream("/proc/" + std::to_string(server.pid()) + "/clear_refs")
          << "5";
      const long rss_before = StatusKiB(server.pid(), "VmRSS");
      Child client({worker, "dispatch", "--address", address, "--no-stdin",
                    "--", "/bin/cat", path},
                   /*pipe_stdout=*/true);
      const long got = Drain(client.stdout_fd());
      const int status = client.Wait();
      if (got != bytes || status != 0) {
        Die("dispatch streamed " + std::to_string(got) + " bytes, status " +
            std::to_string(status) + ": " + client.log());
      }
      worker_mib_s.push_back(mib / std::chrono::duration<double>(
                                       client.exited_at() - client.started())
                                       .count());
      rss_growth_kib.push_back(
          static_cast<double>(StatusKiB(server.pid(), "VmHWM") - rss_before));
    }
    {
      Child cat({"/bin/cat", path}, /*pipe_stdout=*/true);
      const long got = Drain(cat.stdout_fd());
      if (got != bytes || cat.Wait() != 0) Die("local cat failed");
      cat_mib_s.push_back(
          mib / std::chrono::duration<double>(cat.exited_at() - cat.started())
                    .count());
    }
  }
  unlink(path);
  kill(server.pid(), SIGTERM);
  server.Wait();
  std::printf(
      "{\"mib\": %ld, \"worker_mib_per_s\": %s, \"cat_mib_per_s\": %s, "
      "\"worker_rss_growth_kib\": %s}\n",
      mib, Json(worker_mib_s).c_str(), Json(cat_mib_s).c_str(),
      Json(rss_growth_kib).c_str());
  return 0;
}

int Reap(const std::string& worker, int reps, double idle_timeout) {
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
  if (argc < 2) Die("usage: process-bench start|stream|reap|fleet ...");
  const std::string mode = argv[1];
  int reps = 3;
  long mib = 1024;
  double idle_timeout = 2;
  int workers = 200;
  std::string worker;
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
  if (mode == "stream" && !worker.empty()) return Stream(worker, mib, reps);
  if (mode == "reap" && !worker.empty())
    return Reap(worker, reps, idle_timeout);
  if (mode == "fleet" && !worker.empty()) return Fleet(worker, workers, reps);
  Die("bad mode or missing --worker / program");
}
