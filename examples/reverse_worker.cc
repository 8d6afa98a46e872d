// reverse_worker: a program that embeds the worker, registers a job kind of
// its own and serves it as `cfdb-worker serve` would, idle retirement and
// all (cfdb/worker/serve.h).
//
//   reverse_worker --port 50052 --idle-timeout-seconds 60 &
//   cfdb-worker dispatch --address 127.0.0.1:50052 --kind reverse
//     --payload hello                               # prints "olleh"
//
// Its arguments are serve's flags, each with a value ("--wool-compat true");
// the CFDB_WORKER_* variables work as they do for the binary.
#include <algorithm>
#include <iostream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cfdb/worker/job.h"
#include "cfdb/worker/serve.h"
#include "cfdb/worker/worker.h"

namespace {

// kMaxPayloadBytes bounds what the reverse kind takes.
constexpr std::size_t kMaxPayloadBytes = 1 << 20;

// ReverseKind writes its payload back to the client, last byte first.
cfdb::worker::JobKind ReverseKind() {
  return {
      .validate =
          [](const cfdb::worker::JobRequest& request) {
            if (request.payload.size() > kMaxPayloadBytes) {
              return absl::InvalidArgumentError(
                  absl::StrCat("payload: ", request.payload.size(),
                               " bytes, more than ", kMaxPayloadBytes));
            }
            return absl::OkStatus();
          },
      .run =
          [](cfdb::worker::JobContext& context) {
            std::string reversed = context.request().payload;
            std::reverse(reversed.begin(), reversed.end());
            if (context.Emit(cfdb::worker::OutputStream::kStdout, reversed) ==
                cfdb::worker::JobContext::EmitResult::kDropped) {
              return cfdb::worker::JobOutcome::Failed(
                  cfdb::worker::JobOutcome::Failure::kCancelled,
                  "the client went away");
            }
            return cfdb::worker::JobOutcome::Exited(0);
          },
  };
}

}  // namespace

int main(int argc, char** argv) {
  // Serve's flags and CFDB_WORKER_* variables, as the binary takes them;
  // by default a worker that retires after a minute idle.
  cfdb::worker::KnobValues flags = {{"--idle-timeout-seconds", "60"}};
  if (argc % 2 != 1) {
    std::cerr << "reverse_worker: give serve's flags each with a value\n";
    return 2;
  }
  for (int i = 1; i + 1 < argc; i += 2) flags[argv[i]] = argv[i + 1];
  absl::StatusOr<cfdb::worker::ServeConfig> config =
      cfdb::worker::ServeConfigFromFlags(flags);
  if (!config.ok()) {
    std::cerr << "reverse_worker: " << config.status().message() << "\n";
    return cfdb::worker::ServeExitCode(config.status());
  }
  // Typed from here on: it runs only its own kind.
  config->exec_kind = false;
  const absl::Status served =
      cfdb::worker::Serve(*config, [](cfdb::worker::Worker& worker) {
        return worker.RegisterKind("reverse", ReverseKind());
      });
  if (absl::IsInvalidArgument(served)) {
    std::cerr << "reverse_worker: " << served.message() << "\n";
  }
  return cfdb::worker::ServeExitCode(served);
}
