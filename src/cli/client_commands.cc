// `cfdb-worker idle|health|stop|status`: the binary as a client of any worker,
// and what every client command shares (client_calls.h).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cfdb/worker/connection.h"
#include "cfdb/worker/drain.h"
#include "cfdb/worker/errors.h"
#include "cfdb/worker/exec.h"
#include "cli/cli_flags.h"
#include "cli/client_calls.h"
#include "cli/commands.h"
#include "cli/fan_out.h"
#include "nlohmann/json.hpp"
#include "rpc/tls_probe.h"
#include "spdlog/spdlog.h"

namespace cfdb::worker::cli {

int Fail(Rpc rpc, const ClientOptions& options, const absl::Status& failed) {
  const std::string& address = options.address;
  const absl::Status status = Explained(rpc, address, options, failed);
  const ErrorKind kind = ClassifyError(rpc, status);
  std::cerr << "cfdb-worker: " << address << ": " << ErrorKindName(kind) << " ("
            << absl::StatusCodeToString(status.code())
            << "): " << status.message();
  if (!ErrorKindMeaning(kind).empty()) {
    std::cerr << " -- " << ErrorKindMeaning(kind);
  }
  std::cerr << "\n";
  return ExitCodeFor(kind);
}

void WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // the reader went away; nothing useful to do
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
}

absl::Status Explained(Rpc rpc, const std::string& address,
                       const ClientOptions& options,
                       const absl::Status& status) {
  // OpenSSL's word for a first reply that is not TLS at all: an HTTP/2
  // frame from a plaintext worker.
  if (options.credentials.kind != Credentials::Kind::kInsecure &&
      absl::StrContains(status.message(), "wrong version number")) {
    return absl::Status(
        status.code(),
        absl::StrCat(status.message(), "; the worker at ", address,
                     " answers plaintext, not TLS: drop --tls-ca, --tls-cert "
                     "and --tls-key, or start it with its own"));
  }
  if (options.credentials.kind != Credentials::Kind::kInsecure ||
      ClassifyError(rpc, status) != ErrorKind::kTransient ||
      !absl::IsUnavailable(status) ||
      !SpeaksTls(address, std::chrono::seconds(2))) {
    return status;
  }
  return absl::Status(
      status.code(),
      absl::StrCat(status.message(), "; the worker at ", address,
                   " speaks TLS: pass --tls-ca, --tls-cert and --tls-key"));
}

int RunIdle(const ClientOptions& options) {
  auto connection = Connect(options.address, options);
  if (!connection.ok()) return Fail(Rpc::kIdle, options, connection.status());
  absl::StatusOr<double> idle = WithRetries(options.attempts, Rpc::kIdle, [&] {
    return (*connection)->IdleTime(options.timeout);
  });
  if (!idle.ok()) return Fail(Rpc::kIdle, options, idle.status());
  std::cout << absl::StrFormat("%.3f", *idle) << "\n";
  return kExitOk;
}

int RunHealth(const ClientOptions& options, const std::string& service) {
  auto connection = Connect(options.address, options);
  if (!connection.ok()) return Fail(Rpc::kHealth, options, connection.status());
  absl::StatusOr<WorkerConnection::ServingStatus> status = WithRetries(
      options.attempts, Rpc::kHealth,
      [&] { return (*connection)->Health(options.timeout, service); });
  if (!status.ok()) return Fail(Rpc::kHealth, options, status.status());
  switch (*status) {
    case WorkerConnection::ServingStatus::kServing:
      std::cout << "SERVING\n";
      return kExitOk;
    case WorkerConnection::ServingStatus::kNotServing:
      std::cout << "NOT_SERVING\n";
      return kExitRuntimeFailure;
    case WorkerConnection::ServingStatus::kUnknown:
      break;
  }
  std::cout << "UNKNOWN\n";
  return kExitRuntimeFailure;
}

int RunStop(const ClientOptions& options, double grace_seconds,
            std::optional<double> if_idle_for_seconds) {
  auto connection = Connect(options.address, options);
  if (!connection.ok()) return Fail(Rpc::kStop, options, connection.status());
  const Duration grace = GraceFromSeconds(grace_seconds);
  std::optional<Duration> if_idle_for;
  if (if_idle_for_seconds) {
    if_idle_for = ToDuration(Seconds(*if_idle_for_seconds));
  }
  absl::StatusOr<StopSummary> summary = WithRetries(
      options.attempts, Rpc::kStop,
      [&] { return (*connection)->Stop(grace, options.timeout, if_idle_for); });
  if (!summary.ok()) return Fail(Rpc::kStop, options, summary.status());
  std::cout << "stopped: " << summary->drained << " jobs drained, "
            << summary->cancelled << " cancelled\n";
  return kExitOk;
}

namespace {

// StatusLine is a Status reply as one JSON object.
nlohmann::ordered_json StatusLine(const std::string& address,
                                  const WorkerState& s) {
  nlohmann::ordered_json line;
  line["address"] = address;
  line["version"] = s.version;
  line["uptime_seconds"] = s.uptime_seconds;
  line["idle_seconds"] = s.idle_seconds;
  line["jobs_in_flight"] = s.jobs_in_flight;
  line["max_concurrent_jobs"] = s.max_concurrent_jobs;
  line["job_ids"] = s.job_ids;
  line["other_jobs_in_flight"] = s.other_jobs_in_flight;
  line["jobs_retained"] = s.jobs_retained;
  line["draining"] = s.draining;
  line["retires_at_unix_seconds"] = s.retires_at_unix_seconds;
  line["retirement_rule"] = s.retirement_rule;
  line["scale_in_protected"] = s.scale_in_protected;
  line["identity"] = s.identity;
  return line;
}

// StatusText is a Status reply for a person, a field a line.
std::string StatusText(const std::string& address, const WorkerState& s) {
  std::string jobs = absl::StrCat(s.jobs_in_flight, " of ",
                                  s.max_concurrent_jobs, " in flight");
  if (!s.job_ids.empty()) {
    absl::StrAppend(&jobs, ": ", absl::StrJoin(s.job_ids, ", "));
  }
  if (s.other_jobs_in_flight > 0) {
    absl::StrAppend(&jobs, " (and ", s.other_jobs_in_flight,
                    " of other identities)");
  }
  std::string retires =
      "not while nothing changes (busy, draining, or both rules off)";
  if (!s.retirement_rule.empty()) {
    const double in = s.retires_at_unix_seconds -
                      absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
    retires = absl::StrCat(
        absl::FormatTime("%Y-%m-%dT%H:%M:%SZ",
                         absl::FromUnixSeconds(
                             static_cast<int64_t>(s.retires_at_unix_seconds)),
                         absl::UTCTimeZone()),
        " (in ", absl::StrFormat("%.0f", std::max(in, 0.0)), " s), by ",
        s.retirement_rule == "idle" ? "the idle timeout" : "its max lifetime");
  }
  return absl::StrCat(
      "address   ", address, "\nversion   ", s.version, "\nuptime    ",
      absl::StrFormat("%.1f s", s.uptime_seconds), "\nidle      ",
      absl::StrFormat("%.1f s", s.idle_seconds), "\njobs      ", jobs,
      "\nretained  ", s.jobs_retained, "\ndraining  ",
      s.draining ? "yes: refusing new jobs" : "no", "\nretires   ", retires,
      "\nprotected ", s.scale_in_protected ? "yes" : "no", "\nidentity  ",
      s.identity.empty() ? "(no TLS identity)" : s.identity, "\n");
}

int RunStatus(const ClientOptions& options, bool json) {
  auto connection = Connect(options.address, options);
  if (!connection.ok()) return Fail(Rpc::kStatus, options, connection.status());
  absl::StatusOr<WorkerState> state =
      WithRetries(options.attempts, Rpc::kStatus,
                  [&] { return (*connection)->GetStatus(options.timeout); });
  if (!state.ok()) return Fail(Rpc::kStatus, options, state.status());
  if (json) {
    std::cout << StatusLine(options.address, *state)
                     .dump(-1, ' ', false,
                           nlohmann::json::error_handler_t::replace)
              << "\n";
  } else {
    std::cout << StatusText(options.address, *state);
  }
  return kExitOk;
}

// One worker's answer to a fleet's status.
struct FleetStatus {
  std::string address;
  absl::StatusOr<WorkerState> state;
};

// FleetLine is a fleet status line: a row of the table (text) or one JSON
// object, a failed call's kind and status in place of the state.
std::string FleetLine(const FleetStatus& r, bool json) {
  if (json) {
    nlohmann::ordered_json line;
    if (r.state.ok()) {
      line = StatusLine(r.address, *r.state);
    } else {
      line["address"] = r.address;
      line["error_kind"] = std::string(
          ErrorKindName(ClassifyError(Rpc::kStatus, r.state.status())));
      line["grpc_code"] = absl::StatusCodeToString(r.state.status().code());
      line["message"] = std::string(r.state.status().message());
    }
    return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  if (!r.state.ok()) {
    return absl::StrFormat(
        "%-24s %s: %s", r.address,
        ErrorKindName(ClassifyError(Rpc::kStatus, r.state.status())),
        r.state.status().message());
  }
  const WorkerState& s = *r.state;
  const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  const std::string retires =
      s.retirement_rule.empty()
          ? std::string("-")
          : absl::StrFormat("%.0f s %s",
                            std::max(s.retires_at_unix_seconds - now, 0.0),
                            s.retirement_rule);
  return absl::StrFormat(
      "%-24s %8.1f %3u/%-3u %-8s %-20s %-9s %s", r.address, s.idle_seconds,
      s.jobs_in_flight, s.max_concurrent_jobs, s.draining ? "yes" : "no",
      retires, s.scale_in_protected ? "yes" : "no", s.version);
}

// RunFleetStatus asks every worker of `addresses`, `concurrency` at once,
// and prints each as it answers (a header first, in text); 0 when every
// one answered, 1 otherwise.
int RunFleetStatus(const ClientOptions& options,
                   const std::vector<std::string>& addresses, int concurrency,
                   bool json) {
  if (!json) {
    std::cout << absl::StrFormat("%-24s %8s %7s %-8s %-20s %-9s %s\n",
                                 "ADDRESS", "IDLE", "JOBS", "DRAINING",
                                 "RETIRES IN", "PROTECTED", "VERSION");
  }
  int code = kExitOk;
  FanOut<FleetStatus>(
      addresses, concurrency,
      [&](const std::string& address) {
        FleetStatus r{.address = address,
                      .state = absl::UnknownError("not asked")};
        auto connection = Connect(address, options);
        r.state =
            connection.ok()
                ? WithRetries(
                      options.attempts, Rpc::kStatus,
                      [&] { return (*connection)->GetStatus(options.timeout); })
                : absl::StatusOr<WorkerState>(connection.status());
        return r;
      },
      [&](const FleetStatus& r) {
        std::cout << FleetLine(r, json) << '\n' << std::flush;
        if (!r.state.ok()) code = kExitRuntimeFailure;
      });
  return code;
}

constexpr char kFiveSeconds[] = "deadline in seconds, > 0 (default 5)";

Runner AddIdle(CLI::App& command) {
  auto client = std::make_shared<Client>(&command, kFiveSeconds);
  return [client](const std::vector<std::string>&) {
    auto options = client->Resolve(std::chrono::seconds(5));
    return options ? RunIdle(*options) : kExitUsage;
  };
}

Runner AddHealth(CLI::App& command) {
  struct Flags {
    explicit Flags(CLI::App* command) : client(command, kFiveSeconds) {}
    Client client;
    std::string service;
  };
  auto flags = std::make_shared<Flags>(&command);
  command
      .add_option("--service", flags->service,
                  "ask for this service (default: the whole server; the "
                  "worker also answers for cfdb.worker.v1.Worker)")
      ->type_name("NAME");
  return [flags](const std::vector<std::string>&) {
    auto options = flags->client.Resolve(std::chrono::seconds(5));
    return options ? RunHealth(*options, flags->service) : kExitUsage;
  };
}

Runner AddStop(CLI::App& command) {
  struct Flags {
    explicit Flags(CLI::App* command)
        : client(command,
                 "deadline in seconds, > 0 (default: grace + 60, or 1 day "
                 "when grace < 0)") {}
    Client client;
    std::string grace, if_idle_for;
    CLI::Option* grace_option = nullptr;
    CLI::Option* if_idle_option = nullptr;
  };
  auto flags = std::make_shared<Flags>(&command);
  flags->grace_option = command
                            .add_option("--grace-seconds,--grace", flags->grace,
                                        "drain grace in seconds, required: " +
                                            std::string(kGraceMeaning))
                            ->type_name("SECONDS");
  flags->if_idle_option =
      command
          .add_option("--if-idle-for-seconds", flags->if_idle_for,
                      "stop only if the worker has been idle this long, >= "
                      "0, decided by the worker as it takes the request "
                      "(exit 65 when it keeps serving)")
          ->type_name("SECONDS");
  return [flags](const std::vector<std::string>&) -> int {
    CLI::App* app = flags->client.command;
    // No default: a plain `stop` meaning "cancel everything" surprised.
    if (flags->grace_option->count() == 0) {
      return Usage(
          app, absl::StrCat("--grace-seconds is required: ", kGraceMeaning));
    }
    absl::StatusOr<double> seconds =
        ParseSecondsFlag("--grace-seconds", flags->grace, SecondsRange::kAny);
    if (!seconds.ok()) return Usage(app, seconds.status().message());
    std::optional<double> idle_for;
    if (flags->if_idle_option->count() > 0) {
      absl::StatusOr<double> at_least =
          ParseSecondsFlag("--if-idle-for-seconds", flags->if_idle_for,
                           SecondsRange::kNonNegative);
      if (!at_least.ok()) return Usage(app, at_least.status().message());
      idle_for = *at_least;
    }
    auto options = flags->client.Resolve(StopDeadline(*seconds));
    return options ? RunStop(*options, *seconds, idle_for) : kExitUsage;
  };
}

Runner AddStatus(CLI::App& command) {
  struct Flags {
    explicit Flags(CLI::App* command)
        : client(command, kFiveSeconds), fleet(command, "asked") {}
    Client client;
    FleetFlags fleet;
    std::string format = "text";
  };
  auto flags = std::make_shared<Flags>(&command);
  AddFormatFlag(command, flags->format,
                "text (a field a line) or json (one object)");
  return [flags](const std::vector<std::string>& after) -> int {
    if (absl::Status s = CheckFormat(flags->format); !s.ok()) {
      return Usage(flags->client.command, s.message());
    }
    auto options = flags->client.Resolve(std::chrono::seconds(5));
    if (!options) return kExitUsage;
    const bool json = flags->format == "json";
    if (!flags->fleet.given(after)) return RunStatus(*options, json);
    std::vector<std::string> addresses;
    int concurrency = 1;
    if (absl::Status s = flags->fleet.Gather(after, addresses, concurrency);
        !s.ok()) {
      return GatherFailed(flags->client.command, s);
    }
    return RunFleetStatus(*options, addresses, concurrency, json);
  };
}

}  // namespace

std::vector<Command> ClientCommands() {
  return {
      RpcCommand(Rpc::kIdle, "", &AddIdle),
      RpcCommand(Rpc::kHealth, "[--service NAME] (exit 0 only while SERVING)",
                 &AddHealth),
      RpcCommand(Rpc::kStop, "--grace-seconds S", &AddStop),
      RpcCommand(Rpc::kStatus,
                 "[--format text|json] [ADDRESS... | --addresses-from "
                 "FILE|dns:NAME:PORT]",
                 &AddStatus, /*takes_arguments=*/true)};
}

}  // namespace cfdb::worker::cli
