// The subcommands of the cfdb-worker binary: a table of commands (name,
// help, flags, run), which main.cc dispatches. Each file that runs commands
// lists its own (ClientCommands, JobCommands, ...); a command that calls
// one RPC takes its name and summary from the registry (cfdb/worker/rpcs.h).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "cfdb/worker/clock.h"
#include "cfdb/worker/credentials.h"
#include "cfdb/worker/exec.h"
#include "cfdb/worker/job_journal.h"
#include "cfdb/worker/rpcs.h"
#include "cfdb/worker/serve.h"
#include "serve/config.h"

namespace cfdb::worker::cli {

// BaseExitCode is an exit code every command shares, with what it means;
// the client commands' others come from their error kinds (errors.h).
struct BaseExitCode {
  int code;
  std::string_view meaning;
};
inline constexpr BaseExitCode kBaseExitCodes[] = {
    {kExitOk,
     "success (`serve`: the worker retired as designed: idle, max lifetime, "
     "signal or `Stop`; `health`: SERVING)"},
    {kExitRuntimeFailure,
     "runtime failure (`serve`: the port is in use or cannot be bound, or "
     "the listener was lost and the worker drained and left; `health`: the "
     "worker answered NOT_SERVING)"},
    {kExitUsage,
     "bad flag or variable: `cfdb-worker <command>: <flag>: '<value>' <what "
     "is wrong>` (an unknown flag gets \"did you mean\")"},
};

// Runner runs a command whose flags parsed, with the words that came after
// "--" (the program of dispatch, addresses of reap), and returns its exit
// code.
using Runner = std::function<int(const std::vector<std::string>& after)>;

// Command is one subcommand: `add` registers its flags on its CLI11
// subcommand and returns how to run it once they parsed.
struct Command {
  std::string name;
  std::string help;
  // Words after "--" are its arguments; without, they are refused.
  bool takes_arguments = false;
  std::function<Runner(CLI::App& command)> add;
};

// RpcCommand is the command that calls `rpc`: named and summarised by the
// registry, its usage (may be empty) after its name in the help line.
Command RpcCommand(Rpc rpc, std::string_view usage,
                   std::function<Runner(CLI::App&)> add,
                   bool takes_arguments = false);

// The commands, by the file that runs them, in the order --help lists them:
// serve (main.cc), idle, health and stop (client_commands.cc), dispatch,
// jobs, attach and cancel (job_commands.cc), reap (reap.cc).
std::vector<Command> ServeCommands();
std::vector<Command> ClientCommands();
std::vector<Command> JobCommands();
std::vector<Command> ReapCommands();

struct ClientOptions {
  std::string address;
  Duration timeout{};
  // Calls failing with a transient error are retried, with a backoff, until
  // this many attempts were made (>= 1).
  int attempts = 1;
  Credentials credentials;
};

int RunIdle(const ClientOptions& options);
// RunHealth exits 0 only when the worker answers SERVING for `service`
// (empty: the whole server), 1 when it answers anything else; RPC failures
// exit as in errors.h (an unknown service is NOT_FOUND: 76).
int RunHealth(const ClientOptions& options, const std::string& service);
// RunStop stops the worker with `grace_seconds`; with `if_idle_for_seconds`,
// only if it has been idle that long (65, "still busy", when it keeps
// serving).
int RunStop(const ClientOptions& options, double grace_seconds,
            std::optional<double> if_idle_for_seconds = std::nullopt);

struct DispatchOptions {
  std::string job_id;  // empty: generated
  // The job's kind: exec runs `argv`; another kind (one a program that
  // embeds the worker registered) gets `payload`.
  std::string kind = kExecKind;
  std::string payload;
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::string cwd;
  double time_limit_seconds = 0;
  bool read_stdin = true;
  // How long the job runs on if this command goes away without a word
  // (killed, its connection lost): JobRequest::detach_grace. A SIGINT,
  // SIGTERM or SIGHUP cancels the job instead.
  double detach_grace_seconds = kDefaultDetachGraceSeconds;
  bool attach_if_exists = false;
  bool drop_oldest = false;
  // --detach: return once the job is accepted, printing its id (`json`:
  // a JSON object with the offsets to attach from), and leave it running.
  bool detach = false;
  bool json = false;

  // The command's default detach grace: long enough to come back after a
  // dropped connection, short enough that a job a vanished caller left
  // behind does not run on for long.
  static constexpr double kDefaultDetachGraceSeconds = 30;
};

// RunDispatch runs a job and prints its output as it comes (with --detach:
// prints its id once accepted and exits 0, the job running on); after a lost
// stream it attaches again (Attach, from the offsets it got to) with a
// backoff, for up to the job's detach grace (at least 10 s, 60 s for one
// without limit) and within the timeout; a signal cancels the job (Cancel)
// and exits 128 + the signal once it has ended. Exits with the job's status
// or the error's code (errors.h).
int RunDispatch(const ClientOptions& options, const DispatchOptions& dispatch);

// RunAttach attaches to job `job_id` from `from` (following it, or taking
// it over with `take_over`) and prints its output and outcome as
// RunDispatch does (exit codes alike; 66 for an unknown job, 68 when
// another call takes it over).
int RunAttach(const ClientOptions& options, const std::string& job_id,
              StreamOffsets from, bool take_over);

// RunJobs lists the worker's jobs: a table, or one JSON object per job.
int RunJobs(const ClientOptions& options, bool json);

// RunCancel cancels job `job_id` (SIGTERM, SIGKILL after `grace_seconds`)
// and prints how it ended; 0 once it has ended, 66 for an unknown job.
int RunCancel(const ClientOptions& options, const std::string& job_id,
              double grace_seconds);

}  // namespace cfdb::worker::cli
