// ServedWorkerTest: a real worker over a real channel (WorkerServer on
// 127.0.0.1:0, WorkerConnection), with the exec kind and an "echo" kind that
// writes its payload.
#pragma once

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "cfdb/worker/connection.h"
#include "cfdb/worker/exec.h"
#include "cfdb/worker/server.h"
#include "cfdb/worker/worker.h"
#include "gtest/gtest.h"
#include "support/loopback.h"
#include "support/test_job.h"

namespace cfdb::worker::test_support {

class ServedWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(4); }

  void Start(std::size_t max_concurrent_tasks, WorkerOptions options = {}) {
    server_.reset();
    options.max_concurrent_tasks = max_concurrent_tasks;
    options.task_kill_grace = std::chrono::seconds(5);
    worker_ = std::make_unique<Worker>(options);
    ASSERT_TRUE(worker_->RegisterKind(kExecKind, ExecKind()).ok());
    ASSERT_TRUE(worker_->RegisterKind("echo", EchoKind()).ok());
    auto server = WorkerServer::Start(*worker_, {.address = "127.0.0.1:0"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    connection_ = Connect();
  }

  std::string address() const {
    return test_support::LoopbackAddress(server_->port());
  }

  std::unique_ptr<WorkerConnection> Connect() {
    auto connection = WorkerConnection::Open(address());
    EXPECT_TRUE(connection.ok());
    return *std::move(connection);
  }

  std::unique_ptr<Worker> worker_;
  std::unique_ptr<WorkerServer> server_;
  std::unique_ptr<WorkerConnection> connection_;
};

}  // namespace cfdb::worker::test_support
