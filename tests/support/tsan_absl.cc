// TSan builds only: tells ThreadSanitizer about absl::Mutex.
//
// Debian's abseil is not built with -fsanitize=thread, so TSan cannot see
// absl::Mutex order memory (it locks with plain atomics and futexes inside
// the uninstrumented library) and reports every access to an
// ABSL_GUARDED_BY member from two threads as a race. This file interposes
// the Mutex and CondVar entry points the project uses: each calls the real
// one (dlsym RTLD_NEXT) and annotates the mutex with __tsan_acquire after it
// is taken and __tsan_release before it is given up, so TSan gets the same
// happens-before edges an instrumented abseil would give it. Races on data
// not ordered by a mutex are still reported, which tsan_canary.cc proves in
// every TSan run. Checked against abseil 20220623 (Debian 12's
// libabsl20220623); a new abseil may rename the entry points (the lookups
// below then fail loudly at startup).
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/synchronization/mutex.h"
#include "spdlog/spdlog.h"

extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);

namespace {

#define CFDB_STR2(x) #x
#define CFDB_STR(x) CFDB_STR2(x)

// Real looks up the library's definition of a member function, by its
// mangled name after "absl::<inline namespace>::" (e.g. "5Mutex4LockEv").
template <typename Fn>
Fn Real(const char* suffix) {
  const char* ns = CFDB_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const std::string name =
      "_ZN4absl" + std::to_string(std::strlen(ns)) + ns + suffix;
  void* fn = dlsym(RTLD_NEXT, name.c_str());
  if (fn == nullptr) {
    std::fprintf(stderr, "tsan_absl: %s not found: %s\n", name.c_str(),
                 dlerror());
    std::abort();
  }
  return reinterpret_cast<Fn>(fn);
}

// Annotated wraps a Condition so that each evaluation, which abseil may run
// inside a wait after it took the mutex back unannotated, is ordered after
// the last release of the mutex.
struct Annotated {
  absl::Mutex* mu;
  const absl::Condition* cond;

  static bool Eval(void* arg) {
    // Ordered after the wrapper's (and the condition's) construction on the
    // waiting thread: another thread may run this one, e.g. while unlocking.
    __tsan_acquire(arg);
    const auto* self = static_cast<const Annotated*>(arg);
    __tsan_acquire(self->mu);
    const bool met = self->cond->Eval();
    __tsan_release(self->mu);
    return met;
  }
};

}  // namespace

// Calls the real function with `cond` annotated for `mu`.
#define CFDB_ANNOTATED(mu, cond)      \
  Annotated annotated{(mu), &(cond)}; \
  __tsan_release(&annotated);         \
  const Condition wrapped(&Annotated::Eval, &annotated)

namespace absl {
ABSL_NAMESPACE_BEGIN

// The real functions take `this` as their first argument.
using Plain = void (*)(Mutex*);
using Try = bool (*)(Mutex*);
using Cond = void (*)(Mutex*, const Condition&);
using CondTimeout = bool (*)(Mutex*, const Condition&, Duration);
using CondDeadline = bool (*)(Mutex*, const Condition&, Time);

void Mutex::Lock() {
  static const auto real = Real<Plain>("5Mutex4LockEv");
  real(this);
  __tsan_acquire(this);
}

void Mutex::ReaderLock() {
  static const auto real = Real<Plain>("5Mutex10ReaderLockEv");
  real(this);
  __tsan_acquire(this);
}

void Mutex::Unlock() {
  static const auto real = Real<Plain>("5Mutex6UnlockEv");
  __tsan_release(this);
  real(this);
}

void Mutex::ReaderUnlock() {
  static const auto real = Real<Plain>("5Mutex12ReaderUnlockEv");
  __tsan_release(this);
  real(this);
}

bool Mutex::TryLock() {
  static const auto real = Real<Try>("5Mutex7TryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

bool Mutex::ReaderTryLock() {
  static const auto real = Real<Try>("5Mutex13ReaderTryLockEv");
  const bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

void Mutex::LockWhen(const Condition& cond) {
  static const auto real = Real<Cond>("5Mutex8LockWhenERKNS0_9ConditionE");
  CFDB_ANNOTATED(this, cond);
  real(this, wrapped);
  __tsan_acquire(this);
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  static const auto real =
      Real<Cond>("5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  CFDB_ANNOTATED(this, cond);
  real(this, wrapped);
  __tsan_acquire(this);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, Duration timeout) {
  static const auto real = Real<CondTimeout>(
      "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  CFDB_ANNOTATED(this, cond);
  const bool met = real(this, wrapped, timeout);
  __tsan_acquire(this);
  return met;
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, Time deadline) {
  static const auto real = Real<CondDeadline>(
      "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  CFDB_ANNOTATED(this, cond);
  const bool met = real(this, wrapped, deadline);
  __tsan_acquire(this);
  return met;
}

// Await gives the mutex up while it waits and takes it back.
void Mutex::Await(const Condition& cond) {
  static const auto real = Real<Cond>("5Mutex5AwaitERKNS0_9ConditionE");
  __tsan_release(this);
  CFDB_ANNOTATED(this, cond);
  real(this, wrapped);
  __tsan_acquire(this);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  static const auto real = Real<CondTimeout>(
      "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  __tsan_release(this);
  CFDB_ANNOTATED(this, cond);
  const bool met = real(this, wrapped, timeout);
  __tsan_acquire(this);
  return met;
}

bool Mutex::AwaitWithDeadline(const Condition& cond, Time deadline) {
  static const auto real = Real<CondDeadline>(
      "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  __tsan_release(this);
  CFDB_ANNOTATED(this, cond);
  const bool met = real(this, wrapped, deadline);
  __tsan_acquire(this);
  return met;
}

void CondVar::Wait(Mutex* mu) {
  static const auto real =
      Real<void (*)(CondVar*, Mutex*)>("7CondVar4WaitEPNS0_5MutexE");
  __tsan_release(mu);
  real(this, mu);
  __tsan_acquire(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  static const auto real = Real<bool (*)(CondVar*, Mutex*, Duration)>(
      "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  __tsan_release(mu);
  const bool timed_out = real(this, mu, timeout);
  __tsan_acquire(mu);
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  static const auto real = Real<bool (*)(CondVar*, Mutex*, Time)>(
      "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  __tsan_release(mu);
  const bool timed_out = real(this, mu, deadline);
  __tsan_acquire(mu);
  return timed_out;
}

ABSL_NAMESPACE_END
}  // namespace absl

// spdlog is not instrumented either: it builds its registry (the default
// logger with it) on first use, under a static guard TSan cannot see, so a
// job thread's first log line raced with the main thread's in TSan's eyes
// (JobsTest). Built here, before main, while the process has one thread,
// every thread started later is ordered after it.
[[maybe_unused]] const bool kSpdlogRegistryBuilt =
    (spdlog::default_logger_raw(), true);
