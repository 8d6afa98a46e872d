#include "serve/scale_in.h"

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/log.h"
#include "core/text.h"
#include "nlohmann/json.hpp"
#include "serve/http_call.h"
#include "spdlog/spdlog.h"

namespace cfdb::worker {

ProtectionPolicy::ProtectionPolicy(Duration expires, Duration hold,
                                   Duration call_timeout)
    : expires_(expires), hold_(hold), call_timeout_(call_timeout) {}

void ProtectionPolicy::SetBusy(TimePoint now, bool busy) {
  if (busy_ && !busy) hold_end_ = now + hold_;
  busy_ = busy;
}

bool ProtectionPolicy::InHold(TimePoint now) const {
  return !busy_ && enabled_ && failures_ == 0 && now < hold_end_;
}

bool ProtectionPolicy::Wanted(TimePoint now) const {
  return busy_ || InHold(now);
}

std::optional<bool> ProtectionPolicy::Due(TimePoint now) const {
  const bool wanted = Wanted(now);
  if (failures_ > 0) {
    // The agent's state is unknown (a call that timed out may have been
    // applied): the wanted state is sent again, at the retry, or at once
    // when it has changed since the call that failed.
    if (now < retry_at_ && wanted == attempted_) return std::nullopt;
    return wanted;
  }
  if (wanted != enabled_) return wanted;
  // A renewal; in the hold, only one that ends before the hold does.
  if (enabled_ && now >= renew_at_ &&
      (busy_ || now + call_timeout_ <= hold_end_)) {
    return true;
  }
  return std::nullopt;
}

TimePoint ProtectionPolicy::Next(TimePoint now) const {
  if (failures_ > 0) return retry_at_;
  if (!enabled_) return TimePoint::max();
  if (busy_) return renew_at_;
  // In the hold: its renewal, if one fits before its end, else its end.
  return now < renew_at_ && renew_at_ + call_timeout_ <= hold_end_ ? renew_at_
                                                                   : hold_end_;
}

void ProtectionPolicy::Applied(TimePoint now, bool enabled) {
  enabled_ = enabled;
  // Renew at half the expiry: a call that fails then has the other half
  // to be retried in before the protection lapses.
  renew_at_ = enabled ? now + expires_ / 2 : TimePoint::max();
  failures_ = 0;
  backoff_.Succeeded();
}

Duration ProtectionPolicy::Failed(TimePoint now, bool attempted) {
  ++failures_;
  attempted_ = attempted;
  const Duration delay = backoff_.Failed();
  retry_at_ = now + delay;
  return delay;
}

namespace {

class CurlAgent final : public AgentClient {
 public:
  CurlAgent(std::string url, Duration timeout)
      : url_(std::move(url)), timeout_(timeout) {}

  absl::Status SetProtection(bool enabled, int expires_minutes,
                             const std::atomic<bool>& cancel) override {
    nlohmann::json request = {{"ProtectionEnabled", enabled}};
    if (enabled) request["ExpiresInMinutes"] = expires_minutes;
    const absl::StatusOr<HttpAnswer> answer =
        Perform({.method = "PUT",
                 .url = url_,
                 .headers = {"Content-Type: application/json"},
                 .body = request.dump(),
                 .timeout = timeout_,
                 .cancel = &cancel});
    if (!answer.ok()) return answer.status();
    const nlohmann::json reply = nlohmann::json::parse(
        answer->body, nullptr, /*allow_exceptions=*/false);
    const bool failed = reply.is_object() &&
                        (reply.contains("failure") || reply.contains("error"));
    if (answer->status < 200 || answer->status >= 300 || failed) {
      return absl::InternalError(absl::StrCat(
          url_, ": HTTP ", answer->status, ": ", EscapedForLog(answer->body)));
    }
    return absl::OkStatus();
  }

  const ControlPlane& plane() const override {
    static const ControlPlane kEcs{.api = "ecs_agent",
                                   .feature = "scale-in protection",
                                   .peer = "the ECS agent",
                                   .field = "scale_in_protection",
                                   .busy_text =
                                       "enabled for {} min (a job "
                                       "is in flight)",
                                   .idle_text = "disabled (idle)"};
    return kEcs;
  }

 private:
  const std::string url_;
  const Duration timeout_;
};

}  // namespace

std::unique_ptr<AgentClient> CurlAgentClient(std::string agent_uri,
                                             Duration timeout) {
  while (!agent_uri.empty() && agent_uri.back() == '/') agent_uri.pop_back();
  return std::make_unique<CurlAgent>(
      absl::StrCat(agent_uri, "/task-protection/v1/state"), timeout);
}

ScaleInProtection::ScaleInProtection(Duration expires, Duration hold,
                                     std::unique_ptr<AgentClient> agent)
    : expires_minutes_(static_cast<int>(
          std::chrono::duration_cast<std::chrono::minutes>(expires).count())),
      agent_(std::move(agent)),
      policy_(expires, hold) {
  thread_ = std::thread([this] { Run(); });
}

ScaleInProtection::~ScaleInProtection() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  wake_.SignalAll();
  thread_.join();
}

void ScaleInProtection::Changed(const std::function<bool()>& busy) {
  {
    absl::MutexLock lock(&mu_);
    policy_.SetBusy(std::chrono::steady_clock::now(), busy());
    changed_ = true;
  }
  wake_.SignalAll();
}

bool ScaleInProtection::applied() const {
  absl::MutexLock lock(&mu_);
  return policy_.enabled();
}

int ScaleInProtection::calls() const {
  absl::MutexLock lock(&mu_);
  return calls_;
}

int ScaleInProtection::failed_calls() const {
  absl::MutexLock lock(&mu_);
  return failed_calls_;
}

bool ScaleInProtection::off() const {
  absl::MutexLock lock(&mu_);
  return off_;
}

void ScaleInProtection::Run() {
  for (;;) {
    bool enable = false;
    bool renewal = false;
    {
      absl::MutexLock lock(&mu_);
      if (stop_ || off_) return;
      changed_ = false;
      const TimePoint now = std::chrono::steady_clock::now();
      const std::optional<bool> due = policy_.Due(now);
      if (!due) {
        const TimePoint next = policy_.Next(now);
        while (!changed_ && !stop_) {
          if (!wake_.WaitUntil(mu_, next)) break;
        }
        continue;
      }
      enable = *due;
      renewal = enable && policy_.enabled();
    }
    // Off the lock: Changed() never waits for the agent.
    const absl::Status status =
        agent_->SetProtection(enable, expires_minutes_, stop_);
    absl::MutexLock lock(&mu_);
    ++calls_;
    if (stop_) return;
    Record(enable, renewal, status);
  }
}

void ScaleInProtection::Record(bool enable, bool renewal,
                               const absl::Status& status) {
  const TimePoint now = std::chrono::steady_clock::now();
  const ControlPlane& plane = agent_->plane();
  if (absl::IsPermissionDenied(status) || absl::IsNotFound(status)) {
    ++failed_calls_;
    off_ = true;
    spdlog::warn("{}: {} refused \"{}\" for good: {}; turning it off",
                 plane.feature, plane.peer, enable ? "busy" : "idle",
                 status.ToString());
    return;
  }
  if (!status.ok()) {
    ++failed_calls_;
    const Duration delay = policy_.Failed(now, enable);
    if (policy_.failures() == 1) {
      spdlog::warn(
          "{}: {} did not take \"{}\": {}; retrying in {:.1f} s and on, "
          "with backoff, until it does",
          plane.feature, plane.peer, enable ? "enabled" : "disabled",
          status.ToString(), ToSeconds(delay));
    } else {
      spdlog::debug("{}: failed again ({}): {}", plane.feature,
                    policy_.failures(), status.ToString());
    }
    return;
  }
  const int failures = policy_.failures();
  policy_.Applied(now, enable);
  if (failures > 0) {
    spdlog::info("{}: {} answered again after {} failed calls", plane.feature,
                 plane.peer, failures);
  }
  if (renewal) {
    spdlog::debug("{}: renewed for {} min", plane.feature, expires_minutes_);
    return;
  }
  LogEvent(spdlog::level::info,
           absl::StrCat(plane.feature, ": ",
                        enable ? fmt::format(fmt::runtime(plane.busy_text),
                                             expires_minutes_)
                               : plane.idle_text),
           {{plane.field, enable}});
}

}  // namespace cfdb::worker
