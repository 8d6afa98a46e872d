#include "cfdb/worker/drain.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cfdb::worker {

Duration GraceFromSeconds(double seconds) {
  return seconds < 0 ? Duration(-1) : ToDuration(Seconds(seconds));
}

TimePoint StopRequest::Deadline() const {
  if (grace < Duration::zero()) return TimePoint::max();
  // Saturating: a grace of years must not wrap around.
  if (grace > TimePoint::max() - arrival) return TimePoint::max();
  return arrival + grace;
}

bool StopRequests::Add(const StopRequest& request) {
  auto it = std::find_if(
      sources_.begin(), sources_.end(),
      [&](const Source& s) { return s.earliest.source == request.source; });
  if (it == sources_.end()) {
    sources_.push_back(Source{request, request.arrival, 0});
    it = sources_.end() - 1;
  }
  ++it->count;
  it->first_arrival = std::min(it->first_arrival, request.arrival);
  const TimePoint deadline = request.Deadline();
  if (deadline < it->earliest.Deadline()) it->earliest = request;
  if (deadline >= deadline_) return false;
  deadline_ = deadline;
  deadline_index_ = static_cast<std::size_t>(it - sources_.begin());
  return true;
}

std::string StopRequests::deadline_source() const {
  if (deadline_ == TimePoint::max()) return "";
  return sources_[deadline_index_].earliest.source;
}

TimePoint StopRequests::first_arrival() const {
  TimePoint first = TimePoint::max();
  for (const Source& s : sources_) first = std::min(first, s.first_arrival);
  return sources_.empty() ? TimePoint{} : first;
}

std::vector<StopRequests::Source> StopRequests::sources() const {
  std::vector<Source> order = sources_;
  std::stable_sort(order.begin(), order.end(),
                   [](const Source& a, const Source& b) {
                     return a.first_arrival < b.first_arrival;
                   });
  return order;
}

std::string StopRequests::Describe(TimePoint since) const {
  const std::string deadline_source = this->deadline_source();
  std::string text;
  for (const Source& s : sources()) {
    if (!text.empty()) text += ", ";
    const StopRequest& r = s.earliest;
    absl::StrAppend(&text, r.source);
    if (s.count > 1) absl::StrAppend(&text, " x", s.count);
    const std::string grace =
        r.grace < Duration::zero()
            ? "no limit"
            : absl::StrFormat("grace %g s", ToSeconds(r.grace));
    absl::StrAppend(
        &text, " (", grace,
        absl::StrFormat(", %s +%.1f s", s.count > 1 ? "first at" : "at",
                        ToSeconds(s.first_arrival - since)));
    if (r.source == deadline_source) text += "; set the deadline";
    text += ")";
  }
  return text;
}

}  // namespace cfdb::worker
