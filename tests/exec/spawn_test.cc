// Spawn itself (src/exec/spawn.h): what the job's start hands back.
#include "exec/spawn.h"

#include <sys/wait.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "exec/job_pids.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cfdb::worker::internal {
namespace {

// Where the kernel takes clone3, the start hands back the program's pidfd
// (CLONE_PIDFD), so that no pidfd_open follows: it names the program's
// pid, and says when it exits. Without it RunExec would open one, and a
// lost CLONE_PIDFD would cost a system call per job unseen.
TEST(SpawnTest, Clone3HandsBackThePidfdOfTheProgram) {
  if (!kSpawnsWithClone3) GTEST_SKIP() << "this build spawns with vfork";
  ExecSpec spec{.argv = {"/bin/true"}};
  const absl::StatusOr<Spawned> program =
      Spawn(spec, Identity{}, STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO);
  ASSERT_TRUE(program.ok()) << program.status();
  ASSERT_TRUE(program->pidfd) << "no pidfd from clone3";
  std::ifstream info(absl::StrCat("/proc/self/fdinfo/", program->pidfd.get()));
  const std::string text((std::istreambuf_iterator<char>(info)), {});
  EXPECT_THAT(text, ::testing::HasSubstr(absl::StrCat("Pid:\t", program->pid)));
  int status = 0;
  ASSERT_EQ(waitpid(program->pid, &status, 0), program->pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  absl::MutexLock lock(&JobPids::mu);
  JobPids::Remove(program->pid);
}

}  // namespace
}  // namespace cfdb::worker::internal
