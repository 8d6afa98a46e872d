// cfdb-worker: the worker daemon (`serve`) and its client commands.
#include <fcntl.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "cfdb/worker/serve.h"
#include "daemon/cli_flags.h"
#include "daemon/client_calls.h"
#include "daemon/commands.h"
#include "daemon/config.h"
#include "daemon/logging.h"
#include "daemon/reap.h"

namespace {

using namespace cfdb::worker;       // NOLINT: a main file
using namespace cfdb::worker::cli;  // NOLINT: as above

// ServeCommand runs the worker (serve.h) with the flags given; a refused
// configuration is said here, everything else in the log.
int ServeCommand(const KnobOptions& knobs) {
  const absl::Status served =
      cfdb::worker::Serve({.flags = knobs.Given()}, /*register_kinds=*/{});
  if (absl::IsInvalidArgument(served)) {
    std::cerr << "cfdb-worker serve: " << served.message() << "\n";
  }
  return ServeExitCode(served);
}

// ResolveClient resolves a client command's knobs and its --timeout-seconds
// (`default_timeout` when not given); nullopt (after a message) when one is
// bad.
std::optional<cli::ClientOptions> ResolveClient(const Client& client,
                                                Duration default_timeout) {
  absl::StatusOr<ClientConfig> config =
      ResolveClientConfig(client.knobs.Given(), ProcessEnv());
  WipeVariables(SecretVariables(client.knobs.Given(), ProcessEnv()));
  if (!config.ok()) {
    Usage(client.command, config.status().message());
    return std::nullopt;
  }
  absl::StatusOr<Duration> timeout = client.Timeout(default_timeout);
  if (!timeout.ok()) {
    Usage(client.command, timeout.status().message());
    return std::nullopt;
  }
  return cli::ClientOptions{config->address, *timeout, config->attempts,
                            config->credentials};
}

int Main(int argc, char** argv) {
  CLI::App app{
      "cfdb-worker: a gRPC worker that runs jobs, reports idle time, drains "
      "on stop and retires itself when idle"};
  app.require_subcommand(1);
  app.add_flag_callback(
      "--version",
      [] {
        std::cout << "cfdb-worker " << CFDB_WORKER_VERSION << "\n";
        throw CLI::Success();
      },
      "print the version and exit");

  CLI::App* serve = app.add_subcommand("serve", "serve a worker");
  KnobOptions serve_knobs(serve);
  serve_knobs.Add(ServeKnobs());

  Client idle(app, "idle", "print a worker's idle seconds",
              "deadline in seconds, > 0 (default 5)");
  Client health(app, "health",
                "exit 0 only if the worker's gRPC health check says SERVING",
                "deadline in seconds, > 0 (default 5)");
  std::string health_service;
  health.command
      ->add_option("--service", health_service,
                   "ask for this service (default: the whole server; the "
                   "worker also answers for cfdb.worker.v1.Worker)")
      ->type_name("NAME");
  Client stop(app, "stop",
              "stop a worker with a drain grace: stop --grace-seconds S",
              "deadline in seconds, > 0 (default: grace + 60, or 1 day when "
              "grace < 0)");
  std::string grace;
  CLI::Option* grace_option =
      stop.command
          ->add_option(
              "--grace-seconds,--grace", grace,
              "drain grace in seconds, required: " + std::string(kGraceMeaning))
          ->type_name("SECONDS");
  std::string if_idle_for;
  CLI::Option* if_idle_option =
      stop.command
          ->add_option("--if-idle-for-seconds", if_idle_for,
                       "stop only if the worker has been idle this long, >= "
                       "0, decided by the worker as it takes the request "
                       "(exit 65 when it keeps serving)")
          ->type_name("SECONDS");
  Client dispatch(app, "dispatch",
                  "run a program on a worker: dispatch [FLAGS] -- PROGRAM "
                  "[ARGS...]",
                  "deadline of the whole call in seconds, > 0 (default none)");
  DispatchFlags job(dispatch.command);
  Client jobs(app, "jobs",
              "list the jobs a worker runs or holds results of: jobs "
              "[--format text|json]",
              "deadline in seconds, > 0 (default 5)");
  std::string jobs_format = "text";
  jobs.command
      ->add_option("--format", jobs_format,
                   "text (a table) or json (one object a line; default text)")
      ->type_name("FORMAT");
  Client attach(app, "attach",
                "read a job's output again and wait for its end: attach "
                "JOB_ID (exit codes as dispatch)",
                "deadline of the whole call in seconds, > 0 (default none)");
  JobFlags attach_flags(attach.command, /*offsets=*/true);
  Client cancel(app, "cancel",
                "cancel one job and print how it ended: cancel JOB_ID "
                "[--grace-seconds S]",
                "deadline in seconds, > 0 (default: grace + 60)");
  JobFlags cancel_flags(cancel.command, /*offsets=*/false);
  Client reap(app, "reap",
              "poll many workers and stop those idle past a threshold: reap "
              "--idle-threshold-seconds S ADDRESS... ('-': from stdin)",
              "deadline of each idle poll in seconds, > 0 (default 5)",
              /*one_address=*/false);
  ReapFlags reap_flags(reap.command);
  OneValueEach(app);

  // Everything after the first "--" is the command's arguments (dispatch:
  // the program and its argv; reap: addresses), never a flag nor a flag's
  // value, whatever flag comes before it: CLI11 sees only what precedes it.
  int flags_end = 1;
  while (flags_end < argc && std::string_view(argv[flags_end]) != "--") {
    ++flags_end;
  }
  const std::vector<std::string> after(argv + std::min(flags_end + 1, argc),
                                       argv + argc);
  try {
    app.parse(flags_end, argv);
  } catch (const CLI::ParseError& e) {
    return ParseFailure(app, e);
  }

  if (serve->parsed() || idle.command->parsed() || health.command->parsed() ||
      stop.command->parsed() || jobs.command->parsed() ||
      attach.command->parsed() || cancel.command->parsed()) {
    if (!after.empty()) {
      return Usage(app.get_subcommands().front(),
                   absl::StrCat("takes no arguments, and '", after.front(),
                                "' came after --"));
    }
  }
  if (serve->parsed()) return ServeCommand(serve_knobs);
  (void)SetUpLogging("warn", LogFormat::kText);
  if (idle.command->parsed()) {
    auto options = ResolveClient(idle, std::chrono::seconds(5));
    return options ? cli::RunIdle(*options) : cli::kExitUsage;
  }
  if (health.command->parsed()) {
    auto options = ResolveClient(health, std::chrono::seconds(5));
    return options ? cli::RunHealth(*options, health_service) : cli::kExitUsage;
  }
  if (stop.command->parsed()) {
    // No default: a plain `stop` meaning "cancel everything" surprised.
    if (grace_option->count() == 0) {
      return Usage(stop.command, absl::StrCat("--grace-seconds is required: ",
                                              kGraceMeaning));
    }
    absl::StatusOr<double> seconds =
        ParseSecondsFlag("--grace-seconds", grace, SecondsRange::kAny);
    if (!seconds.ok()) return Usage(stop.command, seconds.status().message());
    std::optional<double> idle_for;
    if (if_idle_option->count() > 0) {
      absl::StatusOr<double> at_least = ParseSecondsFlag(
          "--if-idle-for-seconds", if_idle_for, SecondsRange::kNonNegative);
      if (!at_least.ok()) {
        return Usage(stop.command, at_least.status().message());
      }
      idle_for = *at_least;
    }
    auto options = ResolveClient(stop, cli::StopDeadline(*seconds));
    return options ? cli::RunStop(*options, *seconds, idle_for)
                   : cli::kExitUsage;
  }
  if (jobs.command->parsed()) {
    if (jobs_format != "text" && jobs_format != "json") {
      return Usage(jobs.command, absl::StrCat("--format: '", jobs_format,
                                              "' is not text or json"));
    }
    auto options = ResolveClient(jobs, std::chrono::seconds(5));
    return options ? cli::RunJobs(*options, jobs_format == "json")
                   : cli::kExitUsage;
  }
  if (attach.command->parsed()) {
    absl::StatusOr<StreamOffsets> from = attach_flags.Offsets();
    if (!from.ok()) return Usage(attach.command, from.status().message());
    auto options = ResolveClient(attach, Duration::zero());
    return options ? cli::RunAttach(*options, attach_flags.job_id, *from)
                   : cli::kExitUsage;
  }
  if (cancel.command->parsed()) {
    absl::StatusOr<double> seconds = ParseSecondsFlag(
        "--grace-seconds", cancel_flags.grace, SecondsRange::kNonNegative);
    if (!seconds.ok()) return Usage(cancel.command, seconds.status().message());
    auto options = ResolveClient(cancel, cli::StopDeadline(*seconds));
    return options ? cli::RunCancel(*options, cancel_flags.job_id, *seconds)
                   : cli::kExitUsage;
  }
  if (reap.command->parsed()) {
    auto options = ResolveClient(reap, std::chrono::seconds(5));
    if (!options) return cli::kExitUsage;
    if (absl::Status s = reap_flags.Finish(after); !s.ok()) {
      return Usage(reap.command, s.message());
    }
    reap_flags.reap.client = *options;
    return cli::RunReap(reap_flags.reap);
  }
  auto options = ResolveClient(dispatch, Duration::zero());
  if (!options) return cli::kExitUsage;
  if (absl::Status s = job.Finish(after); !s.ok()) {
    return Usage(dispatch.command, s.message());
  }
  return cli::RunDispatch(*options, job.job);
}

}  // namespace

int main(int argc, char** argv) {
  // A standard descriptor started closed (`<&-`) would be the next one
  // opened, a socket or an eventfd read as stdin or written as output: it
  // reads as empty and discards instead, from /dev/null. (One that gRPC's
  // libraries took before main is found by `dispatch`, by its flags.)
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) == -1 &&
        open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY) != fd) {
      return cli::kExitRuntimeFailure;
    }
  }
  try {
    return Main(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "cfdb-worker: " << e.what() << "\n";
    return cli::kExitRuntimeFailure;
  }
}
