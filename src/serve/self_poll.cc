#include "serve/self_poll.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "cfdb/worker/connection.h"
#include "cfdb/worker/errors.h"
#include "serve/address.h"

namespace cfdb::worker {
namespace {

// SelfPoll is the policy's IdleSource: a WorkerConnection to this worker.
class SelfPoll final : public IdleSource {
 public:
  SelfPoll(std::unique_ptr<WorkerConnection> connection, bool hint_loopback_san)
      : connection_(std::move(connection)),
        hint_loopback_san_(hint_loopback_san) {}

  absl::StatusOr<double> IdleTime(Duration timeout) override {
    return Hinted(connection_->IdleTime(timeout));
  }
  absl::Status Close() override { return connection_->Close(); }

 private:
  // Hinted adds the likely cause to a handshake error.
  absl::StatusOr<double> Hinted(absl::StatusOr<double> idle) const {
    if (idle.ok() || !hint_loopback_san_ ||
        ClassifyError(Rpc::kIdle, idle.status()) !=
            ErrorKind::kHandshakeError) {
      return idle;
    }
    return absl::Status(
        idle.status().code(),
        absl::StrCat(
            idle.status().message(),
            " -- likely cause: the worker's certificate has no SAN for ",
            connection_->target(),
            "'s host; set --tls-identity to a name the certificate "
            "has, or add the loopback SAN"));
  }

  const std::unique_ptr<WorkerConnection> connection_;
  const bool hint_loopback_san_;
};

}  // namespace

RetirementPolicy::ConnectionFactory SelfPollFactory(
    std::string host, int port, const Credentials& credentials) {
  return [host = std::move(host), port,
          credentials]() -> absl::StatusOr<std::unique_ptr<IdleSource>> {
    auto connection =
        WorkerConnection::Open(LoopbackTarget(host, port), credentials);
    if (!connection.ok()) return connection.status();
    const bool hint = credentials.kind == Credentials::Kind::kMutualTls &&
                      credentials.identity.empty();
    return std::make_unique<SelfPoll>(*std::move(connection), hint);
  };
}

std::function<absl::Status(Duration deadline)> FreshDial(
    const std::string& host, int port, const Credentials& credentials) {
  return [target = LoopbackTarget(host, port),
          credentials](Duration deadline) -> absl::Status {
    absl::StatusOr<std::unique_ptr<WorkerConnection>> fresh =
        WorkerConnection::Open(target, credentials, {.own_connection = true});
    if (!fresh.ok()) return fresh.status();
    return (*fresh)->IdleTime(deadline).status();
  };
}

}  // namespace cfdb::worker
