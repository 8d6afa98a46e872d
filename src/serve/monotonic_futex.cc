// Timed waits of abseil, and so of gRPC, on the monotonic clock.
//
// Debian's abseil (20220623) makes every timed wait of absl::Mutex,
// absl::CondVar and absl::Notification a futex(2) wait with
// FUTEX_CLOCK_REALTIME and an absolute wall-clock deadline. gRPC 1.51
// synchronizes with abseil, so its timer threads, its completion queues and
// its shutdown wait the same way. A step of the wall clock (NTP correcting a
// VM's clock at boot) then stretches every wait in progress by the step, or
// cuts it short; under libfaketime, which fakes the wall clock only as the
// process reads it, those deadlines stay in the past and gRPC's threads
// spin. Our own waits use CondVar (clock.h); these we cannot rewrite.
//
// This file, linked into the cfdb-worker binary only, interposes syscall(3):
// the dynamic linker resolves the libraries' calls to the executable's
// definition first. A FUTEX_WAIT_BITSET with FUTEX_CLOCK_REALTIME becomes
// the same wait on CLOCK_MONOTONIC, ending after the time that was left when
// it began (read from the same wall clock the caller used), which no step
// can move. Every other call passes through to libc unchanged.
// tests/serve/clock_step_test.cc checks the daemon under libfaketime both
// ways. Its reach: the cfdb-worker binary only (a program embedding the
// library links its own), and a wait that abseil restarts after a spurious
// wakeup computes its time left from the wall clock again, so a step between
// the two still moves that one.
#include <dlfcn.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>

#include <cstdarg>

namespace {

using SyscallFn = long (*)(long, ...);

SyscallFn LibcSyscall() {
  static const SyscallFn libc =
      reinterpret_cast<SyscallFn>(dlsym(RTLD_NEXT, "syscall"));
  return libc;
}

// Resolved before main, so that no call (e.g. one from a vforked child)
// resolves it later.
[[maybe_unused]] const SyscallFn resolved_at_start = LibcSyscall();

constexpr long kNanos = 1'000'000'000;

// MonotonicDeadline returns the CLOCK_MONOTONIC time at which a wait until
// the wall-clock time `deadline` would end, were the wall clock not to step.
timespec MonotonicDeadline(const timespec& deadline) {
  timespec wall{}, now{};
  clock_gettime(CLOCK_REALTIME, &wall);
  clock_gettime(CLOCK_MONOTONIC, &now);
  long long left =
      (static_cast<long long>(deadline.tv_sec) - wall.tv_sec) * kNanos +
      (deadline.tv_nsec - wall.tv_nsec);
  if (left < 0) left = 0;
  const long long end =
      static_cast<long long>(now.tv_sec) * kNanos + now.tv_nsec + left;
  return timespec{static_cast<time_t>(end / kNanos),
                  static_cast<long>(end % kNanos)};
}

}  // namespace

// Like glibc's, it takes the system call number and six arguments; a caller
// passing fewer leaves the rest unused by the kernel.
extern "C" long syscall(long number, ...) {
  va_list list;
  va_start(list, number);
  long a[6];
  for (long& arg : a) arg = va_arg(list, long);
  va_end(list);
  if (number == SYS_futex && a[3] != 0) {
    const int op = static_cast<int>(a[1]);
    if ((op & FUTEX_CMD_MASK) == FUTEX_WAIT_BITSET &&
        (op & FUTEX_CLOCK_REALTIME)) {
      // A system call's argument is an integer; this one is a timespec*.
      const timespec deadline = MonotonicDeadline(
          *reinterpret_cast<const timespec*>(a[3]));  // NOLINT

      return LibcSyscall()(number, a[0], op & ~FUTEX_CLOCK_REALTIME, a[2],
                           reinterpret_cast<long>(&deadline), a[4], a[5]);
    }
  }
  return LibcSyscall()(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}
