#include "rpc/admission.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/text.h"
#include "rpc/san_match.h"
#include "rpc/unix_socket.h"

namespace cfdb::worker {

std::vector<std::string> Admission::Identities(
    const grpc::CallbackServerContext& context) {
  std::vector<std::string> identities;
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr) return identities;
  // SANs only: gRPC names them peer_dns and peer_uri; the legacy Common Name
  // is never an identity here.
  for (const char* property : {"peer_dns", "peer_uri"}) {
    for (const grpc::string_ref& value : auth->FindPropertyValues(property)) {
      identities.emplace_back(value.data(), value.size());
    }
  }
  return identities;
}

std::string ClientIdentity(const grpc::CallbackServerContext& context) {
  if (IsUnixTarget(context.peer())) return "unix socket";
  const std::vector<std::string> identities = Admission::Identities(context);
  return identities.empty() ? "plaintext" : identities.front();
}

JobCaller Admission::Caller(const grpc::CallbackServerContext& context) const {
  JobCaller caller{.identity = ClientIdentity(context)};
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  // A peer without a certificate is of the worker's one trust domain.
  const bool certified = !IsUnixTarget(context.peer()) && auth != nullptr &&
                         !auth->FindPropertyValues("x509_pem_cert").empty();
  caller.admin = !certified || Listed(lists_.admin, Identities(context));
  return caller;
}

bool Admission::Listed(const std::vector<std::string>& list,
                       const std::vector<std::string>& identities) const {
  return std::any_of(
      identities.begin(), identities.end(), [&](const std::string& identity) {
        return std::any_of(list.begin(), list.end(),
                           [&](const std::string& entry) {
                             return AdmissionMatches(entry, identity);
                           });
      });
}

absl::Status Admission::Admit(const grpc::CallbackServerContext& context,
                              MethodGroup group, std::string_view method) {
  if (lists_.empty()) return absl::OkStatus();
  // The Unix socket is owner-only: its callers are the worker's own user.
  if (IsUnixTarget(context.peer())) return absl::OkStatus();
  const std::vector<std::string> identities = Identities(context);
  if (Listed(lists_.control, identities) || Listed(lists_.admin, identities) ||
      (group == MethodGroup::kObserve && Listed(lists_.observe, identities))) {
    return absl::OkStatus();
  }
  const std::string seen =
      identities.empty()
          ? "a certificate without a DNS or URI SAN"
          : absl::StrCat("[", EscapedForLog(absl::StrJoin(identities, ", ")),
                         "]");
  ++refused_[static_cast<std::size_t>(group)];
  absl::Status denied = absl::PermissionDeniedError(absl::StrCat(
      std::string(method), ": permission denied for identity ", seen));
  // Each identity refused is a kind of its own: a client retrying cannot
  // flood the log, nor hide another identity's denials.
  log_.Log(absl::StrCat("denied ", seen), spdlog::level::warn,
           std::string(denied.message()),
           {{"method", method}, {"identity", seen}});
  return denied;
}

}  // namespace cfdb::worker
