// tilec fuzz: differential fuzzing of the compiler (fuzz/fuzz.h). Random programs run on the
// interpreter and the emulator; any disagreement is shrunk, saved as a regression file and
// fails the command (exit 1).
#include <fmt/format.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "backends/launchers.h"
#include "fuzz/fuzz.h"
#include "tools/commands.h"
#include "tools/json.h"
#include "autotune/progress.h"

namespace tilec::cli {

namespace {

std::string counts_line(const std::map<std::string, int64_t>& m) {
  std::string s;
  for (const auto& [k, n] : m) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", k, n);
  return s;
}

std::string counts_json(const std::map<std::string, int64_t>& m) {
  JsonObject j;
  for (const auto& [k, n] : m) j.integer(k, n);
  return j.str();
}

int run_fuzz_command(const Common& common, const fuzz::FuzzOptions& o) {
  autotune::Progress progress("fuzz", static_cast<size_t>(o.count));
  fuzz::FuzzSummary s = fuzz::run_fuzz(o, [&](int64_t done, const std::string& line) {
    if (line.find(": agree") == std::string::npos) progress.note(line);
    progress.set(static_cast<size_t>(done), line);
  });
  size_t disagreements = 0, invalid = 0;
  for (const fuzz::Failure& f : s.failures) {
    (f.verdict == fuzz::Verdict::disagree ? disagreements : invalid)++;
    std::cerr << fmt::format("\ntilec fuzz: seed {}: {}\n", f.seed,
                             f.verdict == fuzz::Verdict::disagree ? "the interpreter and the emulator disagree"
                                                                  : "invalid program (a generator bug)");
    std::cerr << f.message << "\n";
    if (f.shrunk.kernel) {
      std::cerr << fmt::format("shrunk from {} to {} ops:\n", f.original_ops, f.shrunk_ops) << fuzz::to_text(f.shrunk);
      if (!f.saved.empty()) std::cerr << "saved to " << f.saved << "\n";
    }
  }
  say(common, fmt::format("{} programs (seeds {}..{}): {} agree, {} disagreements, {} invalid, in {:.1f} s",
                          s.programs, o.seed, o.seed + static_cast<uint64_t>(o.count) - 1, s.agreed, disagreements,
                          invalid, s.seconds));
  say(common, fmt::format("ops exercised ({} kinds of {}): {}", s.ops.size(), ir::kNumOpKinds, counts_line(s.ops)));
  say(common, fmt::format("dtypes exercised: {}", counts_line(s.dtypes)));
  if (common.json) {
    std::string failures;
    for (const fuzz::Failure& f : s.failures) {
      JsonObject j;
      j.integer("seed", static_cast<int64_t>(f.seed));
      j.str("verdict", f.verdict == fuzz::Verdict::disagree ? "disagree" : "invalid").str("message", f.message);
      j.integer("ops", f.original_ops).integer("shrunk_ops", f.shrunk_ops);
      if (f.saved.empty()) j.null("saved");
      else j.str("saved", f.saved);
      failures += (failures.empty() ? "" : ", ") + j.str();
    }
    JsonObject j;
    j.boolean("ok", s.failures.empty()).integer("programs", s.programs).integer("seed", static_cast<int64_t>(o.seed));
    j.integer("agreed", s.agreed).integer("disagreements", static_cast<int64_t>(disagreements));
    j.integer("invalid", static_cast<int64_t>(invalid)).number("seconds", s.seconds);
    j.raw("ops", counts_json(s.ops)).raw("dtypes", counts_json(s.dtypes)).raw("failures", "[" + failures + "]");
    std::cout << j.str() << std::endl;
  }
  return s.failures.empty() ? kOk : kFailed;
}

// Reruns saved programs (regression files): exit 1 when any still disagrees.
int replay(const Common& common, const std::vector<std::string>& files) {
  auto launcher = backends::make_emulate_launcher();
  size_t failed = 0;
  std::string results;
  for (const std::string& path : files) {
    std::ifstream f(path);
    if (!f) throw UserError(fmt::format("--replay: cannot read {}", path));
    std::string text(std::istreambuf_iterator<char>(f), {});
    fuzz::Outcome out = fuzz::run_program(fuzz::from_text(text, path), *launcher);
    bool ok = out.verdict == fuzz::Verdict::agree;
    failed += !ok;
    say(common, fmt::format("{}: {}", path, ok ? "agree" : out.message));
    JsonObject j;
    j.str("file", path).boolean("ok", ok).str("message", out.message);
    results += (results.empty() ? "" : ", ") + j.str();
  }
  if (common.json)
    std::cout << JsonObject().boolean("ok", failed == 0).integer("programs", int64_t(files.size())).raw("results", "[" + results + "]").str()
              << std::endl;
  return failed ? kFailed : kOk;
}

// "--count 0: must be a positive integer" rather than CLI11's range message.
const CLI::Validator kPositive(
    [](std::string& s) {
      char* end = nullptr;
      long long v = std::strtoll(s.c_str(), &end, 10);
      return *end || end == s.c_str() || v < 1 ? fmt::format("must be a positive integer, got '{}'", s) : std::string();
    },
    "POSITIVE");

// The module cache of one fuzz run: its programs are never run again, so their modules go to a
// folder of their own, removed at the end, rather than filling ~/.cache/tilec.
struct ScratchCache {
  std::filesystem::path dir;
  ScratchCache() {
    dir = std::filesystem::temp_directory_path() / fmt::format("tilec-fuzz-cache-{}", ::getpid());
    ::setenv("TILEC_CACHE_DIR", dir.c_str(), 1);
  }
  ~ScratchCache() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

} // namespace

Action add_fuzz(CLI::App& app, Common& common) {
  auto o = std::make_shared<fuzz::FuzzOptions>();
  o->save_dir = "tests/fuzz/regressions";
  o->jobs = 0;
  app.add_option("--count", o->count, "programs to generate and run")->check(kPositive)->capture_default_str();
  app.add_option("--seed", o->seed, "seed of the first program (program i uses seed + i)")
      ->check(kSeedCheck)
      ->capture_default_str();
  app.add_option("--save-dir", o->save_dir, "where shrunk failing programs are written")->capture_default_str();
  app.add_option("-j,--jobs", o->jobs, "worker threads (default: every core)")->check(kPositive);
  app.add_flag("--no-shrink", [o](int64_t) { o->shrink = false; }, "report failing programs as generated");
  auto files = std::make_shared<std::vector<std::string>>();
  app.add_option("--replay", *files, "rerun these saved programs (e.g. tests/fuzz/regressions/*.tir) instead");
  return [&common, o, files]() -> int {
    std::error_code ec;
    if (std::filesystem::exists(o->save_dir, ec) && !std::filesystem::is_directory(o->save_dir, ec))
      throw UserError(fmt::format("--save-dir {}: exists and is not a folder", o->save_dir));
    ScratchCache cache;
    if (!files->empty()) return replay(common, *files);
    if (o->jobs == 0) o->jobs = std::max(1u, std::thread::hardware_concurrency());
    return run_fuzz_command(common, *o);
  };
}

} // namespace tilec::cli
