// Stop requests, and how they compose into one drain.
//
// Whatever asks a worker to stop (a signal, a Stop RPC, the max lifetime,
// idle retirement, code calling Worker::Stop) makes a StopRequest with a
// grace. The first request starts the drain. Each request names a deadline,
// its arrival plus its grace, and the drain's deadline is the earliest of
// them: a later request can shorten a drain, never lengthen it.
//
//   StopRequests requests;
//   requests.Add({"max lifetime", std::chrono::hours(6), t0});
//   requests.Add({"SIGTERM", Duration::zero(), t0 + std::chrono::seconds(2)});
//   requests.deadline();         // t0 + 2 s
//   requests.deadline_source();  // "SIGTERM"
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "cfdb/worker/clock.h"

namespace cfdb::worker {

// GraceFromSeconds turns a grace as the wire and the CLI give it (double
// seconds; the caller refuses NaN) into a StopRequest's
// grace: negative stays negative (no limit), the rest is ToDuration.
Duration GraceFromSeconds(double seconds);

// StopRequest is one request to stop a worker.
struct StopRequest {
  // Who asked, for the exit log: "SIGTERM", "stop rpc", "max lifetime", ...
  std::string source;
  // How long jobs in flight may run on; zero cancels them at once, negative
  // lets them run without limit.
  Duration grace = Duration::zero();
  // When the request arrived, on std::chrono::steady_clock (not an injected
  // Clock: the drain is a real wait). Worker::RequestStop fills in "now"
  // when it is left unset (TimePoint{}).
  TimePoint arrival{};

  // Deadline returns arrival + grace, or TimePoint::max() for a negative
  // grace.
  TimePoint Deadline() const;
};

// StopSummary says what a drain did to the jobs that were in flight when it
// began.
struct StopSummary {
  std::size_t drained = 0;    // finished by themselves during the drain
  std::size_t cancelled = 0;  // cancelled when the deadline passed
};

// DrainReport is how a drain went, for the exit log.
struct DrainReport {
  StopSummary summary;
  // Every source that asked, in order of first arrival, with its grace and
  // arrival relative to the drain's start (StopRequests::Describe).
  std::string requests;
  // The source whose request set the deadline; empty if none had a limit.
  std::string deadline_source;
  // From the first request to the end of the drain.
  Duration took = Duration::zero();
};

// StopRequests composes stop requests: the earliest deadline wins, and on a
// tie the request that came first keeps it. It keeps one entry per source
// (a count and that source's earliest-deadline request), so a flood of
// requests costs no memory. Not thread-safe.
class StopRequests {
 public:
  // Source is what one source asked: how often, when first, and its
  // request with the earliest deadline.
  struct Source {
    StopRequest earliest;
    TimePoint first_arrival;
    std::size_t count = 0;
  };

  // Add records `request` (arrival must be set). Returns true when it moved
  // the deadline earlier.
  bool Add(const StopRequest& request);

  bool empty() const { return sources_.empty(); }
  // deadline returns the earliest deadline so far (TimePoint::max() while no
  // request has a limit).
  TimePoint deadline() const { return deadline_; }
  // deadline_source names the request that set the deadline; empty while no
  // request has a limit.
  std::string deadline_source() const;
  // first_arrival returns when the first request arrived (TimePoint{} if
  // none did).
  TimePoint first_arrival() const;

  // Describe lists the sources in order of first arrival, times relative to
  // `since`, e.g. "max lifetime (grace 60 s, at +1.0 s), SIGTERM (grace 0 s,
  // at +3.1 s; set the deadline)"; a source that asked more than once shows
  // its count and its earliest-deadline request: "stop rpc x300 (no limit,
  // first at +0.2 s)".
  std::string Describe(TimePoint since) const;

  // sources returns one entry per source, in order of first arrival.
  std::vector<Source> sources() const;

 private:
  std::vector<Source> sources_;
  TimePoint deadline_ = TimePoint::max();
  std::size_t deadline_index_ = 0;  // into sources_, when deadline_ is set
};

}  // namespace cfdb::worker
