// The sweep's questions on a fake process table: what a job left behind,
// and a process's whole tree.
#include "exec/process_table.h"

#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cfdb::worker {
namespace {

using ::testing::UnorderedElementsAre;

// FakeTable: pid -> (parent, process group).
class FakeTable final : public ProcessTable {
 public:
  void Add(pid_t pid, pid_t parent, pid_t group) {
    procs_[pid] = {parent, group};
  }
  std::vector<pid_t> Children(pid_t pid) const override {
    std::vector<pid_t> children;
    for (const auto& [child, p] : procs_) {
      if (p.first == pid) children.push_back(child);
    }
    return children;
  }
  pid_t ProcessGroup(pid_t pid) const override {
    auto it = procs_.find(pid);
    return it == procs_.end() ? -1 : it->second.second;
  }

 private:
  std::map<pid_t, std::pair<pid_t, pid_t>> procs_;
};

constexpr pid_t kWorker = 100, kGuard = 101, kJob = 200;

class LeftoversTest : public ::testing::Test {
 protected:
  void SetUp() override {
    table_.Add(kWorker, 1, kWorker);
    table_.Add(kGuard, kWorker, kGuard);  // in a session of its own
    table_.Add(kJob, kWorker, kJob);      // a running job's program
    table_.Add(201, kJob, kJob);          // its child, in its group
  }
  std::vector<pid_t> Left() const {
    return Leftovers(table_, kWorker, {kJob}, {kGuard});
  }
  FakeTable table_;
};

TEST_F(LeftoversTest, ARunningJobAndTheGuardAreNoLeftovers) {
  EXPECT_TRUE(Left().empty());
}

TEST_F(LeftoversTest, AnOrphanOfARunningJobInItsGroupStays) {
  table_.Add(300, kWorker, kJob);  // re-parented, still the job's group
  EXPECT_TRUE(Left().empty());
}

// setsid, setpgid(0, 0), the worker's own group, a double fork: once their
// parent is gone they are the worker's children outside any job's group.
TEST_F(LeftoversTest, EveryWayOutOfTheGroupIsALeftover) {
  table_.Add(301, kWorker, 301);      // setsid or setpgid(0, 0)
  table_.Add(302, kWorker, kWorker);  // joined the worker's group
  table_.Add(303, kWorker, 999);      // a group of a job that has ended
  EXPECT_THAT(Left(), UnorderedElementsAre(301, 302, 303));
}

TEST_F(LeftoversTest, AProcessGoneMeanwhileIsSkipped) {
  // Listed as a child, but /proc has no stat any more.
  class Vanishing final : public ProcessTable {
   public:
    std::vector<pid_t> Children(pid_t) const override { return {400}; }
    pid_t ProcessGroup(pid_t) const override { return -1; }
  } table;
  EXPECT_TRUE(Leftovers(table, kWorker, {}, {}).empty());
}

TEST(DescendantsTest, TheWholeTreeParentsFirstWithoutTheRoot) {
  FakeTable table;
  table.Add(10, 1, 10);
  table.Add(11, 10, 10);
  table.Add(12, 10, 12);  // left the group: still a descendant
  table.Add(13, 12, 13);
  table.Add(14, 13, 14);
  table.Add(20, 1, 20);  // not below 10
  const std::vector<pid_t> tree = Descendants(table, 10);
  EXPECT_THAT(tree, UnorderedElementsAre(11, 12, 13, 14));
  const auto at = [&](pid_t p) {
    return std::find(tree.begin(), tree.end(), p);
  };
  EXPECT_LT(at(12), at(13));
  EXPECT_LT(at(13), at(14));
  EXPECT_TRUE(Descendants(table, 14).empty());
}

}  // namespace
}  // namespace cfdb::worker
