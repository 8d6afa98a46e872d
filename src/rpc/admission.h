// Admission: who may call what, by the identity in the caller's
// certificate, checked at the top of every handler before any work.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cfdb/worker/job.h"
#include "cfdb/worker/rpcs.h"
#include "cfdb/worker/server.h"
#include "core/log_throttle.h"
#include "grpcpp/grpcpp.h"

namespace cfdb::worker {

// ClientIdentity names the caller for listings and ownership: its
// certificate's first SAN, "plaintext", or "unix socket".
std::string ClientIdentity(const grpc::CallbackServerContext& context);

// Admission checks a call's peer against the lists of ServerOptions.
// Thread-safe.
class Admission {
 public:
  // Denied calls are logged through `log`, which must outlive this.
  Admission(AdmissionLists lists, LogThrottle& log)
      : lists_(std::move(lists)), log_(log) {}

  // Admit returns OK when the call's peer may call `method` of `group`:
  // with no list configured, everyone may; else a peer whose certificate
  // has a SAN (DNS name or URI) that an entry of the control or admin list
  // admits (AdmissionMatches: "*.rest" covers one label) may call
  // anything, one of the observe list the observe methods only.
  // PERMISSION_DENIED otherwise, naming the method and the identities seen
  // (never the lists); logged through the throttle, one line per identity per
  // period.
  absl::Status Admit(const grpc::CallbackServerContext& context,
                     MethodGroup group, std::string_view method);

  // refused returns the calls Admit refused so far, of `group`'s methods.
  // Thread-safe.
  uint64_t refused(MethodGroup group) const {
    return refused_[static_cast<std::size_t>(group)].load();
  }

  // Identities returns the SANs (DNS names, URIs) of the call's peer
  // certificate; empty without TLS.
  static std::vector<std::string> Identities(
      const grpc::CallbackServerContext& context);

  // Caller returns who the call's peer is to a job (JobCaller): its
  // identity (ClientIdentity), and whether it may touch every job: over
  // the Unix socket, without a client certificate, or with an identity of
  // the admin list.
  JobCaller Caller(const grpc::CallbackServerContext& context) const;

 private:
  bool Listed(const std::vector<std::string>& list,
              const std::vector<std::string>& identities) const;

  const AdmissionLists lists_;
  LogThrottle& log_;
  std::array<std::atomic<uint64_t>, kMethodGroupCount> refused_{};
};

}  // namespace cfdb::worker
