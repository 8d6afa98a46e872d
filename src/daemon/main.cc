// cfdb-worker: the worker daemon (`serve`) and its client commands.
#include <fcntl.h>

#include <cmath>
#include <deque>
#include <fstream>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "daemon/client_calls.h"
#include "daemon/commands.h"
#include "daemon/config.h"
#include "daemon/logging.h"
#include "daemon/reap.h"

namespace {

using namespace cfdb::worker;  // NOLINT: a main file

// KnobOptions registers knobs (flag + variable, resolved in config.cc) as
// options of a command and returns the ones given on the command line.
class KnobOptions {
 public:
  explicit KnobOptions(CLI::App* command) : command_(command) {}

  void Add(std::span<const Knob* const> knobs) {
    for (const Knob* knob : knobs) {
      std::string help(knob->help);
      if (!knob->fallback.empty() && !knob->is_switch) {
        absl::StrAppend(&help, " (default ", knob->fallback, ")");
      }
      absl::StrAppend(&help, " [", std::string(knob->variable), "]");
      values_.emplace_back();
      switches_.emplace_back(false);
      CLI::Option* option =
          knob->is_switch
              ? command_->add_flag(std::string(knob->flag), switches_.back(),
                                   help)
              : command_
                    ->add_option(std::string(knob->flag), values_.back(), help)
                    ->type_name(std::string(knob->type));
      knobs_.push_back({knob, option, &values_.back(), &switches_.back()});
    }
  }

  FlagValues Given() const {
    FlagValues given;
    for (const Entry& e : knobs_) {
      if (e.option->count() == 0) continue;
      given[std::string(e.knob->flag)] = e.knob->is_switch ? "true" : *e.value;
    }
    return given;
  }

 private:
  struct Entry {
    const Knob* knob;
    CLI::Option* option;
    const std::string* value;
    const bool* on;
  };
  CLI::App* command_;
  std::deque<std::string> values_;  // stable addresses for CLI11
  std::deque<bool> switches_;
  std::vector<Entry> knobs_;
};

// TimeoutOr converts a client command's --timeout; 0 or less means "unset"
// and `fallback` applies.
Duration TimeoutOr(double seconds, Duration fallback) {
  return seconds > 0 ? ToDuration(Seconds(seconds)) : fallback;
}

// Client is one client subcommand and what it was given.
struct Client {
  CLI::App* command;
  KnobOptions knobs;
  double timeout_seconds = 0;

  Client(CLI::App& app, const char* name, const char* what,
         const char* timeout_help, bool one_address = true)
      : command(app.add_subcommand(name, what)), knobs(command) {
    knobs.Add(one_address ? ClientKnobs() : ClientKnobs().last(1));
    knobs.Add(TlsKnobs());
    command->add_option("--timeout", timeout_seconds, timeout_help)
        ->type_name("SECONDS");
  }
};

// DispatchFlags are dispatch's own flags, beside the client ones.
struct DispatchFlags {
  cli::DispatchOptions job;
  std::vector<std::string> env_entries;
  bool no_stdin = false;

  explicit DispatchFlags(CLI::App* dispatch) {
    dispatch->add_option("--job-id", job.job_id, "job id (default: generated)")
        ->type_name("ID");
    dispatch
        ->add_option("--env", env_entries,
                     "NAME=VALUE for the job's environment (repeatable; the "
                     "job inherits nothing else)")
        ->type_name("NAME=VALUE");
    dispatch->add_option("--cwd", job.cwd, "the job's working directory")
        ->type_name("DIR");
    dispatch
        ->add_option("--time-limit", job.time_limit_seconds,
                     "the job's time limit in seconds (default none)")
        ->type_name("SECONDS");
    dispatch->add_flag("--no-stdin", no_stdin,
                       "do not forward standard input to the job");
    dispatch->add_option("program", job.argv, "PROGRAM [ARGS...] after --")
        ->required();
  }

  // Finish checks what CLI11 cannot and fills in the job; false (after a
  // message naming the flag) when a value is bad.
  bool Finish() {
    for (const std::string& entry : env_entries) {
      const size_t eq = entry.find('=');
      if (eq == std::string::npos || eq == 0) {
        std::cerr << "cfdb-worker dispatch: --env: '" << entry
                  << "' is not NAME=VALUE\n";
        return false;
      }
      job.env[entry.substr(0, eq)] = entry.substr(eq + 1);
    }
    if (!std::isfinite(job.time_limit_seconds) || job.time_limit_seconds < 0) {
      std::cerr
          << "cfdb-worker dispatch: --time-limit: must be a number >= 0\n";
      return false;
    }
    job.read_stdin = !no_stdin;
    return true;
  }
};

// ReapFlags are reap's own flags, beside the client ones.
struct ReapFlags {
  cli::ReapOptions reap;
  std::vector<std::string> addresses;
  std::string addresses_from;
  std::string format = "text";

  explicit ReapFlags(CLI::App* command) {
    command
        ->add_option("--idle-threshold-seconds", reap.idle_threshold_seconds,
                     "stop workers idle at least this long, >= 0")
        ->type_name("SECONDS")
        ->required();
    command
        ->add_option("--grace-seconds", reap.grace_seconds,
                     "drain grace of each stop (< 0: no limit; default 60)")
        ->type_name("SECONDS");
    command->add_flag("--dry-run", reap.dry_run,
                      "poll and report, stop nothing");
    command->add_option("--format", format, "text or json (one object a line)")
        ->type_name("FORMAT")
        ->check(CLI::IsMember({"text", "json"}));
    command
        ->add_option("--concurrency", reap.concurrency,
                     "workers polled at once (default 64)")
        ->type_name("COUNT")
        ->check(CLI::Range(1, 4096));
    command
        ->add_option("--addresses-from", addresses_from,
                     "a file of addresses, one per line ('-': stdin; blank "
                     "lines and # comments skipped)")
        ->type_name("FILE");
    command->add_option("address", addresses, "HOST:PORT or unix:PATH ...")
        ->type_name("ADDRESS");
  }

  // Finish checks what CLI11 cannot and gathers the addresses; false (after
  // a message) when something is wrong.
  bool Finish() {
    if (!std::isfinite(reap.idle_threshold_seconds) ||
        reap.idle_threshold_seconds < 0 || std::isnan(reap.grace_seconds)) {
      std::cerr << "cfdb-worker reap: --idle-threshold-seconds must be a "
                   "number >= 0, --grace-seconds a number\n";
      return false;
    }
    reap.json = format == "json";
    reap.addresses = addresses;
    if (!addresses_from.empty()) {
      std::ifstream file;
      if (addresses_from != "-") {
        file.open(addresses_from);
        if (!file) {
          std::cerr << "cfdb-worker reap: --addresses-from: cannot read "
                    << addresses_from << "\n";
          return false;
        }
      }
      std::istream& in = addresses_from == "-" ? std::cin : file;
      for (std::string line; std::getline(in, line);) {
        line = std::string(absl::StripAsciiWhitespace(line));
        if (!line.empty() && line[0] != '#') reap.addresses.push_back(line);
      }
    }
    if (reap.addresses.empty()) {
      std::cerr << "cfdb-worker reap: no addresses (give them as arguments or "
                   "with --addresses-from)\n";
      return false;
    }
    return true;
  }
};

int Serve(const KnobOptions& knobs) {
  absl::StatusOr<ServeConfig> config =
      ResolveServeConfig(knobs.Given(), ProcessEnv());
  if (!config.ok()) {
    std::cerr << "cfdb-worker serve: " << config.status().message() << "\n";
    return cli::kExitUsage;
  }
  WipeVariables(SecretVariables(knobs.Given(), ProcessEnv()));
  (void)SetUpLogging(config->log_level, config->log_format);
  return cli::RunServe(*config);
}

// ResolveClient resolves a client command's knobs; nullopt (after a
// message) when one is bad.
std::optional<cli::ClientOptions> ResolveClient(const Client& client,
                                                Duration default_timeout) {
  absl::StatusOr<ClientConfig> config =
      ResolveClientConfig(client.knobs.Given(), ProcessEnv());
  WipeVariables(SecretVariables(client.knobs.Given(), ProcessEnv()));
  if (!config.ok()) {
    std::cerr << "cfdb-worker " << client.command->get_name() << ": "
              << config.status().message() << "\n";
    return std::nullopt;
  }
  return cli::ClientOptions{config->address,
                            TimeoutOr(client.timeout_seconds, default_timeout),
                            config->attempts, config->credentials};
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
              "deadline in seconds (default 5)");
  Client health(app, "health",
                "exit 0 only if the worker's gRPC health check says SERVING",
                "deadline in seconds (default 5)");
  std::string health_service;
  health.command
      ->add_option("--service", health_service,
                   "ask for this service (default: the whole server; the "
                   "worker also answers for cfdb.worker.v1.Worker)")
      ->type_name("NAME");
  Client stop(
      app, "stop", "stop a worker with a drain grace",
      "deadline in seconds (default: grace + 60, or 1 day when grace < 0)");
  double grace_seconds = 0;
  stop.command
      ->add_option("--grace", grace_seconds,
                   "drain grace in seconds: 0 cancels now (default), > 0 "
                   "drains up to that long, < 0 drains without limit")
      ->type_name("SECONDS");
  Client dispatch(app, "dispatch",
                  "run a program on a worker: dispatch -- PROGRAM [ARGS...]",
                  "deadline of the whole call in seconds (default none)");
  DispatchFlags job(dispatch.command);
  Client reap(app, "reap",
              "poll many workers and stop those idle past a threshold: reap "
              "--idle-threshold-seconds S ADDRESS...",
              "deadline of each idle poll in seconds (default 5)",
              /*one_address=*/false);
  ReapFlags reap_flags(reap.command);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? cli::kExitOk : cli::kExitUsage;
  }

  if (serve->parsed()) return Serve(serve_knobs);
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
    if (std::isnan(grace_seconds)) {
      std::cerr << "cfdb-worker stop: --grace: NaN is not a grace\n";
      return cli::kExitUsage;
    }
    auto options = ResolveClient(stop, cli::StopDeadline(grace_seconds));
    return options ? cli::RunStop(*options, grace_seconds) : cli::kExitUsage;
  }
  if (reap.command->parsed()) {
    auto options = ResolveClient(reap, std::chrono::seconds(5));
    if (!options || !reap_flags.Finish()) return cli::kExitUsage;
    reap_flags.reap.client = *options;
    return cli::RunReap(reap_flags.reap);
  }
  auto options = ResolveClient(dispatch, Duration::zero());
  if (!options || !job.Finish()) return cli::kExitUsage;
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
