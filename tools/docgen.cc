// cfdb-docgen: writes (`write SOURCE_DIR`, what `make generate` runs) or
// checks (`check SOURCE_DIR`, a test) every table the docs show that the
// code holds: the knobs, the RPCs with their method groups, the commands,
// the exit codes, and the Python client's copy of the RPC registry. Each
// table is written once, in the code; a doc holds it between the markers
//
//   <!-- generated: NAME (make generate) -->
//   ...
//   <!-- end generated: NAME -->
//
// and check fails naming every table that differs, with what it should
// read.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cfdb/worker/clock.h"
#include "cfdb/worker/errors.h"
#include "cfdb/worker/rpcs.h"
#include "cfdb/worker/serve.h"
#include "cli/commands.h"
#include "serve/knobs.h"
#include "serve/prometheus_metrics.h"

namespace cfdb::worker {
namespace {

// Generated is one table: the file it lives in, the region's name (empty:
// the whole file) and its text.
struct Generated {
  std::string file;
  std::string region;
  std::string text;
};

std::string RpcTable() {
  std::string table =
      "| RPC | served as | group | command | Python | what it does |\n"
      "| --- | --- | --- | --- | --- | --- |\n";
  for (const RpcInfo& info : kRpcs) {
    std::vector<std::string> methods;
    for (std::string_view m : info.methods) {
      methods.push_back(absl::StrCat("`", std::string(m), "`"));
    }
    absl::StrAppend(&table, "| `", std::string(info.name), "` | ",
                    absl::StrJoin(methods, ", "), " | ",
                    std::string(MethodGroupName(info.group)), " | `",
                    std::string(info.command), "` | `",
                    std::string(info.python), "` | ", std::string(info.summary),
                    " |\n");
  }
  return table;
}

// MetricTable is the Prometheus metrics, from serve/prometheus_metrics.h.
std::string MetricTable() {
  std::string table =
      "| metric | type | labels | what |\n| --- | --- | --- | --- |\n";
  for (const MetricRow& row : kMetricTable) {
    const std::string_view type = row.type == MetricType::kCounter ? "counter"
                                  : row.type == MetricType::kGauge
                                      ? "gauge"
                                      : "histogram";
    std::string labels;
    if (!row.labels.empty()) {
      labels = absl::StrCat("`", std::string(row.labels),
                            "`: ", std::string(row.values));
    }
    absl::StrAppend(&table, "| `", std::string(row.name), "` | ",
                    std::string(type), " | ", labels, " | ",
                    std::string(row.help), " |\n");
  }
  return table;
}

std::string GroupTable() {
  return absl::StrCat(
      "| list | may call |\n| --- | --- |\n",
      "| `--tls-admit-control` (`CFDB_WORKER_TLS_ADMIT_CONTROL`) | every RPC: ",
      RpcsOf(MethodGroup::kControl), ", and the observe ones |\n",
      "| `--tls-admit-observe` (`CFDB_WORKER_TLS_ADMIT_OBSERVE`) | ",
      RpcsOf(MethodGroup::kObserve), " only |\n",
      "| `--tls-admit-admin` (`CFDB_WORKER_TLS_ADMIT_ADMIN`) | every RPC, on "
      "every job: other identities' jobs too |\n");
}

// OwnershipTable is who may do what to whose job, from the registry's
// on_jobs and to_others.
std::string OwnershipTable() {
  std::string table =
      "| RPC | on a job | the identity that dispatched it, an admin | "
      "another identity |\n| --- | --- | --- | --- |\n";
  for (const RpcInfo& info : kRpcs) {
    if (info.on_jobs.empty()) continue;
    absl::StrAppend(&table, "| ", std::string(info.name), " | ",
                    std::string(info.on_jobs), " | allowed | ",
                    std::string(info.to_others), " |\n");
  }
  return table;
}

std::string CommandTable() {
  std::string table = "| command | what it does |\n| --- | --- |\n";
  for (auto part : {&cli::ServeCommands, &cli::ClientCommands,
                    &cli::JobCommands, &cli::ReapCommands}) {
    for (const cli::Command& command : part()) {
      absl::StrAppend(&table, "| `", command.name, "` | ", command.help,
                      " |\n");
    }
  }
  return table;
}

std::string ExitCodeTable() {
  std::string table = "| code | kind | meaning |\n| --- | --- | --- |\n";
  for (const cli::BaseExitCode& base : cli::kBaseExitCodes) {
    absl::StrAppend(&table, "| ", base.code, " | | ", std::string(base.meaning),
                    " |\n");
  }
  std::vector<ErrorKind> kinds(AllErrorKinds().begin(), AllErrorKinds().end());
  std::stable_sort(kinds.begin(), kinds.end(), [](ErrorKind a, ErrorKind b) {
    return ExitCodeFor(a) < ExitCodeFor(b);
  });
  for (const ErrorKind kind : kinds) {
    absl::StrAppend(&table, "| ", ExitCodeFor(kind), " | ",
                    std::string(ErrorKindName(kind)), " | ",
                    std::string(ErrorKindSummary(kind)), " |\n");
  }
  return table;
}

// StopSequenceTable is what follows a drain, with how long each step may
// take: the sums a pod's terminationGracePeriodSeconds or a task's
// StopTimeout must cover.
std::string StopSequenceTable() {
  return absl::StrCat(
      "| after the drain | at most | set by |\n| --- | --- | --- |\n",
      "| cancelled jobs get SIGTERM, then SIGKILL | ",
      ToSeconds(ServeConfig{}.worker.task_kill_grace),
      " s | `--task-kill-grace-seconds` |\n",
      "| calls still open finish (a `Stop` reply on its way out) | ",
      kCallsGrace.count(), " s | fixed |\n",
      "| gRPC's shutdown ends, else the process exits 1 | ",
      kShutdownStall.count(), " s | fixed |\n");
}

std::string Python(bool value) { return value ? "True" : "False"; }

std::string PythonRpcs() {
  std::string out =
      "\"\"\"The worker's RPCs, one row each, as include/cfdb/worker/rpcs.h "
      "has them.\n"
      "Generated by `make generate`; do not edit: a test fails when it "
      "differs.\"\"\"\n"
      "from typing import Dict, NamedTuple, Tuple\n\n\n"
      "class Rpc(NamedTuple):\n"
      "    \"\"\"One RPC: its name in the proto, the methods the worker "
      "serves it as\n"
      "    (admission names them so), its method group (control or "
      "observe), its\n"
      "    CLI command, one line on what it does, and what some\n"
      "    status codes mean for it (errors.kind_of): follows_job, a "
      "failure\n"
      "    after the job was accepted (or attached to) leaves its outcome "
      "unknown;\n"
      "    may_start_job, no answer before the deadline may hide a started "
      "job;\n"
      "    finds_job, NOT_FOUND says no job of that id is there; "
      "conditional,\n"
      "    FAILED_PRECONDITION says the worker kept serving; capability,\n"
      "    UNIMPLEMENTED says the worker predates it.\"\"\"\n"
      "    name: str\n    methods: Tuple[str, ...]\n    group: str\n"
      "    command: str\n    summary: str\n    follows_job: bool\n"
      "    may_start_job: bool\n    finds_job: bool\n    conditional: bool\n"
      "    capability: bool\n\n\n"
      "# Keyed by the name the Python client gives it (errors.classify's "
      "`rpc`).\n"
      "RPCS: Dict[str, Rpc] = {\n";
  for (const RpcInfo& info : kRpcs) {
    std::vector<std::string> methods;
    for (std::string_view m : info.methods) {
      methods.push_back(absl::StrCat("\"", std::string(m), "\""));
    }
    absl::StrAppend(&out, "    \"", std::string(info.python), "\": Rpc(\n",
                    "        name=\"", std::string(info.name), "\",\n",
                    "        methods=(", absl::StrJoin(methods, ", "),
                    methods.size() == 1 ? ",)" : ")", ",\n", "        group=\"",
                    std::string(MethodGroupName(info.group)), "\",\n",
                    "        command=\"", std::string(info.command), "\",\n",
                    "        summary=\"", std::string(info.summary), "\",\n");
    absl::StrAppend(&out, "        follows_job=", Python(info.follows_job),
                    ",\n", "        may_start_job=", Python(info.may_start_job),
                    ",\n", "        finds_job=", Python(info.finds_job), ",\n",
                    "        conditional=", Python(info.conditional), ",\n",
                    "        capability=", Python(info.capability), ",\n",
                    "    ),\n");
  }
  return out + "}\n";
}

std::vector<Generated> AllGenerated() {
  return {
      {"docs/CONFIGURATION.md", "knobs serve", KnobTable(KnobScope::kServe)},
      {"docs/TLS.md", "knobs tls", KnobTable(KnobScope::kTls)},
      {"docs/TLS.md", "method groups", GroupTable()},
      {"docs/TLS.md", "job ownership", OwnershipTable()},
      {"docs/SECURITY.md", "job ownership", OwnershipTable()},
      {"docs/CLI.md", "commands", CommandTable()},
      {"docs/CLI.md", "knobs client", KnobTable(KnobScope::kClient)},
      {"docs/CLI.md", "exit codes", ExitCodeTable()},
      {"docs/DESIGN.md", "rpcs", RpcTable()},
      {"docs/DESIGN.md", "stop sequence", StopSequenceTable()},
      {"docs/METRICS.md", "metrics", MetricTable()},
      {"clients/python/cfdb_worker/_rpcs.py", "", PythonRpcs()},
  };
}

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in),
                     std::istreambuf_iterator<char>());
}

// Fill returns `text` with the region `g` names replaced by its table, or
// an error when the markers are missing.
absl::StatusOr<std::string> Fill(const std::string& text, const Generated& g) {
  if (g.region.empty()) return g.text;
  const std::string begin =
      absl::StrCat("<!-- generated: ", g.region, " (make generate) -->\n");
  const std::string end =
      absl::StrCat("<!-- end generated: ", g.region, " -->");
  const size_t from = text.find(begin);
  const size_t to = from == std::string::npos ? from : text.find(end, from);
  if (to == std::string::npos) {
    return absl::NotFoundError(absl::StrCat(g.file, " has no region '",
                                            g.region, "': put ", begin, end,
                                            " where its table goes"));
  }
  return absl::StrCat(text.substr(0, from + begin.size()), g.text,
                      text.substr(to));
}

// WithoutRegions is `text` with its generated regions left out.
std::string WithoutRegions(std::string text) {
  for (size_t from;
       (from = text.find("<!-- generated: ")) != std::string::npos;) {
    const size_t to = text.find("<!-- end generated: ", from);
    if (to == std::string::npos) break;
    text.erase(from, to + 20 - from);
  }
  return text;
}

// HandListsOfRpcs finds, in the prose of the docs, the template and the
// public headers, a list of RPCs after "may call" (two or more RPC names
// within the sentence): who may call what is the registry's, in the
// generated tables, and a list written by hand goes stale (one said "Idle
// and health only" long after ListJobs joined the observe group).
int HandListsOfRpcs(const std::string& root) {
  std::vector<std::string> files = {"README.md", "cloudformation/workers.yml",
                                    "clients/python/README.md"};
  for (const char* dir : {"docs", "include/cfdb/worker"}) {
    for (const auto& entry :
         std::filesystem::directory_iterator(absl::StrCat(root, "/", dir))) {
      files.push_back(absl::StrCat(dir, "/", entry.path().filename().string()));
    }
  }
  int found = 0;
  for (const std::string& file : files) {
    const std::string text =
        WithoutRegions(Read(absl::StrCat(root, "/", file)));
    for (size_t at = 0; (at = text.find("may call", at)) != std::string::npos;
         ++at) {
      const size_t end = std::min(text.find_first_of(".;", at), at + 160);
      const std::string sentence = text.substr(at, end - at);
      int names = 0;
      for (const RpcInfo& info : kRpcs) {
        const std::string lower = absl::AsciiStrToLower(sentence);
        if (lower.find(absl::AsciiStrToLower(std::string(info.name))) !=
            std::string::npos) {
          ++names;
        }
      }
      if (names >= 2) {
        ++found;
        std::cerr << "cfdb-docgen: " << file << ": '" << sentence
                  << "' lists RPCs by hand: point to docs/TLS.md's table (or "
                     "say the group) instead\n";
      }
    }
  }
  return found;
}

int Run(bool write, const std::string& root) {
  int differ = write ? 0 : HandListsOfRpcs(root);
  for (const Generated& g : AllGenerated()) {
    const std::string path = absl::StrCat(root, "/", g.file);
    const std::string now = Read(path);
    absl::StatusOr<std::string> want = Fill(now, g);
    if (!want.ok()) {
      std::cerr << "cfdb-docgen: " << want.status().message() << "\n";
      ++differ;
      continue;
    }
    if (*want == now) continue;
    if (write) {
      std::ofstream(path, std::ios::binary) << *want;
      std::cout << "cfdb-docgen: wrote " << g.file
                << (g.region.empty() ? "" : ", " + g.region) << "\n";
      continue;
    }
    ++differ;
    std::cerr << "cfdb-docgen: " << g.file
              << (g.region.empty() ? "" : absl::StrCat(": '", g.region, "'"))
              << " differs from the code's table (run `make generate`); it "
                 "should read:\n"
              << g.text << "\n";
  }
  return differ == 0 ? 0 : 1;
}

}  // namespace
}  // namespace cfdb::worker

int main(int argc, char** argv) {
  const std::string mode = argc == 3 ? argv[1] : "";
  if (mode != "write" && mode != "check") {
    std::cerr << "usage: cfdb-docgen write|check SOURCE_DIR\n";
    return 2;
  }
  return cfdb::worker::Run(mode == "write", argv[2]);
}
