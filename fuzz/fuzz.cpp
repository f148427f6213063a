#include "fuzz/fuzz.h"
#include "backends/launchers.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "fuzz/shrink.h"

namespace tilec::fuzz {

namespace {

void count_coverage(const Program& p, std::map<std::string, int64_t>& ops, std::map<std::string, int64_t>& dtypes) {
  for (const ir::Value* v : p.kernel->params) ++dtypes[std::string(ir::dtype_name(v->type.dtype()))];
  ir::walk(p.kernel->body, [&](ir::Op& op) {
    ++ops[std::string(ir::op_name(op.kind))];
    for (const ir::Value* v : op.results) ++dtypes[std::string(ir::dtype_name(v->type.dtype()))];
  });
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

} // namespace

std::string save_regression(const Program& p, const std::string& dir, const std::string& what) {
  std::filesystem::create_directories(dir);
  std::filesystem::path path = std::filesystem::path(dir) / fmt::format("fuzz_{}.tir", p.seed);
  std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp);
    f << "// found by tilec fuzz: " << first_line(what) << "\n" << to_text(p);
    if (!f) throw UserError(fmt::format("cannot write {}", tmp.string()));
  }
  std::filesystem::rename(tmp, path);
  return path.string();
}

FuzzSummary run_fuzz(const FuzzOptions& o, const Progress& progress) {
  if (o.count < 1) throw UserError(fmt::format("the program count must be positive, got {}", o.count));
  auto t0 = std::chrono::steady_clock::now();
  FuzzSummary s;
  std::mutex mutex;
  std::atomic<int64_t> next{0};
  auto work = [&] {
    auto launcher = backends::make_emulate_launcher();
    for (int64_t i; (i = next++) < o.count;) {
      uint64_t seed = o.seed + static_cast<uint64_t>(i);
      Failure f;
      f.seed = seed;
      Outcome out;
      Program p;
      std::map<std::string, int64_t> ops, dtypes;
      try {
        p = generate(seed, o.gen);
        count_coverage(p, ops, dtypes);
        out = run_program(p, *launcher);
      } catch (const std::exception& e) { // a generator bug: the program never ran
        out = {Verdict::invalid, fmt::format("generating program {} failed: {}", seed, e.what())};
      }
      if (out.verdict != Verdict::agree) {
        f.verdict = out.verdict;
        f.message = out.message;
        f.shrunk = p;
        if (p.kernel) f.original_ops = f.shrunk_ops = count_ops(p);
        if (out.verdict == Verdict::disagree && o.shrink) {
          f.shrunk = shrink(
              p, [&](const Program& c) { return run_program(c, *launcher).verdict == Verdict::disagree; },
              o.shrink_checks);
          f.shrunk_ops = count_ops(f.shrunk);
        }
        if (!o.save_dir.empty() && p.kernel) f.saved = save_regression(f.shrunk, o.save_dir, f.message);
      }
      std::lock_guard lock(mutex);
      ++s.programs;
      for (auto& [k, n] : ops) s.ops[k] += n;
      for (auto& [k, n] : dtypes) s.dtypes[k] += n;
      std::string line;
      if (out.verdict == Verdict::agree) {
        ++s.agreed;
        line = fmt::format("seed {}: agree", seed);
      } else {
        line = fmt::format("seed {}: {}: {}", seed, out.verdict == Verdict::invalid ? "INVALID" : "DISAGREE",
                           first_line(out.message));
        s.failures.push_back(std::move(f));
      }
      if (progress) progress(s.programs, line);
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < std::max(1u, o.jobs); ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  std::sort(s.failures.begin(), s.failures.end(), [](const Failure& a, const Failure& b) { return a.seed < b.seed; });
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

} // namespace tilec::fuzz
