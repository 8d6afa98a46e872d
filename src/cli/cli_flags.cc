#include "cli/cli_flags.h"

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cfdb/worker/errors.h"
#include "cfdb/worker/exec.h"
#include "cli/fleet_dns.h"
#include "core/errno_text.h"
#include "serve/address.h"
#include "serve/logging.h"
#include "serve/tls_knobs.h"

namespace cfdb::worker::cli {
namespace {

// ReadAddresses appends the addresses of `in` to `out`, one a line (blank
// lines and # comments skipped).
void ReadAddresses(std::istream& in, std::vector<std::string>& out) {
  for (std::string line; std::getline(in, line);) {
    line = std::string(absl::StripAsciiWhitespace(line));
    if (!line.empty() && line[0] != '#') out.push_back(line);
  }
}

// DidYouMean is "; did you mean X?" for the name in `names` closest to
// `given`, or `otherwise`.
std::string DidYouMean(std::string_view given,
                       const std::vector<std::string>& names,
                       std::string_view otherwise) {
  const std::optional<std::string> near = ClosestName(given, names);
  return near ? absl::StrCat("; did you mean ", *near, "?")
              : std::string(otherwise);
}

}  // namespace

Command RpcCommand(Rpc rpc, std::string_view usage,
                   std::function<Runner(CLI::App&)> add, bool takes_arguments) {
  const RpcInfo& info = InfoOf(rpc);
  std::string help(info.summary);
  if (!usage.empty()) {
    absl::StrAppend(&help, ": ", std::string(info.command), " ",
                    std::string(usage));
  }
  return {std::string(info.command), std::move(help), takes_arguments,
          std::move(add)};
}

int Usage(const CLI::App* command, absl::string_view what) {
  std::cerr << "cfdb-worker"
            << (command != nullptr ? " " + command->get_name() : "") << ": "
            << what << "\n";
  return kExitUsage;
}

int GatherFailed(const CLI::App* command, const absl::Status& status) {
  const int code = Usage(command, status.message());
  return absl::IsInvalidArgument(status) ? code
                                         : ExitCodeFor(ErrorKind::kTransient);
}

void KnobOptions::Add(std::span<const Knob* const> knobs) {
  for (const Knob* knob : knobs) {
    const std::string help = KnobHelp(*knob);
    const bool is_switch = knob->type == KnobType::kSwitch;
    values_.emplace_back();
    switches_.emplace_back(false);
    CLI::Option* option =
        is_switch
            ? command_->add_flag(std::string(knob->flag), switches_.back(),
                                 help)
            : command_
                  ->add_option(std::string(knob->flag), values_.back(), help)
                  ->type_name(std::string(knob->metavar));
    knobs_.push_back({knob, option, &values_.back()});
  }
}

KnobValues KnobOptions::Given() const {
  KnobValues given;
  for (const Entry& e : knobs_) {
    if (e.option->count() == 0) continue;
    given[std::string(e.knob->flag)] =
        e.knob->type == KnobType::kSwitch ? "true" : *e.value;
  }
  return given;
}

Client::Client(CLI::App* command, const std::string& timeout_help,
               bool one_address)
    : command(command), knobs(command) {
  for (const Knob* knob : KnobsOf(KnobScope::kClient)) {
    if (one_address || knob->flag != "--address") knobs.Add({&knob, 1});
  }
  knobs.Add(KnobsOf(KnobScope::kTls));
  timeout_option =
      command->add_option("--timeout-seconds,--timeout", timeout, timeout_help)
          ->type_name("SECONDS");
}

std::optional<ClientOptions> Client::Resolve(Duration default_timeout) const {
  (void)SetUpLogging("warn", LogFormat::kText);
  LogLibraryLinesAtDebug();
  const KnobValues given = knobs.Given();
  absl::StatusOr<ClientConfig> config =
      ResolveClientConfig(given, ProcessEnv());
  WipeVariables(SecretVariables(Settings(given, ProcessEnv())));
  if (!config.ok()) {
    Usage(command, config.status().message());
    return std::nullopt;
  }
  absl::StatusOr<Duration> deadline = Timeout(default_timeout);
  if (!deadline.ok()) {
    Usage(command, deadline.status().message());
    return std::nullopt;
  }
  return ClientOptions{config->address, *deadline, config->attempts,
                       config->credentials};
}

absl::StatusOr<Duration> Client::Timeout(Duration fallback) const {
  if (timeout_option->count() == 0) return fallback;
  absl::StatusOr<double> seconds =
      ParseSecondsFlag("--timeout-seconds", timeout, SecondsRange::kPositive);
  if (!seconds.ok()) return seconds.status();
  return ToDuration(Seconds(*seconds));
}

void AddFormatFlag(CLI::App& command, std::string& format,
                   const std::string& help) {
  command.add_option("--format", format, help + "; default text")
      ->type_name("FORMAT");
}

absl::Status CheckFormat(const std::string& format) {
  if (format == "text" || format == "json") return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--format: '", format, "' is not text or json"));
}

DispatchFlags::DispatchFlags(CLI::App* dispatch) {
  dispatch->add_option("--job-id", job.job_id, "job id (default: generated)")
      ->type_name("ID");
  dispatch
      ->add_option("--env", env_entries,
                   "NAME=VALUE for the job's environment (repeatable, one "
                   "each time; the job inherits nothing else)")
      ->type_name("NAME=VALUE");
  dispatch->add_option("--cwd", job.cwd, "the job's working directory")
      ->type_name("DIR");
  dispatch
      ->add_option("--time-limit-seconds,--time-limit", time_limit,
                   "the job's time limit in seconds, >= 0 (default 0: none)")
      ->type_name("SECONDS");
  dispatch->add_flag("--no-stdin", no_stdin,
                     "do not forward standard input to the job");
  dispatch
      ->add_option(
          "--detach-grace-seconds", detach_grace,
          absl::StrCat("how long the job runs on if this command goes away "
                       "without a word (killed, connection lost): 0 cancels "
                       "it at once, < 0 lets it run (default ",
                       DispatchOptions::kDefaultDetachGraceSeconds,
                       "); Ctrl-C cancels it"))
      ->type_name("SECONDS");
  dispatch->add_flag(
      "--detach", job.detach,
      "return once the job is accepted, printing its id, and leave it "
      "running (its detach grace: none unless --detach-grace-seconds)");
  AddFormatFlag(*dispatch, format,
                "with --detach: text (the job id) or json (the id and the "
                "offsets to attach from)");
  dispatch->add_flag("--attach-if-exists", job.attach_if_exists,
                     "if a job of this --job-id runs or is retained, attach "
                     "to it instead of being refused (exit 67)");
  dispatch
      ->add_option("--output-overflow", output_overflow,
                   "when the job's output buffer is full and nobody reads: "
                   "pause (the job waits; default) or drop-oldest (counted)")
      ->type_name("MODE");
  AddKindFlags(dispatch);
}

absl::Status DispatchFlags::Finish(std::vector<std::string> program) {
  if (absl::Status s = job.kind == kExecKind ? FinishExec(std::move(program))
                                             : FinishKind(program);
      !s.ok()) {
    return s;
  }
  if (!detach_grace.empty()) {
    absl::StatusOr<double> grace = ParseSecondsFlag(
        "--detach-grace-seconds", detach_grace, SecondsRange::kAny);
    if (!grace.ok()) return grace.status();
    job.detach_grace_seconds = *grace;
  } else if (job.detach) {
    job.detach_grace_seconds = -1;  // walked away from: no limit
  }
  if (job.detach && job.detach_grace_seconds == 0) {
    return absl::InvalidArgumentError(
        "--detach-grace-seconds: 0 would cancel a --detach job as soon as "
        "dispatch returns");
  }
  if (absl::Status s = CheckFormat(format); !s.ok()) return s;
  if (format == "json" && !job.detach) {
    return absl::InvalidArgumentError(
        "--format: only with --detach (a job's output is printed as it "
        "comes)");
  }
  job.json = format == "json";
  if (output_overflow != "pause" && output_overflow != "drop-oldest") {
    return absl::InvalidArgumentError(
        absl::StrCat("--output-overflow: '", output_overflow,
                     "' is not pause or drop-oldest"));
  }
  job.drop_oldest = output_overflow == "drop-oldest";
  job.read_stdin = !no_stdin;
  return absl::OkStatus();
}

absl::Status DispatchFlags::FinishExec(std::vector<std::string> program) {
  if (payload_option->count() + payload_file_option->count() > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        payload_option->count() > 0 ? "--payload" : "--payload-file",
        ": the exec kind takes no payload; its program comes after --"));
  }
  if (program.empty()) {
    return absl::InvalidArgumentError(
        "no program: give it after --, as in dispatch [FLAGS] -- PROGRAM "
        "[ARGS...]");
  }
  job.argv = std::move(program);
  for (const std::string& entry : env_entries) {
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--env: '", entry, "' is not NAME=VALUE"));
    }
    job.env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  absl::StatusOr<double> limit = ParseSecondsFlag(
      "--time-limit-seconds", time_limit, SecondsRange::kNonNegative);
  if (!limit.ok()) return limit.status();
  job.time_limit_seconds = *limit;
  return absl::OkStatus();
}

void DispatchFlags::AddKindFlags(CLI::App* dispatch) {
  dispatch
      ->add_option("--kind", job.kind,
                   "the job's kind (default exec: the program after --); "
                   "another kind, registered by a program that embeds the "
                   "worker, takes --payload or --payload-file instead")
      ->type_name("KIND");
  payload_option =
      dispatch
          ->add_option("--payload", job.payload,
                       "the payload of a job of another --kind than exec")
          ->type_name("TEXT");
  payload_file_option =
      dispatch
          ->add_option("--payload-file", payload_file,
                       "the payload of a job of another --kind than exec, "
                       "read whole from this file")
          ->type_name("PATH")
          ->excludes(payload_option);
}

absl::Status DispatchFlags::FinishKind(
    const std::vector<std::string>& program) {
  const std::string exec_only = !env_entries.empty() ? "--env"
                                : !job.cwd.empty()   ? "--cwd"
                                : time_limit != "0"  ? "--time-limit-seconds"
                                                     : "";
  if (!exec_only.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        exec_only, ": only for the exec kind, not --kind ", job.kind));
  }
  if (!program.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", program.front(), "' after --: a job of --kind ", job.kind,
        " takes no program; give its input with --payload or --payload-file"));
  }
  if (payload_file_option->count() > 0) {
    std::ifstream in(payload_file, std::ios::binary);
    if (in.is_open()) {
      job.payload.assign(std::istreambuf_iterator<char>(in),
                         std::istreambuf_iterator<char>());
    }
    if (!in.is_open() || in.bad()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--payload-file: cannot read '", payload_file,
                       "': ", ErrnoText(errno)));
    }
  }
  return absl::OkStatus();
}

JobFlags::JobFlags(CLI::App* command, bool offsets) {
  command->add_option("job", job_id, "the job's id")
      ->type_name("JOB_ID")
      ->required();
  if (offsets) {
    command
        ->add_option("--stdout-offset", stdout_offset,
                     "read its stdout from this byte on (default 0)")
        ->type_name("BYTES");
    command
        ->add_option("--stderr-offset", stderr_offset,
                     "read its stderr from this byte on (default 0)")
        ->type_name("BYTES");
    command->add_flag(
        "--take-over", take_over,
        "take the job over: control its flow and, by leaving, its detach "
        "grace; the call that had it ends (exit 68). Default: follow it, "
        "disturbing no one");
  } else {
    command
        ->add_option("--grace-seconds,--grace", grace,
                     "SIGTERM, then SIGKILL after this many seconds, >= 0 "
                     "(0: SIGKILL at once; default 10)")
        ->type_name("SECONDS");
  }
}

absl::StatusOr<StreamOffsets> JobFlags::Offsets() const {
  StreamOffsets from;
  for (auto [flag, text, out] :
       {std::tuple{"--stdout-offset", &stdout_offset, &from.stdout_bytes},
        {"--stderr-offset", &stderr_offset, &from.stderr_bytes}}) {
    absl::StatusOr<int64_t> bytes =
        ParseIntegerFlag(flag, *text, 0, std::numeric_limits<int64_t>::max());
    if (!bytes.ok()) return bytes.status();
    *out = static_cast<uint64_t>(*bytes);
  }
  return from;
}

FleetFlags::FleetFlags(CLI::App* command, std::string_view what)
    : command_name(command->get_name()) {
  command
      ->add_option("--concurrency", concurrency,
                   absl::StrCat("workers ", std::string(what),
                                " at once, 1..4096 (default 64)"))
      ->type_name("COUNT");
  command
      ->add_option("--addresses-from", addresses_from,
                   "a file of addresses, one per line ('-': stdin; blank "
                   "lines and # comments skipped), or dns:NAME:PORT, every "
                   "A and AAAA record of NAME (a headless Service)")
      ->type_name("FILE|dns:NAME:PORT");
  command
      ->add_option("address", addresses,
                   "HOST:PORT or unix:PATH ... ('-': read them from stdin)")
      ->type_name("ADDRESS");
}

absl::Status FleetFlags::Gather(const std::vector<std::string>& more,
                                std::vector<std::string>& out,
                                int& at_once) const {
  absl::StatusOr<int64_t> count =
      ParseIntegerFlag("--concurrency", concurrency, 1, 4096);
  if (!count.ok()) return count.status();
  at_once = static_cast<int>(*count);
  // '-' reads stdin where it stands, as --addresses-from - does.
  std::vector<std::string> given = addresses;
  given.insert(given.end(), more.begin(), more.end());
  for (const std::string& address : given) {
    if (address == "-") {
      ReadAddresses(std::cin, out);
    } else {
      out.push_back(address);
    }
  }
  bool from_dns = false;
  if (addresses_from == "-") {
    ReadAddresses(std::cin, out);
  } else if (absl::StartsWith(addresses_from, kDnsPrefix)) {
    absl::StatusOr<std::vector<std::string>> fleet =
        ResolveFleet(addresses_from);
    if (!fleet.ok()) return fleet.status();
    // A fleet scaled to zero: nothing to do, which is said.
    if (fleet->empty()) {
      std::cerr << "cfdb-worker " << command_name << ": --addresses-from: '"
                << addresses_from << "' has no address records: no workers\n";
    }
    out.insert(out.end(), fleet->begin(), fleet->end());
    from_dns = true;
  } else if (!addresses_from.empty()) {
    std::ifstream file(addresses_from);
    if (!file) {
      return absl::InvalidArgumentError(
          absl::StrCat("--addresses-from: '", addresses_from,
                       "' cannot be read: ", ErrnoText(errno)));
    }
    ReadAddresses(file, out);
  }
  if (out.empty() && !from_dns) {
    return absl::InvalidArgumentError(
        "no addresses (give them as arguments, '-' for stdin, or with "
        "--addresses-from)");
  }
  // As --address is checked (knobs.cc): gRPC would dial port 443.
  for (const std::string& address : out) {
    if (!TargetHasPort(address)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", address, "' has no port (", std::string(kTargetForms), ")"));
    }
  }
  return absl::OkStatus();
}

ReapFlags::ReapFlags(CLI::App* command) : fleet(command, "polled") {
  command
      ->add_option("--idle-threshold-seconds", idle_threshold,
                   "stop workers idle at least this long, >= 0")
      ->type_name("SECONDS")
      ->required();
  command
      ->add_option("--grace-seconds,--grace", grace,
                   absl::StrCat("drain grace of each stop: ", kGraceMeaning,
                                " (default 60)"))
      ->type_name("SECONDS");
  command->add_flag("--dry-run", reap.dry_run, "poll and report, stop nothing");
  AddFormatFlag(*command, format, "text or json (one object a line)");
}

absl::Status ReapFlags::Finish(const std::vector<std::string>& more) {
  absl::StatusOr<double> threshold = ParseSecondsFlag(
      "--idle-threshold-seconds", idle_threshold, SecondsRange::kNonNegative);
  if (!threshold.ok()) return threshold.status();
  reap.idle_threshold_seconds = *threshold;
  absl::StatusOr<double> seconds =
      ParseSecondsFlag("--grace-seconds", grace, SecondsRange::kAny);
  if (!seconds.ok()) return seconds.status();
  reap.grace_seconds = *seconds;
  if (absl::Status s = CheckFormat(format); !s.ok()) return s;
  reap.json = format == "json";
  return fleet.Gather(more, reap.addresses, reap.concurrency);
}

void OneValueEach(CLI::App& app) {
  for (CLI::App* command : app.get_subcommands({})) {
    for (CLI::Option* option : command->get_options()) {
      if (option->nonpositional() && option->get_items_expected_max() > 1) {
        option->allow_extra_args(false);
      }
    }
  }
}

int ParseFailure(CLI::App& app, const CLI::ParseError& e) {
  if (e.get_exit_code() == 0) {
    app.exit(e);
    return kExitOk;
  }
  const std::vector<CLI::App*> parsed = app.get_subcommands();
  CLI::App* command = parsed.empty() ? nullptr : parsed.front();
  const std::vector<std::string> extras =
      command != nullptr ? command->remaining() : app.remaining();
  if (command == nullptr && !extras.empty()) {
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands({}))
      names.push_back(sub->get_name());
    return Usage(
        nullptr,
        absl::StrCat("'", extras.front(), "' is not a command",
                     DidYouMean(extras.front(), names, "; see --help")));
  }
  if (command == nullptr || extras.empty()) return Usage(command, e.what());
  // The first unknown flag, else the first word nothing took.
  auto flag = std::find_if(extras.begin(), extras.end(), [](const auto& x) {
    return absl::StartsWith(x, "-");
  });
  if (flag == extras.end()) {
    return Usage(command,
                 absl::StrCat("'", extras.front(), "' was not expected",
                              command->get_name() == "dispatch"
                                  ? " (the program and its arguments go "
                                    "after --; each --env takes one "
                                    "NAME=VALUE)"
                                  : ""));
  }
  const std::string given = flag->substr(0, flag->find('='));
  std::vector<std::string> names = {"--help"};
  for (const CLI::Option* option : command->get_options()) {
    for (const std::string& name : option->get_lnames())
      names.push_back("--" + name);
  }
  return Usage(command,
               absl::StrCat(given, ": not a flag of ", command->get_name(),
                            DidYouMean(given, names, "; see --help")));
}

}  // namespace cfdb::worker::cli
