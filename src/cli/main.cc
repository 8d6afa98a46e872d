// cfdb-worker: the worker daemon (`serve`) and its client commands, from
// one table of commands (commands.h).
#include <fcntl.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "cfdb/worker/serve.h"
#include "cli/cli_flags.h"
#include "cli/commands.h"

namespace cfdb::worker::cli {

namespace {

// AllCommands is the table, in the order --help lists it.
std::vector<Command> AllCommands() {
  std::vector<Command> all;
  for (auto part :
       {&ServeCommands, &ClientCommands, &JobCommands, &ReapCommands}) {
    for (Command& command : part()) all.push_back(std::move(command));
  }
  return all;
}

// FlagsEnd returns where the flags end: at the first "--". Everything after
// it is the command's arguments (dispatch: the program and its argv; reap:
// addresses), never a flag nor a flag's value, whatever flag comes before
// it: CLI11 sees only what precedes it.
int FlagsEnd(int argc, char** argv) {
  int end = 1;
  while (end < argc && std::string_view(argv[end]) != "--") ++end;
  return end;
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
  const std::vector<Command> commands = AllCommands();
  std::vector<std::pair<CLI::App*, Runner>> runners;
  for (const Command& command : commands) {
    CLI::App* sub = app.add_subcommand(command.name, command.help);
    runners.emplace_back(sub, command.add(*sub));
  }
  OneValueEach(app);
  const int flags_end = FlagsEnd(argc, argv);
  const std::vector<std::string> after(argv + std::min(flags_end + 1, argc),
                                       argv + argc);
  try {
    app.parse(flags_end, argv);
  } catch (const CLI::ParseError& e) {
    return ParseFailure(app, e);
  }
  for (std::size_t i = 0; i < commands.size(); ++i) {
    CLI::App* sub = runners[i].first;
    if (!sub->parsed()) continue;
    if (!commands[i].takes_arguments && !after.empty()) {
      return Usage(sub, absl::StrCat("takes no arguments, and '", after.front(),
                                     "' came after --"));
    }
    return runners[i].second(after);
  }
  return kExitUsage;
}

}  // namespace
}  // namespace cfdb::worker::cli

int main(int argc, char** argv) {
  // A standard descriptor started closed (`<&-`) would be the next one
  // opened, a socket or an eventfd read as stdin or written as output: it
  // reads as empty and discards instead, from /dev/null. (One that gRPC's
  // libraries took before main is found by `dispatch`, by its flags.)
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) == -1 &&
        open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY) != fd) {
      return cfdb::worker::kExitRuntimeFailure;
    }
  }
  try {
    return cfdb::worker::cli::Main(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "cfdb-worker: " << e.what() << "\n";
    return cfdb::worker::kExitRuntimeFailure;
  }
}
