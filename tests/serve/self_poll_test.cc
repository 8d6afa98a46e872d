#include "serve/self_poll.h"

#include "absl/strings/str_cat.h"
#include "cfdb/worker/server.h"
#include "cfdb/worker/worker.h"
#include "gtest/gtest.h"

namespace cfdb::worker {
namespace {

// A worker listening on a wildcard address is polled over loopback, at its
// port, with the credentials given: here it answers.
TEST(SelfPollFactoryTest, DialsLoopbackAtTheWorkerPortWithItsCredentials) {
  Worker worker(WorkerOptions{});
  auto server = WorkerServer::Start(worker, {.address = "127.0.0.1:0"});
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<std::unique_ptr<IdleSource>> source =
      SelfPollFactory("0.0.0.0", (*server)->port(), Credentials::Insecure())();
  ASSERT_TRUE(source.ok()) << source.status();
  absl::StatusOr<double> idle = (*source)->IdleTime(std::chrono::seconds(30));
  ASSERT_TRUE(idle.ok()) << idle.status();
  EXPECT_GE(*idle, 0);
  EXPECT_TRUE((*source)->Close().ok());
  EXPECT_FALSE((*source)->Close().ok()) << "closed once";
}

}  // namespace
}  // namespace cfdb::worker
