// FakeApi: a stand-in for an orchestrator's HTTP API (the ECS agent's
// tests/serve/fake_ecs_agent.py, the Kubernetes API server's
// tests/serve/fake_kube_api.py) run as a child process; it prints
// "listening PORT", "arrived N" as request N arrives, and one JSON line per
// request answered, which Requests() reads. Not thread-safe.
#pragma once

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cfdb/worker/connection.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "support/go_file.h"
#include "support/test_job.h"
#include "support/wait_for.h"

namespace cfdb::worker::test_support {

class FakeApi {
 public:
  // Runs python3 `script` ARGS and waits for it to listen.
  FakeApi(const std::string& script, std::vector<std::string> args)
      : job_([&] {
          std::vector<std::string> argv = {"/usr/bin/python3", script};
          argv.insert(argv.end(), args.begin(), args.end());
          return ExecRequest(argv);
        }()) {
    thread_ = std::thread([this] { RunExec(job_); });
    EXPECT_TRUE(job_.WaitForOutput("listening ")) << job_.err();
    const std::string out = job_.out();
    const size_t at = out.find("listening ");
    port_ = at == std::string::npos ? 0 : std::stoi(out.substr(at + 10));
  }
  ~FakeApi() {
    job_.Cancel();
    thread_.join();
  }
  FakeApi(const FakeApi&) = delete;
  FakeApi& operator=(const FakeApi&) = delete;

  int port() const { return port_; }
  // Requests returns the requests answered so far.
  std::vector<nlohmann::json> Requests() {
    std::vector<nlohmann::json> requests;
    for (absl::string_view line : absl::StrSplit(job_.out(), '\n')) {
      if (!line.empty() && line[0] == '{') {
        requests.push_back(nlohmann::json::parse(std::string(line)));
      }
    }
    return requests;
  }
  bool WaitForRequests(size_t n) {
    return WaitFor([&] { return Requests().size() >= n; },
                   std::chrono::seconds(20));
  }
  // WaitForArrival waits for request `n` (from 0) to arrive, answered or
  // not.
  bool WaitForArrival(int n) {
    return job_.WaitForOutput(absl::StrCat("arrived ", n, "\n"));
  }

 private:
  CollectingJob job_;
  std::thread thread_;
  int port_ = 0;
};

// RunJobUntilArrival runs one job on `connection` that lasts until request
// `n` arrived at `api`: a job that ended before the busy edge's call began
// would rightly cost no call at all (the latest state wins), which a loaded
// machine makes likely for a job as short as `true`.
inline void RunJobUntilArrival(WorkerConnection& connection, FakeApi& api,
                               int n) {
  const GoFile go;
  std::thread job([&] {
    EXPECT_TRUE(
        connection.Dispatch(ExecRequest({"sh", "-c", go.WaitCommand()}), {})
            .ok());
  });
  EXPECT_TRUE(api.WaitForArrival(n));
  go.Open();
  job.join();
}

}  // namespace cfdb::worker::test_support
