#include "core/job_threads.h"

#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <exception>

#include "core/errno_text.h"
#include "spdlog/spdlog.h"

namespace cfdb::worker {

JobThreads::JobThreads(std::size_t limit, int nice)
    : limit_(limit), nice_(nice) {}

JobThreads::~JobThreads() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
}

bool JobThreads::Post(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  try {
    queue_.push_back(std::move(task));
  } catch (const std::exception& e) {
    spdlog::error("no room to queue a job: {}", e.what());
    return false;
  }
  // Every queued task has a parked thread of its own, or gets a new one. At
  // the limit one thread is past its last task (the caller keeps at most
  // `limit_` in flight) and takes this one when it parks.
  if (queue_.size() <= parked_ || threads_.size() >= limit_) return true;
  try {
    threads_.emplace_back([this] { Loop(); });
    return true;
  } catch (const std::exception& e) {
    spdlog::error("no thread for a job: {}", e.what());
  }
  queue_.pop_back();
  return false;
}

std::size_t JobThreads::threads() const {
  absl::MutexLock lock(&mu_);
  return threads_.size();
}

std::size_t JobThreads::parked() const {
  absl::MutexLock lock(&mu_);
  return parked_;
}

void JobThreads::Loop() {
  // Linux keeps a nice value per thread; processes spawned from here inherit
  // it, so jobs yield the CPU to the threads answering Idle, Stop and health.
  // (Linux: who 0 of PRIO_PROCESS is the calling thread.)
  if (nice_ != 0) {
    errno = 0;
    const int current = getpriority(PRIO_PROCESS, 0);
    if (errno != 0 || setpriority(PRIO_PROCESS, 0, current + nice_) != 0) {
      spdlog::warn("job thread: cannot add {} to its nice value: {}", nice_,
                   ErrnoText(errno));
    }
  }
  auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !queue_.empty() || closing_;
  };
  absl::MutexLock lock(&mu_);
  while (true) {
    ++parked_;
    mu_.Await(absl::Condition(&ready));
    --parked_;
    if (queue_.empty()) return;  // closing
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    mu_.Unlock();
    task();
    task = nullptr;  // drop what it holds before parking
    mu_.Lock();
  }
}

}  // namespace cfdb::worker
