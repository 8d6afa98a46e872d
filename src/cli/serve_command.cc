// `cfdb-worker serve`: the worker (cfdb/worker/serve.h) with serve's knobs
// as flags and variables.
#include <iostream>
#include <memory>

#include "cfdb/worker/serve.h"
#include "cli/cli_flags.h"
#include "cli/commands.h"

namespace cfdb::worker::cli {

std::vector<Command> ServeCommands() {
  return {{"serve", "serve a worker", false, [](CLI::App& command) -> Runner {
             auto knobs = std::make_shared<KnobOptions>(&command);
             knobs->Add(ServeKnobs());
             return [knobs](const std::vector<std::string>&) {
               absl::StatusOr<ServeConfig> config =
                   ServeConfigFromFlags(knobs->Given());
               const absl::Status served =
                   config.ok() ? Serve(*config, /*register_kinds=*/{})
                               : config.status();
               // A refused configuration is said here, the rest in the log.
               if (absl::IsInvalidArgument(served)) {
                 std::cerr << "cfdb-worker serve: " << served.message() << "\n";
               }
               return ServeExitCode(served);
             };
           }}};
}

}  // namespace cfdb::worker::cli
