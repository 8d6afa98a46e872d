// worker-bench: in-process figures of the worker, each next to its floor
// measured in the same run (see docs/PERFORMANCE.md).
//
//   worker-bench [--smoke] [google benchmark flags]
//
// Servers listen on 127.0.0.1 port 0 and are called over real channels.
// Latency percentiles come from per-call timings collected here and are
// reported as counters (p50_us, p99_us). --smoke shrinks every loop so the
// binary can run in CI in seconds; its figures mean nothing.
#include <curl/curl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "bare_service.h"
#include "benchmark/benchmark.h"
#include "cfdb/worker/connection.h"
#include "cfdb/worker/docket.h"
#include "cfdb/worker/exec.h"
#include "cfdb/worker/server.h"
#include "cfdb/worker/shutdown.h"
#include "cfdb/worker/worker.h"
#include "count_allocations.h"
#include "serve/backoff.h"
#include "serve/http_endpoint.h"
#include "serve/prometheus_metrics.h"
#include "spdlog/sinks/null_sink.h"
#include "spdlog/spdlog.h"

extern char** environ;

namespace cfdb::worker::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Loop sizes; --smoke divides them.
int g_scale = 1;
int Scaled(int n) { return std::max(1, n / g_scale); }

double Micros(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

// Percentiles sets p50_us and p99_us from per-call latencies.
void Percentiles(benchmark::State& state, std::vector<double> us) {
  if (us.empty()) return;
  std::sort(us.begin(), us.end());
  auto at = [&](double q) {
    return us[std::min(us.size() - 1, static_cast<std::size_t>(q * us.size()))];
  };
  state.counters["p50_us"] = at(0.50);
  state.counters["p99_us"] = at(0.99);
}

// NextJobId returns a new job id each call: a worker refuses the id of a job
// it runs or retains.
std::string NextJobId() {
  static std::atomic<uint64_t> next{0};
  return absl::StrCat("bench-", ++next);
}

JobRequest NoopRequest() {
  JobRequest request;
  request.job_id = NextJobId();
  request.kind = "noop";
  return request;
}

JobRequest ExecRequest(std::vector<std::string> argv) {
  JobRequest request;
  request.job_id = NextJobId();
  request.kind = kExecKind;
  MutableExec(request).argv = std::move(argv);
  MutableExec(request).env = {{"PATH", "/usr/bin:/bin"}};
  return request;
}

// WorkerEnv is a worker with the "exec" and a no-op kind, served on
// 127.0.0.1:0, and a WorkerConnection to it.
class WorkerEnv {
 public:
  explicit WorkerEnv(std::size_t max_concurrent_tasks)
      : worker_({.max_concurrent_tasks = max_concurrent_tasks}) {
    (void)worker_.RegisterKind(kExecKind, ExecKind());
    (void)worker_.RegisterKind(
        "noop", {.run = [](JobContext&) { return JobOutcome::Exited(0); }});
    server_ = *WorkerServer::Start(worker_, {.address = "127.0.0.1:0"});
    connection_ =
        *WorkerConnection::Open("127.0.0.1:" + std::to_string(server_->port()));
  }
  ~WorkerEnv() {
    worker_.Stop(Duration::zero());
    server_->Shutdown(Duration::zero());
  }

  // The process-wide instance for the figures that need no special worker;
  // DestroyShared ends it before exit, so no job thread or gRPC thread is
  // still running while static destructors do.
  static WorkerEnv& Shared() {
    if (!shared_) shared_ = std::make_unique<WorkerEnv>(64);  // > 16 callers
    return *shared_;
  }
  static void DestroyShared() { shared_.reset(); }

  Worker& worker() { return worker_; }
  WorkerConnection& connection() { return *connection_; }
  int port() const { return server_->port(); }

 private:
  static inline std::unique_ptr<WorkerEnv> shared_;
  Worker worker_;
  std::unique_ptr<WorkerServer> server_;
  std::unique_ptr<WorkerConnection> connection_;
};

// BareEnv is BareService on 127.0.0.1:0 and a generated stub to it.
class BareEnv {
 public:
  BareEnv() {
    int port = 0;
    server_ = StartBareServer(service_, "127.0.0.1:0", &port);
    stub_ = v1::Worker::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                            grpc::InsecureChannelCredentials()));
  }
  ~BareEnv() { server_->Shutdown(std::chrono::system_clock::now()); }
  static BareEnv& Shared() {
    if (!shared_) shared_ = std::make_unique<BareEnv>();
    return *shared_;
  }
  static void DestroyShared() { shared_.reset(); }
  v1::Worker::Stub& stub() { return *stub_; }

 private:
  static inline std::unique_ptr<BareEnv> shared_;
  BareService service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Worker::Stub> stub_;
};

// The same per-call deadline WorkerConnection sets.
void SetDeadline(grpc::ClientContext& context) {
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(5));
}

// TimedLoop calls `call` once per iteration and times it; `call` returns
// whether it succeeded. Sets p50_us, p99_us and errors.
template <typename Call>
void TimedLoop(benchmark::State& state, Call call) {
  std::vector<double> us;
  us.reserve(state.max_iterations);
  long errors = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    errors += !call();
    us.push_back(Micros(Clock::now() - t0));
  }
  Percentiles(state, std::move(us));
  state.counters["errors"] = errors;
}

// IdleLoop times IdleTime calls on `connection`.
void IdleLoop(benchmark::State& state, WorkerConnection& connection) {
  TimedLoop(state,
            [&] { return connection.IdleTime(std::chrono::seconds(5)).ok(); });
}

// --- Idle round trip -------------------------------------------------------

void BM_Idle_WorkerConnection(benchmark::State& state) {
  IdleLoop(state, WorkerEnv::Shared().connection());
}

void BM_Idle_BareStub(benchmark::State& state) {
  v1::Worker::Stub& stub = BareEnv::Shared().stub();
  TimedLoop(state, [&] {
    grpc::ClientContext context;
    SetDeadline(context);
    v1::IdleTime reply;
    return stub.Idle(&context, v1::IdleRequest(), &reply).ok();
  });
}

// IdleUnderJobs times Idle while the worker runs max_concurrent_tasks (= the
// CPU count, serve's default) exec jobs of `argv`, each output chunk going
// to `on_output`; Stop(0) cancels them at the end. The jobs use a channel of
// their own ("ipv4:" target, so the pool keeps it apart), as the serve
// loop's self-poll does: on a shared HTTP/2 connection the Idle calls would
// queue behind streamed data.
void IdleUnderJobs(benchmark::State& state, std::vector<std::string> argv,
                   const DispatchCallbacks& callbacks) {
  const std::size_t tasks = std::max(1u, std::thread::hardware_concurrency());
  WorkerEnv env(tasks);
  std::unique_ptr<WorkerConnection> job_connection =
      *WorkerConnection::Open("ipv4:127.0.0.1:" + std::to_string(env.port()));
  std::vector<std::thread> jobs;
  for (std::size_t i = 0; i < tasks; ++i) {
    jobs.emplace_back([&] {
      // Bounded by the client's own timeout too.
      (void)job_connection->Dispatch(ExecRequest(argv), callbacks,
                                     std::chrono::seconds(300));
    });
  }
  // Measure only once every job runs.
  const auto give_up = Clock::now() + std::chrono::seconds(10);
  while (env.worker().docket().in_flight() < tasks && Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  IdleLoop(state, env.connection());
  state.counters["jobs"] =
      static_cast<double>(env.worker().docket().in_flight());
  env.worker().Stop(Duration::zero());
  for (std::thread& t : jobs) t.join();
}

// Idle while the jobs stream `cat /dev/zero` to clients reading as fast as
// they can.
void BM_Idle_UnderStreamingLoad(benchmark::State& state) {
  std::atomic<long> streamed{0};
  const DispatchCallbacks callbacks{
      .on_output = [&](OutputStream, std::string_view data) {
        streamed.fetch_add(static_cast<long>(data.size()),
                           std::memory_order_relaxed);
      }};
  const auto t0 = Clock::now();
  IdleUnderJobs(state, {"cat", "/dev/zero"}, callbacks);
  const double seconds =
      std::chrono::duration<double>(Clock::now() - t0).count();
  state.counters["stream_MiB_per_s"] = streamed.load() / seconds / (1 << 20);
}

// Idle while the jobs only burn CPU (a shell loop, no output): what
// --job-nice buys when jobs saturate the CPUs without streaming.
void BM_Idle_UnderCpuLoad(benchmark::State& state) {
  IdleUnderJobs(state, {"sh", "-c", "while :; do :; done"}, {});
}

// --- A Prometheus scrape -----------------------------------------------------

// Reading is what a scrape reads of `worker` (serve.cc's ReadMetrics, less
// the retirement policy, which an in-process worker here has none of).
MetricsReading Reading(const Worker& worker) {
  return {.in_flight = worker.docket().in_flight(),
          .max_concurrent = worker.options().max_concurrent_tasks,
          .idle_seconds = ToSeconds(worker.Idle()),
          .jobs = worker.counts()};
}

// ScrapeEnv is a worker with the HTTP port serving its metrics.
class ScrapeEnv {
 public:
  ScrapeEnv() {
    endpoint_ = *HttpEndpoint::Start(
        "127.0.0.1", 0,
        {.metrics =
             [this] {
               return RenderMetrics(Reading(env_.worker()), ReadProcess());
             },
         .healthy = [] { return true; },
         .ready = [] { return true; }},
        log_);
    curl_ = curl_easy_init();
    url_ = "http://127.0.0.1:" + std::to_string(endpoint_->port()) + "/metrics";
    curl_easy_setopt(curl_, CURLOPT_URL, url_.c_str());
    curl_easy_setopt(curl_, CURLOPT_WRITEFUNCTION, &Discard);
  }
  ~ScrapeEnv() { curl_easy_cleanup(curl_); }
  ScrapeEnv(const ScrapeEnv&) = delete;
  ScrapeEnv& operator=(const ScrapeEnv&) = delete;

  // Scrape GETs /metrics once; whether it answered 200.
  bool Scrape() {
    long status = 0;
    return curl_easy_perform(curl_) == CURLE_OK &&
           curl_easy_getinfo(curl_, CURLINFO_RESPONSE_CODE, &status) ==
               CURLE_OK &&
           status == 200;
  }
  WorkerEnv& env() { return env_; }

 private:
  static size_t Discard(char*, size_t size, size_t count, void*) {
    return size * count;
  }
  WorkerEnv env_{4};
  LogThrottle log_{SteadyClock::Get()};
  std::unique_ptr<HttpEndpoint> endpoint_;
  CURL* curl_ = nullptr;
  std::string url_;
};

// The text of one scrape, read and rendered: the CPU a scrape costs the
// worker besides HTTP.
void BM_Scrape_Render(benchmark::State& state) {
  const Worker& worker = WorkerEnv::Shared().worker();
  for (auto _ : state) {
    benchmark::DoNotOptimize(RenderMetrics(Reading(worker), ReadProcess()));
  }
}

// One whole scrape over HTTP (a connection each, as the port keeps none
// alive).
void BM_Scrape_HttpRoundTrip(benchmark::State& state) {
  ScrapeEnv scrape;
  TimedLoop(state, [&] { return scrape.Scrape(); });
}

// Idle while a scraper reads /metrics once a second: against
// Idle/WorkerConnection, what scraping costs the worker's answers.
void BM_Idle_WhileScrapedEverySecond(benchmark::State& state) {
  ScrapeEnv scrape;
  std::atomic<bool> done{false};
  std::atomic<long> scrapes{0};
  std::thread scraper([&] {
    while (!done) {
      scrapes += scrape.Scrape();
      for (int i = 0; i < 100 && !done; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
  });
  IdleLoop(state, scrape.env().connection());
  done = true;
  scraper.join();
  state.counters["scrapes"] = static_cast<double>(scrapes.load());
}

// --- Docket Admit/Release ----------------------------------------------------

struct NopJob final : Cancellable {
  void Cancel() override {}
};

Docket& SharedDocket() {
  static Docket* docket = new Docket(SteadyClock::Get(), 64);
  return *docket;
}

void BM_Docket_AdmitRelease(benchmark::State& state) {
  Docket& docket = SharedDocket();
  NopJob job;
  const long allocations = AllocationCount();
  for (auto _ : state) {
    benchmark::DoNotOptimize(docket.Admit(&job));
    docket.Release(&job);
  }
  state.counters["allocs_per_op"] =
      benchmark::Counter(static_cast<double>(AllocationCount() - allocations),
                         benchmark::Counter::kAvgIterations);
}

void BM_Floor_EmptyLoop(benchmark::State& state) {
  long n = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(++n);
    benchmark::ClobberMemory();
  }
}

void BM_Floor_MutexLockUnlock(benchmark::State& state) {
  static absl::Mutex mu;
  static long shared = 0;
  for (auto _ : state) {
    mu.Lock();
    benchmark::DoNotOptimize(++shared);
    mu.Unlock();
  }
}

// Release reads the clock when the docket goes empty; this is that read.
void BM_Floor_SteadyClockNow(benchmark::State& state) {
  const worker::Clock& clock = SteadyClock::Get();
  for (auto _ : state) benchmark::DoNotOptimize(clock.Now());
}

// --- No-op job throughput
// ------------------------------------------------------

void BM_NoopJob_WorkerConnection(benchmark::State& state) {
  WorkerConnection& connection = WorkerEnv::Shared().connection();
  JobRequest request = NoopRequest();
  long errors = 0;
  for (auto _ : state) {
    request.job_id = NextJobId();
    errors += !connection.Dispatch(request, {}, std::chrono::seconds(30)).ok();
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["errors"] = errors;
}

void BM_NoopJob_BareStream(benchmark::State& state) {
  v1::Worker::Stub& stub = BareEnv::Shared().stub();
  v1::DispatchRequest request;
  request.set_job_id("bench");
  request.set_kind("noop");
  long errors = 0;
  for (auto _ : state) {
    grpc::ClientContext context;
    SetDeadline(context);
    std::unique_ptr<grpc::ClientReader<v1::DispatchEvent>> reader =
        stub.Dispatch(&context, request);
    v1::DispatchEvent event;
    int events = 0;
    while (reader->Read(&event)) ++events;
    errors += !reader->Finish().ok() || events != 2;
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["errors"] = errors;
}

// The worker alone, no gRPC: Dispatch, the job thread, the outcome. Says how
// much of a no-op job's time is the worker's own.
class DirectJob final : public Job {
 public:
  explicit DirectJob(JobRequest request = NoopRequest())
      : Job(std::move(request), std::chrono::seconds(1)) {}
  void OnAccepted() override {}
  EmitResult Emit(OutputStream, std::string_view, TimePoint) override {
    return EmitResult::kSent;
  }
  void OnOutcome(const JobOutcome&) override {
    absl::MutexLock lock(&mu_);
    done_ = true;
  }
  void WaitDone() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
  }

 private:
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

void BM_NoopJob_WorkerDirect(benchmark::State& state) {
  Worker& worker = WorkerEnv::Shared().worker();
  long errors = 0;
  for (auto _ : state) {
    auto job = std::make_shared<DirectJob>();
    if (worker.Dispatch(job).ok()) {
      job->WaitDone();
    } else {
      ++errors;
    }
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["errors"] = errors;
}

// --- exec of /bin/true
// ----------------------------------------------------------

void BM_ExecTrue_WorkerConnection(benchmark::State& state) {
  WorkerConnection& connection = WorkerEnv::Shared().connection();
  JobRequest request = ExecRequest({"/bin/true"});
  TimedLoop(state, [&] {
    request.job_id = NextJobId();
    absl::StatusOr<JobOutcome> outcome =
        connection.Dispatch(request, {}, std::chrono::seconds(30));
    return outcome.ok() && outcome->ShellStatus() == 0;
  });
}

// RunExec alone, in the benchmark's thread: no gRPC, no job thread. Says how
// much of an exec job's time is spawning and watching the program.
void BM_ExecTrue_RunExecDirect(benchmark::State& state) {
  const JobRequest request = ExecRequest({"/bin/true"});
  TimedLoop(state, [&] {
    DirectJob job(request);
    return RunExec(job).ShellStatus() == 0;
  });
}

// The worker without gRPC: Worker::Dispatch, a job thread, RunExec.
void BM_ExecTrue_WorkerDirect(benchmark::State& state) {
  Worker& worker = WorkerEnv::Shared().worker();
  JobRequest request = ExecRequest({"/bin/true"});
  TimedLoop(state, [&] {
    request.job_id = NextJobId();
    auto job = std::make_shared<DirectJob>(request);
    if (!worker.Dispatch(job).ok()) return false;
    job->WaitDone();
    return true;
  });
}

void BM_ExecTrue_PosixSpawnWaitpid(benchmark::State& state) {
  char arg0[] = "/bin/true";
  char* argv[] = {arg0, nullptr};
  TimedLoop(state, [&] {
    pid_t pid = 0;
    int status = 0;
    return posix_spawn(&pid, argv[0], nullptr, nullptr, argv, environ) == 0 &&
           waitpid(pid, &status, 0) == pid && status == 0;
  });
}

// --- Backoff::Wait noticing a stop
// ------------------------------------------------

// A thread waits out a 15-minute backoff; the stop comes once it is asleep.
// The time is from Shutdown::Stop() to Wait returning.
void BM_Backoff_StopNoticed(benchmark::State& state) {
  std::vector<double> us;
  long errors = 0;
  for (auto _ : state) {
    Shutdown shutdown;
    Backoff backoff(std::chrono::minutes(15));
    backoff.Failed();
    std::atomic<Clock::rep> woke{0};
    bool waited_out = false;
    std::thread waiter([&] {
      waited_out = backoff.Wait(shutdown.watcher());
      woke.store(Clock::now().time_since_epoch().count());
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const auto t0 = Clock::now();
    shutdown.Stop();
    waiter.join();
    const Clock::duration d =
        Clock::duration(woke.load()) - t0.time_since_epoch();
    errors += waited_out;
    state.SetIterationTime(std::chrono::duration<double>(d).count());
    us.push_back(Micros(d));
  }
  Percentiles(state, std::move(us));
  state.counters["errors"] = errors;
}

void Register() {
  using benchmark::RegisterBenchmark;
  const int idle_calls = Scaled(3000);
  RegisterBenchmark("Idle/WorkerConnection", BM_Idle_WorkerConnection)
      ->Iterations(idle_calls)
      ->Unit(benchmark::kMicrosecond);
  RegisterBenchmark("Idle/BareStub", BM_Idle_BareStub)
      ->Iterations(idle_calls)
      ->Unit(benchmark::kMicrosecond);
  // Long enough for several scrapes at one a second.
  RegisterBenchmark("Idle/WhileScrapedEverySecond",
                    BM_Idle_WhileScrapedEverySecond)
      ->Iterations(Scaled(40000))
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
  RegisterBenchmark("Scrape/Render", BM_Scrape_Render)
      ->Iterations(Scaled(2000))
      ->Unit(benchmark::kMicrosecond);
  RegisterBenchmark("Scrape/HttpRoundTrip", BM_Scrape_HttpRoundTrip)
      ->Iterations(Scaled(1000))
      ->Unit(benchmark::kMicrosecond);
  RegisterBenchmark("Idle/UnderStreamingLoad", BM_Idle_UnderStreamingLoad)
      ->Iterations(Scaled(1500))
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
  RegisterBenchmark("Idle/UnderCpuLoad", BM_Idle_UnderCpuLoad)
      ->Iterations(Scaled(1500))
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();

  const double min_time = g_scale > 1 ? 0.001 : 0.2;
  for (int threads : {1, 2}) {
    RegisterBenchmark("Docket/AdmitRelease", BM_Docket_AdmitRelease)
        ->Threads(threads)
        ->MinTime(min_time)
        ->UseRealTime();
    RegisterBenchmark("Floor/EmptyLoop", BM_Floor_EmptyLoop)
        ->Threads(threads)
        ->MinTime(min_time)
        ->UseRealTime();
    RegisterBenchmark("Floor/MutexLockUnlock", BM_Floor_MutexLockUnlock)
        ->Threads(threads)
        ->MinTime(min_time)
        ->UseRealTime();
  }
  RegisterBenchmark("Floor/SteadyClockNow", BM_Floor_SteadyClockNow)
      ->MinTime(min_time);

  for (int callers : {1, 16}) {
    const int per_caller = Scaled(3000) / callers + 1;
    RegisterBenchmark("NoopJob/WorkerConnection", BM_NoopJob_WorkerConnection)
        ->Threads(callers)
        ->Iterations(per_caller)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
    RegisterBenchmark("NoopJob/BareStream", BM_NoopJob_BareStream)
        ->Threads(callers)
        ->Iterations(per_caller)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
    RegisterBenchmark("NoopJob/WorkerDirect", BM_NoopJob_WorkerDirect)
        ->Threads(callers)
        ->Iterations(per_caller)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }

  RegisterBenchmark("ExecTrue/WorkerConnection", BM_ExecTrue_WorkerConnection)
      ->Iterations(Scaled(400))
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
  RegisterBenchmark("ExecTrue/RunExecDirect", BM_ExecTrue_RunExecDirect)
      ->Iterations(Scaled(400))
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
  RegisterBenchmark("ExecTrue/WorkerDirect", BM_ExecTrue_WorkerDirect)
      ->Iterations(Scaled(400))
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
  RegisterBenchmark("ExecTrue/PosixSpawnWaitpid", BM_ExecTrue_PosixSpawnWaitpid)
      ->Iterations(Scaled(400))
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();

  RegisterBenchmark("Backoff/StopNoticed", BM_Backoff_StopNoticed)
      ->Iterations(Scaled(40))
      ->UseManualTime()
      ->Unit(benchmark::kMicrosecond);
}

}  // namespace
}  // namespace cfdb::worker::bench

int main(int argc, char** argv) {
  // Our own flag first; Google Benchmark rejects flags it does not know.
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--smoke") == 0) {
      cfdb::worker::bench::g_scale = 100;
    } else {
      args.push_back(argv[i]);
    }
  }
  int args_count = static_cast<int>(args.size());
  // The worker logs every job at info; keep that work but drop the lines.
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "bench", std::make_shared<spdlog::sinks::null_sink_mt>()));
  signal(SIGPIPE, SIG_IGN);
  cfdb::worker::bench::Register();
  benchmark::Initialize(&args_count, args.data());
  if (benchmark::ReportUnrecognizedArguments(args_count, args.data())) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  cfdb::worker::bench::WorkerEnv::DestroyShared();
  cfdb::worker::bench::BareEnv::DestroyShared();
  return 0;
}
