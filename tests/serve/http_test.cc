// The plain-HTTP port (--http-port) of a real worker, read with libcurl:
// /metrics as a job runs and after, checked by promtool; /readyz in a
// drain; the paths and methods it refuses; a slow client.
#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <regex>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cfdb/worker/connection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "serve/http_endpoint.h"
#include "support/daemon.h"
#include "support/go_file.h"
#include "support/temp_dir.h"
#include "support/test_job.h"
#include "support/wait_for.h"

namespace cfdb::worker {
namespace {

using std::chrono::seconds;
using test_support::Daemon;
using test_support::ExecRequest;
using ::testing::HasSubstr;
using ::testing::Not;

struct Answer {
  long status = 0;
  std::string body;
  std::string headers;
};

size_t Append(char* data, size_t size, size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

// Get asks `path` of the worker's HTTP port with `method` (and `header`,
// a line, if not empty).
Answer Get(int port, const std::string& path, const std::string& method = "GET",
           const std::string& header = "") {
  Answer answer;
  CURL* curl = curl_easy_init();
  curl_slist* headers =
      header.empty() ? nullptr : curl_slist_append(nullptr, header.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  const std::string url = absl::StrCat("http://127.0.0.1:", port, path);
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method.c_str());
  if (method == "HEAD") curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, 10L);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &Append);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &answer.body);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &Append);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &answer.headers);
  if (curl_easy_perform(curl) == CURLE_OK) {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &answer.status);
  }
  curl_easy_cleanup(curl);
  curl_slist_free_all(headers);
  return answer;
}

// HttpPort is the port the daemon's log says it serves HTTP on.
int HttpPort(Daemon& daemon) {
  EXPECT_TRUE(daemon.WaitForLog("http: /metrics"));
  std::smatch m;
  const std::string log = daemon.log();
  if (!std::regex_search(log, m,
                         std::regex(R"(http: .* on 127\.0\.0\.1:(\d+))"))) {
    return 0;
  }
  return std::stoi(m[1]);
}

// Sample returns the value of `series` (name and labels, as written) in
// `metrics`, or -1 when absent.
double Sample(const std::string& metrics, const std::string& series) {
  for (size_t at = 0;
       (at = metrics.find(series + " ", at)) != std::string::npos;
       at += series.size()) {
    if (at == 0 || metrics[at - 1] == '\n') {
      return std::stod(metrics.substr(at + series.size() + 1));
    }
  }
  return -1;
}

// Promtool runs `promtool check metrics` on `metrics`; its output and exit.
std::pair<int, std::string> Promtool(const std::string& metrics) {
  test_support::TempDir dir;
  const std::string file = dir.path("metrics.txt");
  FILE* out = std::fopen(file.c_str(), "w");
  std::fwrite(metrics.data(), 1, metrics.size(), out);
  std::fclose(out);
  test_support::CollectingJob check(ExecRequest(
      {"/bin/sh", "-c", absl::StrCat("promtool check metrics < ", file)}));
  const JobOutcome outcome = RunExec(check);
  return {outcome.code, check.out() + check.err()};
}

class HttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    port_ = HttpPort(daemon_);
    ASSERT_GT(port_, 0) << daemon_.log();
    connection_ = *WorkerConnection::Open(daemon_.address());
  }
  Daemon daemon_{{"--idle-timeout-seconds", "600", "--http-port", "0"}};
  int port_ = 0;
  std::unique_ptr<WorkerConnection> connection_;
};

TEST_F(HttpTest, MetricsFollowAJobAndPromtoolAcceptsThem) {
  const std::string before = Get(port_, "/metrics").body;
  EXPECT_EQ(Sample(before, "cfdb_worker_busy"), 0) << before;
  EXPECT_GT(Sample(before, "cfdb_worker_idle_seconds"), 0) << before;
  EXPECT_GT(Sample(before,
                   R"(cfdb_worker_retirement_timestamp_seconds{rule="idle"})"),
            0)
      << before;
  test_support::GoFile go;
  std::thread job([&] {
    EXPECT_TRUE(
        connection_->Dispatch(ExecRequest({"sh", "-c", go.WaitCommand()}), {})
            .ok());
  });
  std::string during;
  EXPECT_TRUE(test_support::WaitFor([&] {
    during = Get(port_, "/metrics").body;
    return Sample(during, "cfdb_worker_busy") == 1;
  })) << during;
  EXPECT_EQ(Sample(during, "cfdb_worker_idle_seconds"), 0) << during;
  EXPECT_EQ(Sample(during, "cfdb_worker_jobs_in_flight"), 1) << during;
  EXPECT_EQ(Sample(during,
                   R"(cfdb_worker_retirement_timestamp_seconds{rule="idle"})"),
            -1)
      << "no idle retirement while busy:\n"
      << during;
  go.Open();
  job.join();
  const std::string after = Get(port_, "/metrics").body;
  EXPECT_EQ(Sample(after, "cfdb_worker_busy"), 0) << after;
  EXPECT_EQ(
      Sample(after, R"(cfdb_worker_jobs_finished_total{outcome="succeeded"})"),
      1)
      << after;
  EXPECT_EQ(Sample(after, "cfdb_worker_job_duration_seconds_count"), 1)
      << after;
  EXPECT_EQ(Sample(after, "cfdb_worker_job_start_seconds_count"), 1) << after;
  EXPECT_EQ(
      Sample(after, R"(cfdb_worker_rpcs_total{method="Dispatch",code="OK"})"),
      1)
      << after;
  EXPECT_THAT(after, Not(HasSubstr("go-")))
      << "no job's arguments in the metrics";
  const auto [code, said] = Promtool(after);
  EXPECT_EQ(code, 0) << said << "\n" << after;
}

TEST_F(HttpTest, ReadyzIs503InADrainWhileHealthzStays200) {
  EXPECT_EQ(Get(port_, "/readyz").status, 200);
  EXPECT_EQ(Get(port_, "/healthz").status, 200);
  test_support::GoFile go;
  std::thread job([&] {
    (void)connection_->Dispatch(ExecRequest({"sh", "-c", go.WaitCommand()}),
                                {});
  });
  ASSERT_TRUE(test_support::WaitFor(
      [&] { return connection_->IdleTime(seconds(1)).value_or(1) == 0; }));
  std::thread stop([&] { (void)connection_->Stop(seconds(-1), seconds(30)); });
  EXPECT_TRUE(test_support::WaitFor(
      [&] { return Get(port_, "/readyz").status == 503; }));
  EXPECT_EQ(Get(port_, "/healthz").status, 200);
  const std::string metrics = Get(port_, "/metrics").body;
  EXPECT_EQ(Sample(metrics, "cfdb_worker_draining"), 1) << metrics;
  EXPECT_EQ(Sample(metrics, "cfdb_worker_drain_deadline_timestamp_seconds"),
            std::numeric_limits<double>::infinity())
      << "a drain without limit:\n"
      << metrics;
  go.Open();
  job.join();
  stop.join();
  EXPECT_EQ(daemon_.Wait(), JobOutcome::Exited(0)) << daemon_.log();
}

TEST_F(HttpTest, ServesThreePathsAndNothingElse) {
  for (const char* path : {"/", "/metrics/", "/metricsx", "/favicon.ico",
                           "/../etc/passwd", "/healthz/x"}) {
    EXPECT_EQ(Get(port_, path).status, 404) << path;
  }
  for (const char* method : {"POST", "PUT", "DELETE", "OPTIONS"}) {
    const Answer answer = Get(port_, "/metrics", method);
    EXPECT_EQ(answer.status, 405) << method;
    EXPECT_THAT(answer.headers, HasSubstr("Allow: GET, HEAD")) << method;
  }
  const Answer head = Get(port_, "/metrics", "HEAD");
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.body, "");
  // A request head past the 8 KiB cap is refused; the port serves on.
  const Answer big =
      Get(port_, "/metrics", "GET",
          "X-Big: " + std::string(2 * kHttpMaxRequestBytes, 'a'));
  EXPECT_GE(big.status, 400);
  EXPECT_LT(big.status, 500);
  const Answer metrics = Get(port_, "/metrics?debug=1");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_THAT(metrics.headers, HasSubstr("text/plain; version=0.0.4"));
}

// Clients that send a byte and then nothing hold every thread; each is
// dropped by the request timeout, and a scrape is answered after.
TEST_F(HttpTest, SlowClientsAreDroppedAndTheScrapeIsAnsweredAfter) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port_));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::vector<int> slow;
  for (int i = 0; i < kHttpThreads + 2; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_EQ(
        connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    ASSERT_EQ(write(fd, "G", 1), 1);
    slow.push_back(fd);
  }
  // Each is closed by the worker (a read ends), none held for ever.
  // Three request timeouts: the worker drops each within one.
  const timeval wait{
      .tv_sec =
          3 * std::chrono::duration_cast<seconds>(kHttpRequestTimeout).count(),
      .tv_usec = 0};
  for (const int fd : slow) {
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
    char byte = 0;
    EXPECT_GE(read(fd, &byte, 1), 0)
        << "still held after " << wait.tv_sec << " s";
    close(fd);
  }
  EXPECT_EQ(Get(port_, "/metrics").status, 200);
}

// FreePort returns a loopback port nothing listens on now.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t size = sizeof address;
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size);
  close(fd);
  return ntohs(address.sin_port);
}

// Prometheus is Debian's Prometheus server, scraping `target` every
// second, its storage in a temporary folder, on a free loopback port.
class Prometheus {
 public:
  explicit Prometheus(int target)
      : port_(FreePort()),
        job_(ExecRequest(
            {"/usr/bin/prometheus", "--config.file=" + Config(target),
             "--storage.tsdb.path=" + dir_.path("data"),
             "--web.listen-address=127.0.0.1:" + std::to_string(port_),
             "--log.level=warn"})) {
    thread_ = std::thread([this] { RunExec(job_); });
  }
  ~Prometheus() {
    job_.Cancel();
    thread_.join();
  }
  Prometheus(const Prometheus&) = delete;
  Prometheus& operator=(const Prometheus&) = delete;

  // Query runs an instant query; its result vector (empty on an error).
  nlohmann::json Query(const std::string& expr) {
    CURL* curl = curl_easy_init();
    char* escaped =
        curl_easy_escape(curl, expr.c_str(), static_cast<int>(expr.size()));
    const std::string path = absl::StrCat("/api/v1/query?query=", escaped);
    curl_free(escaped);
    curl_easy_cleanup(curl);
    const Answer answer = Get(port_, path);
    const nlohmann::json reply =
        nlohmann::json::parse(answer.body, nullptr, false);
    if (reply.is_discarded() || reply.value("status", "") != "success") {
      return nlohmann::json::array();
    }
    return reply["data"]["result"];
  }
  // Value is the first sample's value of `expr`, or "" when there is none.
  std::string Value(const std::string& expr) {
    const nlohmann::json result = Query(expr);
    return result.empty() ? "" : result[0]["value"][1].get<std::string>();
  }
  std::string log() { return job_.err(); }

 private:
  std::string Config(int target) {
    const std::string path = dir_.path("prometheus.yml");
    std::ofstream(path) << "global: {scrape_interval: 1s, evaluation_interval: "
                           "1s}\nscrape_configs:\n  - job_name: cfdb-worker\n"
                           "    static_configs:\n      - targets: "
                           "['127.0.0.1:"
                        << target << "']\n";
    return path;
  }

  test_support::TempDir dir_;
  const int port_;
  test_support::CollectingJob job_;
  std::thread thread_;
};

// A real Prometheus scrapes a real worker: what the issue's operators ask
// of it (busy during a job and after, jobs finished, the retirement
// timestamp), and every query of the shipped dashboard returns data.
TEST_F(HttpTest, ARealPrometheusScrapesItAndEveryDashboardQueryHasData) {
  Prometheus prometheus(port_);
  ASSERT_TRUE(test_support::WaitFor(
      [&] { return prometheus.Value("up{job=\"cfdb-worker\"}") == "1"; },
      seconds(30)))
      << prometheus.log();
  test_support::GoFile go;
  std::thread job([&] {
    EXPECT_TRUE(
        connection_->Dispatch(ExecRequest({"sh", "-c", go.WaitCommand()}), {})
            .ok());
  });
  EXPECT_TRUE(test_support::WaitFor([&] {
    return prometheus.Value("cfdb_worker_busy") == "1";
  })) << prometheus.log();
  go.Open();
  job.join();
  EXPECT_TRUE(test_support::WaitFor([&] {
    return prometheus.Value(
               R"(cfdb_worker_jobs_finished_total{outcome="succeeded"})") ==
           "1";
  }));
  EXPECT_EQ(prometheus.Value("cfdb_worker_busy"), "0");
  const std::string retires = prometheus.Value(
      R"(cfdb_worker_retirement_timestamp_seconds{rule="max_lifetime"})");
  ASSERT_FALSE(retires.empty());
  EXPECT_GT(std::stod(retires), static_cast<double>(time(nullptr)));
  std::ifstream file(CFDB_DASHBOARD);
  const nlohmann::json dashboard = nlohmann::json::parse(file);
  int queries = 0;
  for (const nlohmann::json& panel : dashboard["panels"]) {
    for (const nlohmann::json& target : panel["targets"]) {
      const std::string expr = target["expr"];
      // A rate has data once two scrapes are in its range: waited for.
      EXPECT_TRUE(test_support::WaitFor(
          [&] { return !prometheus.Query(expr).empty(); }, seconds(10)))
          << panel["title"] << ": " << expr;
      ++queries;
    }
  }
  EXPECT_GT(queries, 10);
}

// The endpoint answers 503 whenever its health or readiness says no: the
// serve loop's wiring is then only what it asks (the listener lost, the
// drain begun; RetirementTest and ReadyzIs503InADrain hold those).
TEST(HttpEndpointTest, UnhealthyAndUnreadyAre503) {
  std::atomic<bool> healthy{true}, ready{true};
  LogThrottle log(SteadyClock::Get());
  absl::StatusOr<std::unique_ptr<HttpEndpoint>> endpoint =
      HttpEndpoint::Start("127.0.0.1", 0,
                          {.metrics = [] { return std::string("m 1\n"); },
                           .healthy = [&] { return healthy.load(); },
                           .ready = [&] { return ready.load(); }},
                          log);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const int port = (*endpoint)->port();
  EXPECT_EQ(Get(port, "/healthz").status, 200);
  EXPECT_EQ(Get(port, "/readyz").status, 200);
  healthy = false;
  EXPECT_EQ(Get(port, "/healthz").status, 503);
  EXPECT_EQ(Get(port, "/readyz").status, 200);
  ready = false;
  EXPECT_EQ(Get(port, "/readyz").status, 503);
  EXPECT_EQ(Get(port, "/metrics").body, "m 1\n") << "metrics still served";
}

TEST(HttpConfigTest, TheGrpcPortIsRefusedAsTheHttpPort) {
  test_support::CollectingJob serve(test_support::Command(
      {"serve", "--port", "50999", "--http-port", "50999"}));
  EXPECT_EQ(RunExec(serve), JobOutcome::Exited(2));
  EXPECT_THAT(serve.err(), HasSubstr("--http-port"));
}

TEST(HttpConfigTest, APortInUseIsRefusedAtStartNamingIt) {
  const int held = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(held, reinterpret_cast<sockaddr*>(&address), sizeof address),
            0);
  ASSERT_EQ(listen(held, 1), 0);
  socklen_t size = sizeof address;
  getsockname(held, reinterpret_cast<sockaddr*>(&address), &size);
  const std::string port = std::to_string(ntohs(address.sin_port));
  test_support::CollectingJob serve(
      test_support::Command({"serve", "--port", "0", "--http-port", port}));
  EXPECT_EQ(RunExec(serve), JobOutcome::Exited(2));
  EXPECT_THAT(serve.err(), HasSubstr(absl::StrCat("127.0.0.1:", port)));
  close(held);
}

}  // namespace
}  // namespace cfdb::worker
