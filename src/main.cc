// cfdb-worker: the worker daemon (`serve`) and its client commands.
#include <cmath>
#include <deque>
#include <span>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "cfdb/worker/config.h"
#include "cfdb/worker/log.h"
#include "commands.h"

namespace {

using namespace cfdb::worker;  // NOLINT: a main file

constexpr char kDefaultAddress[] = "127.0.0.1:50051";

// Seconds converts a client command's --timeout; 0 or less means "unset"
// and `fallback` applies.
Duration TimeoutOr(double seconds, Duration fallback) {
  return seconds > 0 ? ToDuration(Seconds(seconds)) : fallback;
}

// KnobOptions registers knobs (flag + variable, resolved in config.cc) as
// options of a command and returns the ones given on the command line.
class KnobOptions {
 public:
  KnobOptions(CLI::App* command, std::span<const Knob> knobs)
      : knobs_(knobs), values_(knobs.size()), switches_(knobs.size()) {
    for (size_t i = 0; i < knobs.size(); ++i) {
      const std::string flag(knobs[i].flag);
      const std::string help = std::string(knobs[i].help) + " [" +
                               std::string(knobs[i].variable) + "]";
      options_.push_back(knobs[i].is_switch
                             ? command->add_flag(flag, switches_[i], help)
                             : command->add_option(flag, values_[i], help));
    }
  }

  FlagValues Given() const {
    FlagValues given;
    for (size_t i = 0; i < knobs_.size(); ++i) {
      if (options_[i]->count() == 0) continue;
      given[std::string(knobs_[i].flag)] =
          knobs_[i].is_switch ? "true" : values_[i];
    }
    return given;
  }

 private:
  std::span<const Knob> knobs_;
  std::vector<std::string> values_;
  std::deque<bool> switches_;  // stable addresses for CLI11
  std::vector<CLI::Option*> options_;
};

// AddClientFlags adds the flags every client command shares.
void AddClientFlags(CLI::App* command, std::string* address, int* attempts) {
  command
      ->add_option("--address", *address,
                   "worker address HOST:PORT (default 127.0.0.1:50051)")
      ->envname("CFDB_WORKER_ADDRESS");
  command
      ->add_option("--attempts", *attempts,
                   "retry transient errors until this many attempts, with a "
                   "backoff from 0.5 s to 10 s (default 1: no retry)")
      ->envname("CFDB_WORKER_ATTEMPTS")
      ->check(CLI::Range(1, 1000));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "cfdb-worker: a gRPC worker that runs jobs, reports idle time, drains "
      "on stop and retires itself when idle"};
  app.require_subcommand(1);

  // serve: every knob is kept as text and resolved (flag > variable >
  // default) and validated in one place, config.cc.
  CLI::App* serve = app.add_subcommand("serve", "serve a worker");
  const KnobOptions serve_knobs(serve, ServeKnobs());

  std::string address = kDefaultAddress;
  int attempts = 1;
  double timeout_seconds = 0;

  CLI::App* idle = app.add_subcommand("idle", "print a worker's idle seconds");
  AddClientFlags(idle, &address, &attempts);
  const KnobOptions idle_tls(idle, TlsKnobs());
  idle->add_option("--timeout", timeout_seconds, "deadline in seconds (default 5)");

  CLI::App* health = app.add_subcommand(
      "health", "exit 0 only if the worker's gRPC health check says SERVING");
  AddClientFlags(health, &address, &attempts);
  health->add_option("--timeout", timeout_seconds, "deadline in seconds (default 5)");
  const KnobOptions health_tls(health, TlsKnobs());

  CLI::App* stop = app.add_subcommand("stop", "stop a worker with a drain grace");
  AddClientFlags(stop, &address, &attempts);
  const KnobOptions stop_tls(stop, TlsKnobs());
  double grace_seconds = 0;
  stop->add_option("--grace", grace_seconds,
                   "drain grace in seconds: 0 cancels now (default), > 0 "
                   "drains up to that long, < 0 drains without limit");
  stop->add_option("--timeout", timeout_seconds,
                   "deadline in seconds (default: grace + 60, or 1 day when "
                   "grace < 0)");

  CLI::App* dispatch =
      app.add_subcommand("dispatch", "run a program on a worker: dispatch -- PROGRAM [ARGS...]");
  AddClientFlags(dispatch, &address, &attempts);
  const KnobOptions dispatch_tls(dispatch, TlsKnobs());
  dispatch->add_option("--timeout", timeout_seconds,
                       "deadline of the whole call in seconds (default none)");
  cli::DispatchOptions job;
  std::vector<std::string> env_entries;
  bool no_stdin = false;
  dispatch->add_option("--job-id", job.job_id, "job id (default: generated)");
  dispatch->add_option("--env", env_entries,
                       "NAME=VALUE for the job's environment (repeatable; the "
                       "job inherits nothing else)");
  dispatch->add_option("--cwd", job.cwd, "the job's working directory");
  dispatch->add_option("--time-limit", job.time_limit_seconds,
                       "the job's time limit in seconds (default none)");
  dispatch->add_flag("--no-stdin", no_stdin,
                     "do not forward standard input to the job");
  dispatch->add_option("program", job.argv, "PROGRAM [ARGS...] after --")
      ->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return cli::kExitUsage;
  }

  if (serve->parsed()) {
    absl::StatusOr<ServeConfig> config =
        ResolveServeConfig(serve_knobs.Given(), ProcessEnv());
    if (!config.ok()) {
      std::cerr << "cfdb-worker serve: " << config.status().message() << "\n";
      return cli::kExitUsage;
    }
    (void)SetUpLogging(config->log_level, config->log_format);
    return cli::RunServe(*config);
  }

  (void)SetUpLogging("warn", LogFormat::kText);
  const KnobOptions& tls = idle->parsed()     ? idle_tls
                           : health->parsed() ? health_tls
                           : stop->parsed()   ? stop_tls
                                              : dispatch_tls;
  absl::StatusOr<Credentials> credentials =
      ResolveCredentials(tls.Given(), ProcessEnv());
  if (!credentials.ok()) {
    std::cerr << "cfdb-worker: " << credentials.status().message() << "\n";
    return cli::kExitUsage;
  }
  cli::ClientOptions client{address, {}, attempts, *credentials};
  if (idle->parsed()) {
    client.timeout = TimeoutOr(timeout_seconds, std::chrono::seconds(5));
    return cli::RunIdle(client);
  }
  if (health->parsed()) {
    client.timeout = TimeoutOr(timeout_seconds, std::chrono::seconds(5));
    return cli::RunHealth(client);
  }
  if (stop->parsed()) {
    if (std::isnan(grace_seconds)) {
      std::cerr << "cfdb-worker stop: --grace: NaN is not a grace\n";
      return cli::kExitUsage;
    }
    client.timeout = TimeoutOr(
        timeout_seconds, grace_seconds < 0
                             ? Duration(std::chrono::hours(24))
                             : ToDuration(Seconds(grace_seconds + 60)));
    return cli::RunStop(client, grace_seconds);
  }
  for (const std::string& entry : env_entries) {
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::cerr << "cfdb-worker dispatch: --env: '" << entry
                << "' is not NAME=VALUE\n";
      return cli::kExitUsage;
    }
    job.env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  if (!std::isfinite(job.time_limit_seconds) || job.time_limit_seconds < 0) {
    std::cerr << "cfdb-worker dispatch: --time-limit: must be a number >= 0\n";
    return cli::kExitUsage;
  }
  job.read_stdin = !no_stdin;
  client.timeout = TimeoutOr(timeout_seconds, Duration::zero());
  return cli::RunDispatch(client, job);
}
