// tilec: the command-line driver over the compiler, the registered kernels and the
// backends. Exit codes: 0 ok, 1 wrong result, 2 bad usage or input, 3 backend
// unavailable.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <string_view>
#include <vector>

#include "ir/error.h"
#include "abi/error.h"
#include "abi/version.h"
#include "runtime/npy.h"
#include "tools/cli.h"
#include "tools/commands.h"
#include "tools/json.h"

namespace tilec::cli {

namespace {

std::string& program_name_storage() {
  static std::string name = "tilec";
  return name;
}

int report(const Common& common, int code, const std::string& msg) {
  // One line: a multi-line message (a parser's source excerpt) continues indented.
  std::string text = msg;
  while (!text.empty() && text.back() == '\n') text.pop_back();
  for (size_t at = 0; (at = text.find('\n', at)) != std::string::npos; at += 2) text.replace(at, 1, "\n  ");
  std::cerr << program_name() << ": error: " << text << "\n";
  if (common.json) std::cout << JsonObject().boolean("ok", false).str("error", msg).integer("exit_code", code).str() << std::endl;
  return code;
}

} // namespace

const std::string& program_name() { return program_name_storage(); }

int run_cli(int argc, char** argv) {
  if (argc > 0 && argv[0] && *argv[0]) program_name_storage() = std::filesystem::path(argv[0]).filename().string();
  CLI::App app{"tilec: a tile-DSL kernel compiler (tile IR -> LLVM -> PTX) and its runners", program_name()};
  app.set_version_flag("--version", "tilec " TILEC_VERSION);
  app.require_subcommand(1, 1);
  app.fallthrough(false);
  Common common;
  std::map<CLI::App*, Action> actions;
  std::vector<std::string> commands;
  auto add = [&](const std::string& name, const std::string& help, auto&& adder) {
    commands.push_back(name);
    CLI::App* sub = app.add_subcommand(name, help);
    sub->add_flag("--json", common.json, "print one JSON object on stdout as the last line");
    actions[sub] = adder(*sub, common);
  };
  add("list", "list the kernels the templates provide, with their parameters", add_list);
  add("ir", "print a kernel's IR at a stage", add_ir);
  add("compile", "compile a kernel to PTX (+ cubin via ptxas) or an emulator library, with its manifest",
      add_compile);
  add("run", "run a kernel on generated inputs and check it against its reference", add_run);
  add("autotune", "search a kernel's config space (TOML) and store the fastest correct configs in a database",
      add_autotune);
  add("bench", "compare a kernel's tuned configs against its defaults and print a table", add_bench);
  add("fuzz", "differential fuzzing: random tile programs on the interpreter and the emulator must agree", add_fuzz);
  add("db", "merge tuning databases (shards, machines) into one, show one, or export its winners", add_db);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e); // --help, --version
    // Parsing may stop before it reaches --json: look for it among the words.
    for (int i = 1; i < argc; ++i) common.json = common.json || std::string_view(argv[i]) == "--json";
    std::string msg = e.what();
    // CLI11 says only that a command is required: name the word it did not know.
    if (app.get_subcommands().empty())
      for (int i = 1; i < argc; ++i)
        if (std::string_view(argv[i]) != "--json") {
          msg = fmt::format("'{}' is not a command (commands: {})", argv[i], fmt::join(commands, ", "));
          break;
        }
    return report(common, kBadInput, msg + fmt::format(" (see {} --help)", program_name()));
  }
  try {
    for (auto& [sub, action] : actions)
      if (sub->parsed()) return action();
  } catch (const rt::BackendUnavailable& e) {
    // The runtime speaks to host programs; here the remedy is a flag.
    return report(common, kBackendUnavailable, fmt::format("{} ({}: use --backend emulate)", e.what(), program_name()));
  } catch (const UserError& e) {
    return report(common, kBadInput, e.what());
  } catch (const rt::ManifestError& e) {
    return report(common, kBadInput, e.what());
  } catch (const rt::NpyError& e) {
    return report(common, kBadInput, e.what());
  } catch (const rt::LaunchArgumentError& e) {
    return report(common, kBadInput, e.what());
  } catch (const std::filesystem::filesystem_error& e) {
    // A path given on the command line that cannot be read, created or written.
    std::string paths = e.path1().string() + (e.path2().empty() ? "" : ", " + e.path2().string());
    return report(common, kBadInput, fmt::format("{}: {}", paths, e.code().message()));
  } catch (const rt::Error& e) {
    return report(common, kFailed, e.what());
  } catch (const InternalError& e) {
    return report(common, kFailed, e.what());
  } catch (const std::exception& e) {
    return report(common, kFailed, std::string("unexpected error: ") + e.what());
  }
  return report(common, kBadInput, fmt::format("no command given (see {} --help)", program_name()));
}

} // namespace tilec::cli
