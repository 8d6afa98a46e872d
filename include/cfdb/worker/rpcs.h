// The worker's RPCs, one row each: the registry that admission, the
// classification of failed calls (errors.h), the CLI's commands, the Python
// client's table (clients/python/cfdb_worker/_rpcs.py, generated from this
// one by `make generate`) and the docs' tables derive from. A new RPC is a
// value of Rpc and its row in kRpcs; docs/DESIGN.md has the whole recipe.
//
//   const RpcInfo& info = InfoOf(Rpc::kCancel);
//   info.name;       // "Cancel", as worker.proto names it
//   info.group;      // MethodGroup::kControl: admission's list
//   info.finds_job;  // true: NOT_FOUND says no job of that id is there
//
// Thread-safe: constant data.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace cfdb::worker {

// Rpc names the worker's RPCs, because a code's meaning depends on the call
// (ClassifyError). Its values are kRpcs' rows, in order.
enum class Rpc {
  kIdle,
  kStop,
  kDispatch,
  kHealth,
  kAttach,
  kListJobs,
  kCancel,
  kStatus,
};

// MethodGroup is what an RPC does, for admission (ServerOptions::admit):
// control changes what runs; observe only reads. An identity on the
// control list may call both groups, one on the observe list observe only.
enum class MethodGroup { kControl, kObserve };
inline constexpr std::size_t kMethodGroupCount = 2;

// RpcInfo is one RPC as every part of the project names and treats it.
struct RpcInfo {
  Rpc rpc;
  // Its name in cfdb.worker.v1.Worker (proto/cfdb/worker/v1/worker.proto);
  // "Health" for gRPC's grpc.health.v1.Health.
  std::string_view name;
  // Every method the worker serves it as, as admission and logs name them:
  // the first is `name` (but for Health, a service of two methods).
  std::span<const std::string_view> methods;
  MethodGroup group;
  // The CLI command that calls it, and the name the Python client gives it
  // (errors.classify's `rpc`).
  std::string_view command;
  std::string_view python;
  // What it does, in one line, for --help and the docs.
  std::string_view summary;
  // What it does to a job of the worker's, by its id, if anything (the
  // docs' ownership table), and what an identity that does not own the
  // job gets under mutual TLS (JobCaller): a job is its dispatcher's and
  // the admin identities' only.
  std::string_view on_jobs;
  std::string_view to_others;
  // What some outcomes mean for it (ClassifyError):
  // a failure after the job was accepted (or attached to) leaves the job's
  // outcome unknown, never "nothing started";
  bool follows_job = false;
  // no answer before the deadline may hide a job it started, and a stream
  // lost on the way may have been accepted (MayHaveBeenAccepted);
  bool may_start_job = false;
  // NOT_FOUND says no job of that id runs or is retained (not a fault);
  bool finds_job = false;
  // FAILED_PRECONDITION says its condition did not hold and the worker
  // keeps serving (Stop with if_idle_for);
  bool conditional = false;
  // UNIMPLEMENTED says the worker predates it: a capability signal, never
  // a reason to evict the worker.
  bool capability = false;
};

namespace rpc_methods {
inline constexpr std::string_view kIdle[] = {"Idle", "wool idle"};
inline constexpr std::string_view kStop[] = {"Stop", "wool stop"};
inline constexpr std::string_view kDispatch[] = {"Dispatch", "DispatchStream"};
inline constexpr std::string_view kHealth[] = {"Health/Check", "Health/Watch"};
inline constexpr std::string_view kAttach[] = {"Attach"};
inline constexpr std::string_view kListJobs[] = {"ListJobs"};
inline constexpr std::string_view kCancel[] = {"Cancel"};
inline constexpr std::string_view kStatus[] = {"Status"};
}  // namespace rpc_methods

// kRpcs is the registry: one row per Rpc, in the enum's order.
inline constexpr RpcInfo kRpcs[] = {
    {.rpc = Rpc::kIdle,
     .name = "Idle",
     .methods = rpc_methods::kIdle,
     .group = MethodGroup::kObserve,
     .command = "idle",
     .python = "idle",
     .summary = "seconds since the docket last emptied (0 while busy)",
     .capability = true},
    {.rpc = Rpc::kStop,
     .name = "Stop",
     .methods = rpc_methods::kStop,
     .group = MethodGroup::kControl,
     .command = "stop",
     .python = "stop",
     .summary = "drain and stop, with a grace; or only if idle long enough",
     .conditional = true},
    {.rpc = Rpc::kDispatch,
     .name = "Dispatch",
     .methods = rpc_methods::kDispatch,
     .group = MethodGroup::kControl,
     .command = "dispatch",
     .python = "dispatch",
     .summary = "run a job and stream its events (DispatchStream: and stdin)",
     .on_jobs = "with attach_if_exists: follow the job of that id",
     .to_others = "PERMISSION_DENIED (without attach_if_exists: "
                  "ALREADY_EXISTS, as ids are unique per worker)",
     .follows_job = true,
     .may_start_job = true},
    {.rpc = Rpc::kHealth,
     .name = "Health",
     .methods = rpc_methods::kHealth,
     .group = MethodGroup::kObserve,
     .command = "health",
     .python = "health",
     .summary = "gRPC's standard health check (grpc.health.v1.Health)"},
    {.rpc = Rpc::kAttach,
     .name = "Attach",
     .methods = rpc_methods::kAttach,
     .group = MethodGroup::kControl,
     .command = "attach",
     .python = "attach",
     .summary = "read a job's output again from offsets and wait for its end",
     .on_jobs = "follow it, or take it over (take_over)",
     .to_others = "PERMISSION_DENIED",
     .follows_job = true,
     .finds_job = true},
    {.rpc = Rpc::kListJobs,
     .name = "ListJobs",
     .methods = rpc_methods::kListJobs,
     .group = MethodGroup::kObserve,
     .command = "jobs",
     .python = "jobs",
     .summary = "list the jobs the worker runs or holds the results of",
     .on_jobs = "list it: id, client, program, state, byte counts, outcome",
     .to_others = "not listed: only the number of such jobs"},
    {.rpc = Rpc::kCancel,
     .name = "Cancel",
     .methods = rpc_methods::kCancel,
     .group = MethodGroup::kControl,
     .command = "cancel",
     .python = "cancel",
     .summary = "cancel one job and answer with how it ended",
     .on_jobs = "cancel it, and read its outcome",
     .to_others = "PERMISSION_DENIED",
     .finds_job = true},
    {.rpc = Rpc::kStatus,
     .name = "Status",
     .methods = rpc_methods::kStatus,
     .group = MethodGroup::kObserve,
     .command = "status",
     .python = "status",
     .summary = "the worker's state: idle, jobs, drain, when it retires",
     .on_jobs = "name it among the jobs in flight",
     .to_others = "not named: only the number of such jobs"},
};

// InfoOf returns the row of `rpc`.
constexpr const RpcInfo& InfoOf(Rpc rpc) {
  return kRpcs[static_cast<int>(rpc)];
}

// MethodGroupName returns "control" or "observe".
constexpr std::string_view MethodGroupName(MethodGroup group) {
  return group == MethodGroup::kControl ? "control" : "observe";
}

// RpcsOf returns the names of the RPCs of `group` in the registry's order,
// as prose: "Idle, Health and ListJobs".
inline std::string RpcsOf(MethodGroup group) {
  std::string out;
  std::string_view last;
  for (const RpcInfo& info : kRpcs) {
    if (info.group != group) continue;
    if (!last.empty()) (out += out.empty() ? "" : ", ") += last;
    last = info.name;
  }
  if (out.empty()) return std::string(last);
  return (out += " and ") += last;
}

namespace rpcs_internal {
constexpr bool InEnumOrder() {
  for (int i = 0; i < static_cast<int>(std::size(kRpcs)); ++i) {
    if (static_cast<int>(kRpcs[i].rpc) != i) return false;
    if (kRpcs[i].methods.empty()) return false;
  }
  return true;
}
static_assert(InEnumOrder(), "kRpcs: one row per Rpc, in the enum's order");
}  // namespace rpcs_internal

}  // namespace cfdb::worker
