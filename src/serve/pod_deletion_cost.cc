#include "serve/pod_deletion_cost.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/text.h"
#include "nlohmann/json.hpp"
#include "serve/http_call.h"

namespace cfdb::worker {
namespace {

// ReadTrimmed returns the file's text without surrounding white space, or
// nullopt when it cannot be read.
std::optional<std::string> ReadTrimmed(const std::string& path) {
  const std::optional<std::string> text = ReadFileText(path);
  if (!text) return std::nullopt;
  return std::string(absl::StripAsciiWhitespace(*text));
}

absl::Status StatusOfAnswer(const std::string& url, const HttpAnswer& a) {
  if (a.status >= 200 && a.status < 300) return absl::OkStatus();
  const std::string what =
      absl::StrCat(url, ": HTTP ", a.status, ": ", EscapedForLog(a.body));
  if (a.status == 403) return absl::PermissionDeniedError(what);
  if (a.status == 404) return absl::NotFoundError(what);
  if (a.status == 401) return absl::UnauthenticatedError(what);
  if (a.status == 409 || a.status == 429 || a.status >= 500) {
    return absl::UnavailableError(what);
  }
  return absl::InternalError(what);
}

class KubernetesPod final : public AgentClient {
 public:
  KubernetesPod(const PodDeletionCostOptions& o, Duration timeout)
      : url_(absl::StrCat(o.api_server, "/api/v1/namespaces/", o.pod_namespace,
                          "/pods/", o.pod_name)),
        token_file_(o.service_account_dir + "/token"),
        ca_file_(o.service_account_dir + "/ca.crt"),
        busy_cost_(o.busy_cost),
        safe_to_evict_(o.safe_to_evict),
        timeout_(timeout),
        plane_{.api = "kubernetes",
               .feature = "pod deletion cost",
               .peer = "the Kubernetes API server",
               .field = "pod_busy",
               .busy_text = absl::StrCat(
                   "busy (a job is in flight): ", kPodDeletionCostAnnotation,
                   " ", o.busy_cost, ", ", kDoNotDisruptAnnotation,
                   o.safe_to_evict
                       ? absl::StrCat(", ", kSafeToEvictAnnotation, " false")
                       : ""),
               .idle_text = absl::StrCat(
                   "idle: ", kPodDeletionCostAnnotation, " 0",
                   o.safe_to_evict
                       ? absl::StrCat(", ", kSafeToEvictAnnotation, " true")
                       : "")} {}

  absl::Status SetProtection(bool busy, int /*expires_minutes*/,
                             const std::atomic<bool>& cancel) override {
    nlohmann::json annotations = {
        {kPodDeletionCostAnnotation, busy ? std::to_string(busy_cost_) : "0"},
        // null removes it (RFC 7386).
        {kDoNotDisruptAnnotation,
         busy ? nlohmann::json("true") : nlohmann::json(nullptr)}};
    if (safe_to_evict_) {
      annotations[kSafeToEvictAnnotation] = busy ? "false" : "true";
    }
    const std::string body =
        nlohmann::json{{"metadata", {{"annotations", annotations}}}}.dump();
    for (int attempt = 0;; ++attempt) {
      const std::optional<std::string> token = ReadTrimmed(token_file_);
      if (!token || token->empty()) {
        return absl::UnavailableError(
            absl::StrCat("cannot read the token ", token_file_));
      }
      const absl::StatusOr<HttpAnswer> answer =
          Perform({.method = "PATCH",
                   .url = url_,
                   .headers = {"Content-Type: application/merge-patch+json",
                               "Accept: application/json",
                               absl::StrCat("Authorization: Bearer ", *token)},
                   .body = body,
                   .timeout = timeout_,
                   .ca_file = ca_file_,
                   .cancel = &cancel});
      if (!answer.ok()) return answer.status();
      // A rotated token: read it again, once.
      if (answer->status == 401 && attempt == 0) continue;
      return StatusOfAnswer(url_, *answer);
    }
  }

  const ControlPlane& plane() const override { return plane_; }

 private:
  const std::string url_;
  const std::string token_file_;
  const std::string ca_file_;
  const int busy_cost_;
  const bool safe_to_evict_;
  const Duration timeout_;
  const ControlPlane plane_;
};

}  // namespace

void FindPod(const EnvLookup& env, PodDeletionCostOptions& o) {
  const std::string host = env("KUBERNETES_SERVICE_HOST").value_or("");
  const std::string port = env("KUBERNETES_SERVICE_PORT").value_or("443");
  if (!host.empty()) {
    const bool v6 = host.find(':') != std::string::npos;
    o.api_server =
        absl::StrCat("https://", v6 ? "[" : "", host, v6 ? "]" : "", ":", port);
  }
  o.pod_name = env("POD_NAME").value_or("");
  o.pod_namespace = env("POD_NAMESPACE").value_or("");
  if (o.pod_namespace.empty()) {
    o.pod_namespace =
        ReadTrimmed(o.service_account_dir + "/namespace").value_or("");
  }
}

absl::Status CheckPod(const PodDeletionCostOptions& o) {
  if (!o.enabled) return absl::OkStatus();
  auto missing = [](std::string_view what) {
    return absl::FailedPreconditionError(
        absl::StrCat("needs to run in a Kubernetes pod: ",
                     absl::string_view(what.data(), what.size())));
  };
  if (o.api_server.empty()) {
    return missing("KUBERNETES_SERVICE_HOST is not set");
  }
  if (o.pod_name.empty()) {
    return missing(
        "POD_NAME is not set (give it the pod's metadata.name through the "
        "downward API)");
  }
  if (o.pod_namespace.empty()) {
    return missing(absl::StrCat("neither POD_NAMESPACE nor ",
                                o.service_account_dir, "/namespace is set"));
  }
  for (const char* file : {"/token", "/ca.crt"}) {
    const std::string path = o.service_account_dir + file;
    if (!ReadTrimmed(path)) {
      return missing(absl::StrCat("cannot read ", path,
                                  " (no service account token mounted?)"));
    }
  }
  return absl::OkStatus();
}

std::unique_ptr<AgentClient> KubernetesPodClient(
    const PodDeletionCostOptions& o, Duration timeout) {
  return std::make_unique<KubernetesPod>(o, timeout);
}

}  // namespace cfdb::worker
