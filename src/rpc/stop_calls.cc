#include "rpc/stop_calls.h"

namespace cfdb::worker {

void StopCalls::Add(StopReactor* reactor) {
  std::optional<StopSummary> summary;
  {
    absl::MutexLock lock(&mu_);
    if (!summary_) {
      waiting_.insert(reactor);
      return;
    }
    summary = summary_;
  }
  reactor->Answer(*summary);
}

void StopCalls::Cancel(StopReactor* reactor) {
  {
    absl::MutexLock lock(&mu_);
    if (waiting_.erase(reactor) == 0) return;
  }
  reactor->Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                               "the Stop call ended before the drain did"));
}

void StopCalls::Drained(const StopSummary& summary) {
  absl::flat_hash_set<StopReactor*> waiting;
  {
    absl::MutexLock lock(&mu_);
    summary_ = summary;
    waiting.swap(waiting_);
  }
  for (StopReactor* reactor : waiting) reactor->Answer(summary);
}

}  // namespace cfdb::worker
