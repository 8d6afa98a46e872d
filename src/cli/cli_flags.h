// The command line of the cfdb-worker binary, on CLI11: each command's
// flags, taken as text and checked with config.h's rules, so that every
// refusal reads "cfdb-worker <command>: <flag>: '<value>' <what is wrong>"
// and exits 2. Part of the binary only (main.cc).
#pragma once

#include <deque>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cli/commands.h"
#include "cli/reap.h"
#include "serve/config.h"
#include "serve/knobs.h"

namespace cfdb::worker::cli {

// What a drain grace means, for stop's --help and its refusal.
inline constexpr char kGraceMeaning[] =
    "0 cancels the jobs in flight now, > 0 lets them finish for up to that "
    "many seconds, < 0 lets them finish without limit";

// Usage reports a refused command line, "cfdb-worker <command>: <what>"
// (`command` null: no command yet), and returns kExitUsage.
int Usage(const CLI::App* command, absl::string_view what);

// GatherFailed reports FleetFlags::Gather's failure as Usage does and
// returns its exit code: kExitUsage for a bad flag (INVALID_ARGUMENT), the
// transient error's for a resolver that failed for now.
int GatherFailed(const CLI::App* command, const absl::Status& status);

// KnobOptions registers knobs (flag + variable, resolved in config.cc) as
// options of a command and returns the ones given on the command line.
class KnobOptions {
 public:
  explicit KnobOptions(CLI::App* command) : command_(command) {}

  void Add(std::span<const Knob* const> knobs);
  KnobValues Given() const;

 private:
  struct Entry {
    const Knob* knob;
    CLI::Option* option;
    const std::string* value;
  };
  CLI::App* command_;
  std::deque<std::string> values_;  // stable addresses for CLI11
  std::deque<bool> switches_;
  std::vector<Entry> knobs_;
};

// Client is what every client subcommand takes: the client and TLS knobs
// and --timeout-seconds.
struct Client {
  CLI::App* command;
  KnobOptions knobs;
  CLI::Option* timeout_option;
  std::string timeout;  // as given, checked by Timeout

  Client(CLI::App* command, const std::string& timeout_help,
         bool one_address = true);

  // Timeout returns the deadline --timeout-seconds gives (> 0), else
  // `fallback`; INVALID_ARGUMENT naming the flag.
  absl::StatusOr<Duration> Timeout(Duration fallback) const;

  // Resolve resolves the knobs (flags, then variables) and the timeout
  // (`default_timeout` when not given), sets up the client's logging (warn,
  // text) and wipes the PEM variables; nullopt after a message on stderr
  // when something is bad.
  std::optional<ClientOptions> Resolve(Duration default_timeout) const;
};

// AddFormatFlag adds `--format FORMAT` (text or json, `help` saying what
// each prints) to `command`, into `format`; CheckFormat refuses a value
// that is neither, with INVALID_ARGUMENT naming the flag.
void AddFormatFlag(CLI::App& command, std::string& format,
                   const std::string& help);
absl::Status CheckFormat(const std::string& format);

// DispatchFlags are dispatch's own flags, beside the client ones; the
// program comes after --.
struct DispatchFlags {
  DispatchOptions job;
  std::vector<std::string> env_entries;
  std::string time_limit = "0";
  std::string detach_grace;
  std::string output_overflow = "pause";
  std::string format = "text";
  bool no_stdin = false;

  explicit DispatchFlags(CLI::App* dispatch);

  // Finish checks what CLI11 does not and fills in the job, whose argv is
  // `program`; INVALID_ARGUMENT naming the flag when a value is bad.
  absl::Status Finish(std::vector<std::string> program);

 private:
  // FinishExec checks an exec job: its program and exec's own flags.
  absl::Status FinishExec(std::vector<std::string> program);
  // --kind, --payload and --payload-file: a job of a kind other than exec,
  // which takes a payload instead of a program and exec's flags.
  void AddKindFlags(CLI::App* dispatch);
  absl::Status FinishKind(const std::vector<std::string>& program);
  std::string payload_file;
  CLI::Option* payload_option = nullptr;
  CLI::Option* payload_file_option = nullptr;
};

// JobFlags are the flags of the commands on one job (attach, cancel): the
// job's id (a positional argument) and their own.
struct JobFlags {
  std::string job_id;
  std::string stdout_offset = "0";
  std::string stderr_offset = "0";
  std::string grace = "10";
  bool take_over = false;

  // For attach: --stdout-offset and --stderr-offset; for cancel:
  // --grace-seconds.
  JobFlags(CLI::App* command, bool offsets);

  // Offsets checks attach's offsets; INVALID_ARGUMENT naming the flag.
  absl::StatusOr<StreamOffsets> Offsets() const;
};

// FleetFlags are the flags of a command over many workers: the addresses
// (arguments, '-' for stdin, --addresses-from FILE or dns:NAME:PORT) and
// --concurrency.
struct FleetFlags {
  std::vector<std::string> addresses;
  std::string addresses_from;
  std::string concurrency = "64";
  std::string command_name;

  // `what` says what is done to each worker at once ("polled").
  FleetFlags(CLI::App* command, std::string_view what);

  // given says whether any address was given (as an argument or a file).
  bool given(const std::vector<std::string>& more) const {
    return !addresses.empty() || !more.empty() || !addresses_from.empty();
  }
  // Gather reads the addresses into `out`: those given, then `more` (after
  // --), '-' among them and --addresses-from - read from stdin, a dns:
  // source resolved (fleet_dns.h); and the concurrency. INVALID_ARGUMENT
  // naming the flag when something is wrong (no address, one without a
  // port, an unreadable file, a malformed dns: source); UNAVAILABLE when
  // the resolver failed for now. A dns: name without records is no
  // workers, not an error.
  absl::Status Gather(const std::vector<std::string>& more,
                      std::vector<std::string>& out, int& at_once) const;
};

// ReapFlags are reap's own flags, beside the client ones.
struct ReapFlags {
  ReapOptions reap;
  FleetFlags fleet;
  std::string idle_threshold;
  std::string grace = "60";
  std::string format = "text";

  explicit ReapFlags(CLI::App* command);

  // Finish checks what CLI11 does not and gathers the addresses
  // (FleetFlags::Gather); INVALID_ARGUMENT naming the flag when something
  // is wrong.
  absl::Status Finish(const std::vector<std::string>& more);
};

// OneValueEach makes every repeatable flag of every command take one value
// each time it is given (--env A=1 --env B=2), as a person expects: CLI11's
// default lets one occurrence take every word up to the next flag.
void OneValueEach(CLI::App& app);

// ParseFailure reports CLI11's refusal of a command line as every other
// refusal is reported (Usage), with "did you mean" for a command or a flag
// close to one that exists, and returns the exit code; --help and
// --version print and return 0.
int ParseFailure(CLI::App& app, const CLI::ParseError& e);

}  // namespace cfdb::worker::cli
