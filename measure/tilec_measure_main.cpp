// tilec-measure: times a measurement plan (`tilec autotune … --prepare DIR`) where the GPU is,
// without the compiler: it links the runtime and the kernels' problems and references only, so
// it builds on a machine with CUDA and a C++ compiler but no LLVM (TILEC_RUNTIME_ONLY=ON).
//
//   tilec-measure PLAN_DIR [--backend cuda|emulate] [--shard I/N] [-o DB.toml]
//                          [--warmup N] [--repeats N] [--json]
//
// Exit codes: 0 every candidate measured, 1 a candidate gave a wrong result or failed to run
// (the others are still measured and stored), 2 bad usage or a bad plan (nothing runs),
// 3 no CUDA driver or device.
#include <fmt/format.h>

#include <charconv>
#include <iostream>
#include <string>
#include <vector>

#include "ir/error.h"
#include "measure/measure.h"

namespace {

namespace measure = tilec::measure;

constexpr const char* kUsage =
    "usage: tilec-measure PLAN_DIR [--backend cuda|emulate] [--shard I/N] [-o DB.toml] [--warmup N] [--repeats N] "
    "[--json]\n"
    "  times every candidate of a plan (tilec autotune ... --prepare PLAN_DIR), each checked against its reference\n"
    "  first, and merges the results into the tuning database (default tuning.toml).\n"
    "  --backend  cuda (default: the GPU, device 0) or emulate (the CPU emulator, for a check without a GPU;\n"
    "             its entries are marked device \"cpu-emulator\" and never chosen for a GPU)\n"
    "  --shard    I/N: only every N-th candidate, from the I-th (run N of these, each with its own -o, then\n"
    "             tilec db merge)\n"
    "usage: tilec-measure PLAN_DIR --winners DB.toml [--backend cuda|emulate]\n"
    "  measures nothing: prints one JSON line per problem of the plan with the fastest candidate DB holds\n"
    "  for it (its config, median and modules folder for the backend)\n";

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

int to_int(const std::string& flag, const std::string& text, int least) {
  int v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || v < least)
    throw tilec::UserError(fmt::format("{} '{}': expected an integer of at least {}", flag, text, least));
  return v;
}

} // namespace

int main(int argc, char** argv) {
  std::vector<std::string> a(argv + 1, argv + argc);
  measure::MeasureOptions o;
  bool json = false;
  auto fail = [&](int code, const std::string& msg) {
    std::cerr << "tilec-measure: " << msg << "\n";
    if (json) std::cout << fmt::format("{{\"ok\": false, \"error\": \"{}\", \"exit_code\": {}}}", json_escape(msg), code) << std::endl;
    return code;
  };
  for (const std::string& s : a) json = json || s == "--json";
  try {
    std::string shard, winners;
    for (size_t i = 0; i < a.size(); ++i) {
      auto value = [&]() -> std::string {
        if (i + 1 >= a.size()) throw tilec::UserError(fmt::format("{} needs a value", a[i]));
        return a[++i];
      };
      if (a[i] == "-h" || a[i] == "--help") {
        std::cout << kUsage;
        return 0;
      } else if (a[i] == "--backend") {
        o.backend = value();
      } else if (a[i] == "--shard") {
        shard = value();
      } else if (a[i] == "-o" || a[i] == "--db") {
        o.db = value();
      } else if (a[i] == "--warmup") {
        o.warmup = to_int("--warmup", value(), 0);
      } else if (a[i] == "--repeats") {
        o.repeats = to_int("--repeats", value(), 1);
      } else if (a[i] == "--winners") {
        winners = value();
      } else if (a[i] == "--json") {
      } else if (!a[i].empty() && a[i][0] == '-') {
        throw tilec::UserError(fmt::format("unknown option '{}'\n{}", a[i], kUsage));
      } else if (o.plan_dir.empty()) {
        o.plan_dir = a[i];
      } else {
        throw tilec::UserError(fmt::format("one plan folder at a time (got '{}' and '{}')", o.plan_dir.string(), a[i]));
      }
    }
    if (o.plan_dir.empty()) throw tilec::UserError(std::string("no plan folder given\n") + kUsage);
    o.shard = measure::parse_shard(shard);
    if (!winners.empty()) {
      measure::Plan plan = measure::read_plan(o.plan_dir);
      tilec::rt::TuningDb db = tilec::rt::read_tuning_db(winners);
      std::vector<measure::Winner> ws = measure::plan_winners(plan, db, o.backend);
      for (const measure::Winner& w : ws)
        std::cout << fmt::format("{{\"problem\": {}, \"key\": \"{}\", \"config\": \"{}\", \"median_ms\": {}, "
                                 "\"device\": \"{}\", \"modules\": \"{}\"}}",
                                 w.problem, json_escape(tilec::rt::format_key(w.entry.key)),
                                 json_escape(tilec::rt::format_config(w.entry.config)), w.entry.median_ms,
                                 json_escape(w.entry.device),
                                 json_escape(measure::candidate_dir(o.plan_dir, o.backend == "cuda" ? plan.arch : "host",
                                                                    *w.candidate)
                                                 .string()))
                  << std::endl;
      if (ws.size() < plan.problems.size())
        return fail(1, fmt::format("{}: {} of the plan's {} problems have no measured candidate", winners,
                                   plan.problems.size() - ws.size(), plan.problems.size()));
      return 0;
    }
    measure::MeasureSummary s = measure::measure_plan(o, [](const std::string& line) {
      std::cerr << "tilec-measure: " << line << std::endl;
    });
    std::cerr << fmt::format("tilec-measure: {} candidates{}: {} measured, {} failed; database {}\n", s.candidates,
                             o.shard.whole() ? "" : fmt::format(" (shard {}/{})", o.shard.index + 1, o.shard.count),
                             s.measured, s.rejected, o.db);
    for (const std::string& f : s.failures) std::cerr << "  FAILED " << f << "\n";
    if (json) {
      std::string failures;
      for (const std::string& f : s.failures) failures += (failures.empty() ? "\"" : ", \"") + json_escape(f) + "\"";
      std::cout << fmt::format("{{\"ok\": {}, \"device\": \"{}\", \"backend\": \"{}\", \"shard\": \"{}/{}\", "
                               "\"candidates\": {}, \"measured\": {}, \"failed\": {}, \"failures\": [{}], \"db\": "
                               "\"{}\", \"exit_code\": {}}}",
                               s.rejected == 0, json_escape(s.device), s.backend, o.shard.index + 1, o.shard.count,
                               s.candidates, s.measured, s.rejected, failures, json_escape(o.db), s.rejected ? 1 : 0)
                << std::endl;
    }
    return s.rejected ? 1 : 0;
  } catch (const tilec::rt::BackendUnavailable& e) {
    return fail(3, e.what());
  } catch (const tilec::rt::ManifestError& e) { // a bad plan (PlanError) or module
    return fail(2, e.what());
  } catch (const tilec::UserError& e) {
    return fail(2, e.what());
  } catch (const std::exception& e) {
    return fail(1, e.what());
  }
}
