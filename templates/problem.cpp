// A problem's buffers and arguments, and how a run is judged: output comparison, traffic budgets,
// and the fills and .npy dtype names templates share.
#include "templates/registry.h"

#include <thread>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <random>

#include "ir/printer.h"
#include "launch/launcher.h"
#include "runtime/npy.h"
#include <filesystem>
#include <utility>

namespace tilec::templates {

int Problem::add_buffer(launch::Buffer b) {
  buffers.push_back(std::move(b));
  return static_cast<int>(buffers.size()) - 1;
}

std::vector<launch::Arg> Problem::launch_args() {
  std::vector<launch::Arg> out;
  for (const ArgSpec& a : args) {
    if (a.buffer >= 0) out.push_back(launch::Arg::of(buffers.at(a.buffer)));
    else out.push_back(a.is_float ? launch::Arg::of_float(a.f) : launch::Arg::of_int(a.i));
  }
  return out;
}

std::optional<int64_t> ideal_traffic_budget(const Problem& p, double tolerance) {
  if (!p.ideal_bytes) return std::nullopt;
  return static_cast<int64_t>(std::ceil(double(*p.ideal_bytes) * (1.0 + tolerance)));
}

std::string traffic_error(const KernelTemplate& t, const std::string& path, const ParamMap& params, const Problem& p,
                          const launch::LaunchStats& stats) {
  if (!t.traffic_budget || !stats.request_bytes) return "";
  if (!path.empty() && path != default_path(t)) return "";
  std::optional<int64_t> budget = t.traffic_budget(p, params);
  if (!budget || *stats.request_bytes <= *budget) return "";
  return fmt::format("{} moved {} bytes in warp-wide requests, more than the {} a correct run may ({}{}): an "
                     "access wider than it needs, or one that a mask should have stopped",
                     t.name, *stats.request_bytes, *budget,
                     p.ideal_bytes ? fmt::format("ideal {}, ", *p.ideal_bytes) : std::string(),
                     p.ideal_bytes ? fmt::format("{:+.1f}%", 100.0 * (double(*stats.request_bytes) / double(*p.ideal_bytes) - 1.0))
                                   : std::string("over budget"));
}

Comparison compare_outputs(const Problem& p) {
  Comparison c;
  for (size_t k = 0; k < p.outputs.size(); ++k) {
    const launch::Buffer& got = p.buffers.at(p.outputs[k]);
    const launch::Buffer& want = p.expected.at(k);
    for (size_t i = 0; i < want.count(); ++i) {
      double g = got.get(i), w = want.get(i);
      // NaN matches NaN and an infinity the same infinity, exactly where the reference has
      // them; anything else against a NaN or an infinity (on either side) is a mismatch.
      if (std::isnan(w) || std::isinf(w) || std::isnan(g) || std::isinf(g)) {
        const bool same = std::isnan(w) ? std::isnan(g) : g == w;
        if (!same) {
          c.max_abs_err = INFINITY;
          if (c.ok) {
            c.ok = false;
            c.first_mismatch = fmt::format("{}[{}]: got {}, expected {}", got.name, i, g, w);
          }
        }
        continue;
      }
      double err = std::abs(g - w);
      double rel = err / std::max(std::abs(w), 1e-30);
      c.max_abs_err = std::max(c.max_abs_err, err);
      if (std::abs(w) > p.atol) c.max_rel_err = std::max(c.max_rel_err, rel);
      if (!(err <= p.atol + p.rtol * std::abs(w)) && c.ok) {
        c.ok = false;
        c.first_mismatch = fmt::format("{}[{}]: got {}, expected {}", got.name, i, g, w);
      }
    }
  }
  return c;
}

std::string npy_descr(ir::DType t) {
  switch (t) {
  case ir::DType::f32: return "<f4";
  case ir::DType::f16: return "<f2";
  case ir::DType::bf16: return "<u2"; // raw bfloat16 bits
  case ir::DType::i32: return "<i4";
  case ir::DType::i8: return "|i1";
  case ir::DType::i16: return "<i2";
  case ir::DType::i64: return "<i8";
  case ir::DType::i1: return "|b1";
  case ir::DType::u8: return "|u1";
  case ir::DType::u16: return "<u2"; // as bf16's bits: a reader tells them apart by the dtype it expects
  case ir::DType::u32: return "<u4";
  case ir::DType::u64: return "<u8";
  case ir::DType::f8e4m3:
  case ir::DType::f8e5m2: return "|u1"; // raw fp8 bits; the dtype is declared elsewhere
  default: throw UserError(fmt::format("no .npy dtype for {}", ir::dtype_name(t)));
  }
}

void fill_uniform(launch::Buffer& b, uint64_t seed, double lo, double hi) {
  const bool is_float = ir::is_float(b.dtype);
  if (b.count() < kParallelFillElements) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> dist(lo, hi);
    for (size_t i = 0; i < b.count(); ++i) {
      double v = dist(rng);
      b.set(i, is_float ? v : std::floor(v));
    }
    return;
  }
  // A large buffer (a KV cache of the GPU check's sizes: hundreds of millions of elements) is
  // filled on every core: element i is a function of (seed, i) alone (SplitMix64 of the two),
  // so the values do not depend on the threads. One sequential stream took minutes.
  auto fill = [&](size_t from, size_t to) {
    for (size_t i = from; i < to; ++i) {
      uint64_t z = seed * 0x9e3779b97f4a7c15ull + (i + 1) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      z ^= z >> 31;
      double v = lo + (hi - lo) * double(z >> 11) * 0x1.0p-53;
      b.set(i, is_float ? v : std::floor(v));
    }
  };
  const size_t n = b.count(), threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(fill, n * t / threads, n * (t + 1) / threads);
  fill(0, n / threads);
  for (std::thread& th : pool) th.join();
}

} // namespace tilec::templates
