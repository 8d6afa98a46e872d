#include "serve/scale_in.h"

#define CURL_DISABLE_TYPECHECK  // calls go through LibCurl's pointers
#include <curl/curl.h>
#include <dlfcn.h>

#include <algorithm>
#include <type_traits>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/log.h"
#include "core/text.h"
#include "nlohmann/json.hpp"
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

// Appends what the agent answers, up to 64 KiB.
size_t Collect(char* data, size_t size, size_t count, void* out) {
  auto* body = static_cast<std::string*>(out);
  const size_t n = size * count;
  body->append(data, std::min(n, (size_t{64} << 10) -
                                     std::min(body->size(), size_t{64} << 10)));
  return n;
}

// Ends the transfer once the worker is exiting.
int Progress(void* cancel, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<const std::atomic<bool>*>(cancel)->load() ? 1 : 0;
}

// LibCurl is libcurl loaded on first use (dlopen), not linked: a worker
// without scale-in protection, which is most, then starts without mapping
// libcurl and the two dozen libraries it pulls in (TLS, LDAP, Kerberos,
// ...), which cost it about a third of its cold start and resident memory.
struct LibCurl {
  decltype(&curl_global_init) global_init;
  decltype(&curl_easy_init) easy_init;
  decltype(&curl_easy_cleanup) easy_cleanup;
  decltype(&curl_easy_setopt) easy_setopt;
  decltype(&curl_easy_perform) easy_perform;
  decltype(&curl_easy_getinfo) easy_getinfo;
  decltype(&curl_easy_strerror) easy_strerror;
  decltype(&curl_slist_append) slist_append;
  decltype(&curl_slist_free_all) slist_free_all;

  // Get loads libcurl once (and runs curl_global_init); the error names
  // what was missing. Thread-safe.
  static const absl::StatusOr<LibCurl>& Get() {
    static const absl::StatusOr<LibCurl>* const loaded =
        new absl::StatusOr<LibCurl>(Load());  // never unloaded
    return *loaded;
  }

 private:
  static absl::StatusOr<LibCurl> Load() {
    void* const so = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (so == nullptr) {
      return absl::FailedPreconditionError(
          // Load runs once, inside Get's static initialisation.
          absl::StrCat("cannot load libcurl: ",
                       dlerror()));  // NOLINT(concurrency-mt-unsafe)
    }
    LibCurl lib{};
    bool missing = false;
    auto find = [&](auto& function, const char* name) {
      function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(
          dlsym(so, name));
      missing = missing || function == nullptr;
    };
    find(lib.global_init, "curl_global_init");
    find(lib.easy_init, "curl_easy_init");
    find(lib.easy_cleanup, "curl_easy_cleanup");
    find(lib.easy_setopt, "curl_easy_setopt");
    find(lib.easy_perform, "curl_easy_perform");
    find(lib.easy_getinfo, "curl_easy_getinfo");
    find(lib.easy_strerror, "curl_easy_strerror");
    find(lib.slist_append, "curl_slist_append");
    find(lib.slist_free_all, "curl_slist_free_all");
    if (missing) {
      return absl::FailedPreconditionError(
          "libcurl.so.4 lacks a function the worker calls");
    }
    lib.global_init(CURL_GLOBAL_DEFAULT);
    return lib;
  }
};

class CurlAgent final : public AgentClient {
 public:
  CurlAgent(std::string url, Duration timeout)
      : url_(std::move(url)),
        timeout_ms_(
            std::chrono::duration_cast<std::chrono::milliseconds>(timeout)
                .count()) {}

  absl::Status SetProtection(bool enabled, int expires_minutes,
                             const std::atomic<bool>& cancel) override {
    const absl::StatusOr<LibCurl>& lib = LibCurl::Get();
    if (!lib.ok()) return lib.status();
    std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(lib->easy_init(),
                                                             lib->easy_cleanup);
    if (curl == nullptr) return absl::InternalError("curl_easy_init failed");
    nlohmann::json request = {{"ProtectionEnabled", enabled}};
    if (enabled) request["ExpiresInMinutes"] = expires_minutes;
    const std::string body = request.dump();
    std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> headers(
        lib->slist_append(nullptr, "Content-Type: application/json"),
        lib->slist_free_all);
    std::string answer;
    CURL* c = curl.get();
    lib->easy_setopt(c, CURLOPT_URL, url_.c_str());
    lib->easy_setopt(c, CURLOPT_CUSTOMREQUEST, "PUT");
    lib->easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
    lib->easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
    lib->easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    lib->easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms_);
    lib->easy_setopt(c, CURLOPT_NOSIGNAL, 1L);  // threads: no SIGALRM
    // The agent is local to the task: never through a proxy of the
    // environment, and plain HTTP only.
    lib->easy_setopt(c, CURLOPT_NOPROXY, "*");
    lib->easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http");
    lib->easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    lib->easy_setopt(c, CURLOPT_XFERINFOFUNCTION, &Progress);
    lib->easy_setopt(c, CURLOPT_XFERINFODATA, &cancel);
    lib->easy_setopt(c, CURLOPT_WRITEFUNCTION, &Collect);
    lib->easy_setopt(c, CURLOPT_WRITEDATA, &answer);
    const CURLcode rc = lib->easy_perform(c);
    if (rc == CURLE_ABORTED_BY_CALLBACK) {
      return absl::UnavailableError("abandoned: the worker is exiting");
    }
    if (rc != CURLE_OK) {
      return absl::UnavailableError(
          absl::StrCat(url_, ": ", lib->easy_strerror(rc)));
    }
    long code = 0;
    lib->easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    const nlohmann::json reply =
        nlohmann::json::parse(answer, nullptr, /*allow_exceptions=*/false);
    const bool failed = reply.is_object() &&
                        (reply.contains("failure") || reply.contains("error"));
    if (code < 200 || code >= 300 || failed) {
      return absl::InternalError(
          absl::StrCat(url_, ": HTTP ", code, ": ", EscapedForLog(answer)));
    }
    return absl::OkStatus();
  }

 private:
  const std::string url_;
  const long timeout_ms_;
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

void ScaleInProtection::Run() {
  for (;;) {
    bool enable = false;
    bool renewal = false;
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
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
  if (!status.ok()) {
    ++failed_calls_;
    const Duration delay = policy_.Failed(now, enable);
    if (policy_.failures() == 1) {
      spdlog::warn(
          "scale-in protection: the ECS agent did not take \"{}\": {}; "
          "retrying in {:.1f} s and on, with backoff, until it does",
          enable ? "enabled" : "disabled", status.ToString(), ToSeconds(delay));
    } else {
      spdlog::debug("scale-in protection: failed again ({}): {}",
                    policy_.failures(), status.ToString());
    }
    return;
  }
  const int failures = policy_.failures();
  policy_.Applied(now, enable);
  if (failures > 0) {
    spdlog::info(
        "scale-in protection: the ECS agent answered again after {} failed "
        "calls",
        failures);
  }
  if (renewal) {
    spdlog::debug("scale-in protection: renewed for {} min", expires_minutes_);
    return;
  }
  LogEvent(spdlog::level::info,
           enable ? absl::StrCat("scale-in protection: enabled for ",
                                 expires_minutes_, " min (a job is in flight)")
                  : std::string("scale-in protection: disabled (idle)"),
           {{"scale_in_protection", enable}});
}

}  // namespace cfdb::worker
