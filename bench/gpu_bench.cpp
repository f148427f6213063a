// Runs the modules `tilec compile` wrote (scripts/build_gpu_modules.sh) on the GPU with the
// runtime library alone (no compiler, no IR, no LLVM): generates inputs, checks the outputs
// against a plain CPU reference, times the kernel with events (warm-up, then the median of
// the repeats), and prints one JSON line per module.
//
//   gpu_bench MODULES_DIR [--repeats N] [--out FILE.jsonl]
//
// MODULES_DIR holds <arch>/<name>/<kernel>.toml; the arch folder is the device's (sm_80 code
// for sm_8x, sm_90 code for sm_9x and newer, which the driver JIT-compiles from the PTX).
// Knows vector_add, softmax, matmul and paged_attention (one split); sizes come from the
// module's [specialization], which `tilec compile` fills with the kernel's --set and --shape
// values. Exit codes: 0 all right, 1 a wrong result or failing call, 2 bad usage or modules,
// 3 no CUDA driver or device.
#include "runtime/cuda.h"
#include "abi/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace fs = std::filesystem;
namespace rt = tilec::rt;

namespace {

std::int64_t spec(const rt::Manifest& m, const std::string& key) {
  auto it = m.specialization.find(key);
  const std::int64_t* v = it == m.specialization.end() ? nullptr : std::get_if<std::int64_t>(&it->second);
  if (!v)
    throw rt::ManifestError(fmt::format("module '{}' ({}) has no integer specialization '{}'", m.kernel,
                                        m.dir.string(), key));
  return *v;
}

std::int64_t cdiv(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
template <class T> std::size_t sz(T v) { return static_cast<std::size_t>(v); }

// Element types of paged attention's q/k/v: index of tilec's --shape dtype=f32|f16|bf16.
enum class Elem { f32 = 0, f16 = 1, bf16 = 2 };
std::size_t elem_bytes(Elem e) { return e == Elem::f32 ? 4 : 2; }
const char* elem_name(Elem e) { return e == Elem::f32 ? "f32" : e == Elem::f16 ? "f16" : "bf16"; }

std::uint16_t to_f16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  std::uint32_t sign = (x >> 16) & 0x8000u;
  int exp = int((x >> 23) & 0xff) - 127 + 15;
  std::uint32_t mant = x & 0x7fffffu;
  if (exp <= 0) { // subnormal or zero
    if (exp < -10) return std::uint16_t(sign);
    mant |= 0x800000u;
    std::uint32_t shift = std::uint32_t(14 - exp);
    std::uint32_t h = mant >> shift;
    if ((mant >> (shift - 1)) & 1u) ++h; // round half up: inputs here are small and random
    return std::uint16_t(sign | h);
  }
  if (exp >= 31) return std::uint16_t(sign | 0x7c00u);
  std::uint32_t h = sign | (std::uint32_t(exp) << 10) | (mant >> 13);
  if (mant & 0x1000u) ++h;
  return std::uint16_t(h);
}
float from_f16(std::uint16_t h) {
  std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu, x;
  if (exp == 0) {
    float f = std::ldexp(float(mant), -24);
    return sign ? -f : f;
  }
  x = exp == 31 ? sign | 0x7f800000u | (mant << 13) : sign | ((exp - 15 + 127) << 23) | (mant << 13);
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
std::uint16_t to_bf16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  x += 0x7fffu + ((x >> 16) & 1u); // round to nearest even
  return std::uint16_t(x >> 16);
}
float from_bf16(std::uint16_t h) {
  std::uint32_t x = std::uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// Host values of one element type, kept as bytes for the device and as floats (the values
// the device sees, after rounding) for the reference.
struct HostTensor {
  Elem elem = Elem::f32;
  std::vector<float> values;
  std::vector<std::byte> bytes;

  HostTensor(Elem e, std::size_t n, std::mt19937& rng, float lo, float hi) : elem(e), values(n), bytes(n * elem_bytes(e)) {
    std::uniform_real_distribution<float> dist(lo, hi);
    for (std::size_t i = 0; i < n; ++i) {
      float v = dist(rng);
      if (e == Elem::f32) {
        std::memcpy(&bytes[4 * i], &v, 4);
      } else {
        std::uint16_t h = e == Elem::f16 ? to_f16(v) : to_bf16(v);
        v = e == Elem::f16 ? from_f16(h) : from_bf16(h);
        std::memcpy(&bytes[2 * i], &h, 2);
      }
      values[i] = v;
    }
  }
};

std::vector<float> decode(Elem e, const std::vector<std::byte>& bytes) {
  std::vector<float> out(bytes.size() / elem_bytes(e));
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (e == Elem::f32) {
      std::memcpy(&out[i], &bytes[4 * i], 4);
    } else {
      std::uint16_t h;
      std::memcpy(&h, &bytes[2 * i], 2);
      out[i] = e == Elem::f16 ? from_f16(h) : from_bf16(h);
    }
  }
  return out;
}

struct Check {
  bool ok = true;
  double max_abs_err = 0, max_rel_err = 0;
  std::string first_mismatch;
};

// |got - want| <= atol + rtol * |want| for every element.
Check compare(const std::vector<float>& got, const std::vector<double>& want, double atol, double rtol,
              std::size_t offset = 0) {
  Check c;
  for (std::size_t i = 0; i < want.size(); ++i) {
    double g = got[offset + i], w = want[i], err = std::fabs(g - w);
    c.max_abs_err = std::max(c.max_abs_err, err);
    if (w != 0) c.max_rel_err = std::max(c.max_rel_err, err / std::fabs(w));
    if (!(err <= atol + rtol * std::fabs(w)) && c.ok) {
      c.ok = false;
      c.first_mismatch = fmt::format("element {}: got {}, want {}", offset + i, g, w);
    }
  }
  return c;
}

struct Timing {
  double median_ms = 0, min_ms = 0, max_ms = 0;
};

// `warmup` untimed launches, then `repeats` each between two events.
Timing time_launches(const rt::Context& ctx, const rt::Stream& stream, const std::function<void()>& launch,
                     int warmup, int repeats) {
  for (int i = 0; i < warmup; ++i) launch();
  std::vector<rt::Event> starts, stops;
  starts.reserve(sz(repeats));
  stops.reserve(sz(repeats));
  for (int i = 0; i < repeats; ++i) {
    starts.emplace_back(ctx);
    stops.emplace_back(ctx);
  }
  for (int i = 0; i < repeats; ++i) {
    starts[sz(i)].record(&stream);
    launch();
    stops[sz(i)].record(&stream);
  }
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) ms.push_back(stops[sz(i)].elapsed_ms(starts[sz(i)]));
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front(), ms.back()};
}

struct Result {
  Check check;
  Timing timing;
  std::int64_t bytes = 0; // the least the kernel must move, for GB/s
  std::string shape;
};

struct Bench {
  const rt::Context& ctx;
  const rt::Stream& stream;
  int repeats;

  rt::Buffer upload(const void* data, std::size_t bytes) const {
    rt::Buffer b(ctx, std::max<std::size_t>(bytes, 4));
    b.upload(data, bytes);
    return b;
  }
  template <class T> rt::Buffer upload(const std::vector<T>& v) const { return upload(v.data(), v.size() * sizeof(T)); }

  Timing time(const rt::Kernel& k, rt::Dim3 grid, const std::vector<rt::Arg>& args) const {
    return time_launches(ctx, stream, [&] { k.launch(grid, std::span<const rt::Arg>(args), &stream); }, 3, repeats);
  }

  Result vector_add(const rt::Kernel& k) const {
    const rt::Manifest& m = k.manifest();
    std::int64_t n = spec(m, "n"), block = spec(m, "block");
    std::mt19937 rng(1);
    HostTensor x(Elem::f32, sz(n), rng, -1, 1), y(Elem::f32, sz(n), rng, -1, 1);
    rt::Buffer dx = upload(x.bytes), dy = upload(y.bytes), dout(ctx, sz(n) * 4);
    dout.fill_zero();
    rt::Dim3 grid{unsigned(cdiv(n, block))};
    std::vector<rt::Arg> args{dx, dy, dout, std::int32_t(n)};
    Result r;
    r.timing = time(k, grid, args);
    std::vector<std::byte> out(sz(n) * 4);
    dout.download(out.data(), out.size());
    std::vector<double> want(sz(n));
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = double(x.values[i] + y.values[i]);
    r.check = compare(decode(Elem::f32, out), want, 0, 0);
    r.bytes = 12 * n;
    r.shape = fmt::format("n={} block={}", n, block);
    return r;
  }

  Result softmax(const rt::Kernel& k) const {
    const rt::Manifest& m = k.manifest();
    std::int64_t rows = spec(m, "rows"), cols = spec(m, "cols");
    std::mt19937 rng(2);
    HostTensor x(Elem::f32, sz(rows * cols), rng, -4, 4);
    rt::Buffer dx = upload(x.bytes), dout(ctx, x.bytes.size());
    dout.fill_zero();
    std::vector<rt::Arg> args{dx, dout, std::int32_t(cols), std::int32_t(cols)};
    Result r;
    r.timing = time(k, rt::Dim3{unsigned(rows)}, args);
    std::vector<std::byte> out(x.bytes.size());
    dout.download(out.data(), out.size());
    std::vector<double> want(x.values.size());
    for (std::int64_t i = 0; i < rows; ++i) {
      const float* row = &x.values[sz(i * cols)];
      double mx = *std::max_element(row, row + cols), sum = 0;
      for (std::int64_t j = 0; j < cols; ++j) sum += std::exp(double(row[j]) - mx);
      for (std::int64_t j = 0; j < cols; ++j) want[sz(i * cols + j)] = std::exp(double(row[j]) - mx) / sum;
    }
    r.check = compare(decode(Elem::f32, out), want, 1e-6, 1e-4);
    r.bytes = 8 * rows * cols;
    r.shape = fmt::format("rows={} cols={}", rows, cols);
    return r;
  }

  Result matmul(const rt::Kernel& k) const {
    const rt::Manifest& m = k.manifest();
    std::int64_t M = spec(m, "m"), N = spec(m, "n"), K = spec(m, "k");
    std::mt19937 rng(3);
    HostTensor a(Elem::f32, sz(M * K), rng, -1, 1), b(Elem::f32, sz(K * N), rng, -1, 1);
    rt::Buffer da = upload(a.bytes), db = upload(b.bytes), dc(ctx, sz(M * N) * 4);
    dc.fill_zero();
    rt::Dim3 grid{unsigned(cdiv(M, spec(m, "block_m"))), unsigned(cdiv(N, spec(m, "block_n")))};
    std::vector<rt::Arg> args{da, db, dc, std::int32_t(M), std::int32_t(N), std::int32_t(K)};
    Result r;
    r.timing = time(k, grid, args);
    std::vector<std::byte> out(sz(M * N) * 4);
    dc.download(out.data(), out.size());
    std::vector<double> want(sz(M * N), 0.0);
    for (std::int64_t i = 0; i < M; ++i)
      for (std::int64_t p = 0; p < K; ++p) {
        double av = a.values[sz(i * K + p)];
        for (std::int64_t j = 0; j < N; ++j) want[sz(i * N + j)] += av * b.values[sz(p * N + j)];
      }
    r.check = compare(decode(Elem::f32, out), want, 1e-5 * double(K), 1e-5);
    r.bytes = 4 * (M * K + K * N + M * N);
    r.shape = fmt::format("m={} n={} k={}", M, N, K);
    return r;
  }

  // One split (num_splits = 1): the kernel writes `out` directly. Every sequence has ctx live
  // tokens; the reference checks the first and the last sequence.
  Result paged_attention(const rt::Kernel& k) const {
    const rt::Manifest& m = k.manifest();
    if (spec(m, "num_splits") != 1)
      throw rt::ManifestError(fmt::format("{}: gpu_bench runs paged_attention with num_splits=1 only (the split "
                                          "kernel needs its combine kernel)", m.dir.string()));
    const std::int64_t B = spec(m, "batch"), hq = spec(m, "hq"), hkv = spec(m, "hkv"), sq = spec(m, "sq"),
                       D = spec(m, "head_dim"), bs = spec(m, "block_size"), ctx_len = spec(m, "ctx");
    const Elem e = Elem(spec(m, "dtype"));
    const bool alibi = spec(m, "alibi") != 0;
    if (ctx_len < 0) throw rt::ManifestError(fmt::format("{}: compile it with a fixed --shape ctx=N", m.dir.string()));
    std::int64_t max_blocks = spec(m, "max_blocks");
    if (max_blocks == 0) max_blocks = ctx_len > 0 ? cdiv(ctx_len, bs) : 16;
    std::int64_t num_blocks = spec(m, "num_blocks");
    if (num_blocks == 0) num_blocks = B * max_blocks;
    std::int64_t group = hq / hkv, head_group = spec(m, "head_group");
    if (head_group == 0) head_group = group;
    bool softcap = std::any_of(m.params.begin(), m.params.end(), [](auto& p) { return p.name == "softcap"; });
    const float scale = float(1.0 / std::sqrt(double(D))), cap = 30.0f;

    std::mt19937 rng(4);
    HostTensor q(e, sz(B * hq * sq * D), rng, -1, 1);
    HostTensor kc(e, sz(num_blocks * bs * hkv * D), rng, -1, 1);
    HostTensor vc(e, sz(num_blocks * bs * hkv * D), rng, -1, 1);
    std::vector<std::int32_t> pages(sz(num_blocks));
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), rng);
    std::vector<std::int32_t> table(sz(B * max_blocks)), lens(sz(B), std::int32_t(ctx_len));
    for (std::size_t i = 0; i < table.size(); ++i) table[i] = pages[i % pages.size()];
    std::vector<float> slopes(sz(hq));
    for (std::int64_t h = 0; h < hq; ++h) slopes[sz(h)] = std::exp2(-8.0f * float(h + 1) / float(hq));

    rt::Buffer dq = upload(q.bytes), dk = upload(kc.bytes), dv = upload(vc.bytes), dt = upload(table),
               dl = upload(lens), ds = upload(slopes), dout(ctx, q.bytes.size());
    dout.fill_zero();
    std::vector<rt::Arg> args{dq, dk, dv, dt, dl};
    if (alibi) args.push_back(ds);
    args.push_back(dout);
    args.push_back(scale);
    if (softcap) args.push_back(cap);
    args.push_back(std::int32_t(max_blocks));
    rt::Dim3 grid{unsigned(B), unsigned(hkv * (group / head_group)), 1};
    Result r;
    r.timing = time(k, grid, args);
    std::vector<std::byte> out_bytes(q.bytes.size());
    dout.download(out_bytes.data(), out_bytes.size());
    std::vector<float> out = decode(e, out_bytes);

    double atol = e == Elem::f32 ? 1e-5 : e == Elem::f16 ? 4e-3 : 3e-2, rtol = e == Elem::f32 ? 1e-4 : 1e-2;
    for (std::int64_t b : {std::int64_t(0), B - 1}) {
      std::vector<double> want(sz(hq * sq * D));
      for (std::int64_t h = 0; h < hq; ++h)
        for (std::int64_t i = 0; i < sq; ++i) {
          const float* qrow = &q.values[sz(((b * hq + h) * sq + i) * D)];
          std::vector<double> s(sz(ctx_len));
          double mx = -INFINITY;
          for (std::int64_t j = 0; j < ctx_len; ++j) {
            std::int64_t slot = (table[sz(b * max_blocks + j / bs)] * bs + j % bs) * hkv + h / group;
            double dot = 0;
            for (std::int64_t d = 0; d < D; ++d) dot += double(qrow[d]) * kc.values[sz(slot * D + d)];
            double v = scale * dot;
            if (softcap) v = cap * std::tanh(v / cap);
            if (alibi) v += slopes[sz(h)] * double(j - i);
            s[sz(j)] = v;
            mx = std::max(mx, v);
          }
          double sum = 0;
          for (double& v : s) sum += (v = std::exp(v - mx));
          for (std::int64_t j = 0; j < ctx_len; ++j) {
            std::int64_t slot = (table[sz(b * max_blocks + j / bs)] * bs + j % bs) * hkv + h / group;
            for (std::int64_t d = 0; d < D; ++d)
              want[sz((h * sq + i) * D + d)] += s[sz(j)] / sum * vc.values[sz(slot * D + d)];
          }
        }
      Check c = compare(out, want, atol, rtol, sz(b * hq * sq * D));
      r.check.max_abs_err = std::max(r.check.max_abs_err, c.max_abs_err);
      r.check.max_rel_err = std::max(r.check.max_rel_err, c.max_rel_err);
      if (!c.ok && r.check.ok) r.check = {false, r.check.max_abs_err, r.check.max_rel_err, c.first_mismatch};
    }
    // The least it must move, as tilec's paged_attention_ideal_bytes counts it.
    std::int64_t eb = std::int64_t(elem_bytes(e));
    r.bytes = 2 * B * hq * sq * D * eb + B * (2 * ctx_len * hkv * D * eb + cdiv(ctx_len, bs) * 4) + B * 4 +
              (alibi ? hq * 4 : 0);
    r.shape = fmt::format("batch={} hq={} hkv={} sq={} head_dim={} block_size={} ctx={} {}{}{} block_n={} "
                          "head_group={} num_warps={}",
                          B, hq, hkv, sq, D, bs, ctx_len, elem_name(e), alibi ? " alibi" : "", softcap ? " softcap" : "",
                          spec(m, "block_n"), head_group, spec(m, "num_warps"));
    return r;
  }
};

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') { out += "\\n"; continue; }
    out += c;
  }
  return out + "\"";
}

std::string module_arch(const rt::DeviceProperties& d) {
  if (d.major >= 9) return "sm_90";
  if (d.major == 8) return "sm_80";
  throw rt::BackendUnavailable(fmt::format("{} is {}; tilec's modules are for sm_80 and newer", d.name, d.arch()));
}

int run(const fs::path& modules, int repeats, const std::string& out_file) {
  rt::Context ctx(0);
  const rt::DeviceProperties& dev = ctx.properties();
  fs::path dir = modules / module_arch(dev);
  if (!fs::is_directory(dir))
    throw rt::ManifestError(fmt::format("{}: no such folder (build the modules with scripts/build_gpu_modules.sh)",
                                        dir.string()));
  std::vector<fs::path> manifests;
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    if (entry.path().extension() == ".toml") manifests.push_back(entry.path());
  std::sort(manifests.begin(), manifests.end());
  if (manifests.empty()) throw rt::ManifestError(fmt::format("{}: no module manifests (*.toml)", dir.string()));

  fmt::print(stderr, "gpu_bench: {} ({}, {} SMs, {:.0f} GiB, driver {}), {} modules from {}\n", dev.name, dev.arch(),
             dev.sm_count, double(dev.total_memory) / double(1ull << 30), dev.driver_version, manifests.size(),
             dir.string());
  std::ofstream jsonl;
  if (!out_file.empty()) jsonl.open(out_file, std::ios::app);
  rt::Stream stream(ctx);
  Bench bench{ctx, stream, repeats};
  int failures = 0;
  for (const fs::path& file : manifests) {
    std::string name = fs::relative(file.parent_path(), dir).string();
    std::string line;
    try {
      rt::Kernel k = rt::Kernel::load(ctx, file);
      const std::string& kernel = k.manifest().kernel;
      Result r = kernel == "vector_add"        ? bench.vector_add(k)
                 : kernel == "softmax"         ? bench.softmax(k)
                 : kernel == "matmul"          ? bench.matmul(k)
                 : kernel == "paged_attention" ? bench.paged_attention(k)
                                               : throw rt::ManifestError(fmt::format("{}: gpu_bench does not know "
                                                                                     "kernel '{}'", file.string(), kernel));
      double gbps = double(r.bytes) / (r.timing.median_ms * 1e-3) / 1e9;
      line = fmt::format("{{\"module\":{},\"kernel\":{},\"device\":{},\"arch\":{},\"code\":{},\"ok\":{},"
                         "\"max_abs_err\":{:.3g},\"max_rel_err\":{:.3g},\"median_ms\":{:.5f},\"min_ms\":{:.5f},"
                         "\"max_ms\":{:.5f},\"repeats\":{},\"ideal_bytes\":{},\"gbps\":{:.1f},\"registers\":{},"
                         "\"shape\":{}{}}}",
                         json_string(name), json_string(kernel), json_string(dev.name), json_string(dev.arch()),
                         json_string(k.manifest().arch == dev.arch() && !k.manifest().cubin.empty() ? "cubin" : "ptx"),
                         r.check.ok, r.check.max_abs_err, r.check.max_rel_err, r.timing.median_ms, r.timing.min_ms,
                         r.timing.max_ms, repeats, r.bytes, gbps, k.function().registers(), json_string(r.shape),
                         r.check.ok ? "" : ",\"first_mismatch\":" + json_string(r.check.first_mismatch));
      fmt::print(stderr, "  {:<40} {:<8} {:9.4f} ms {:8.1f} GB/s  {}\n", name, r.check.ok ? "ok" : "MISMATCH",
                 r.timing.median_ms, gbps, r.shape);
      if (!r.check.ok) {
        fmt::print(stderr, "    first mismatch: {}\n", r.check.first_mismatch);
        ++failures;
      }
    } catch (const rt::BackendUnavailable&) {
      throw;
    } catch (const rt::Error& e) {
      line = fmt::format("{{\"module\":{},\"ok\":false,\"error\":{}}}", json_string(name), json_string(e.what()));
      fmt::print(stderr, "  {:<40} FAILED: {}\n", name, e.what());
      ++failures;
    }
    std::cout << line << std::endl;
    if (jsonl) jsonl << line << "\n" << std::flush;
  }
  fmt::print(stderr, "gpu_bench: {} of {} modules ok\n", manifests.size() - sz(failures), manifests.size());
  return failures ? 1 : 0;
}

} // namespace

int main(int argc, char** argv) {
  std::vector<std::string> a(argv + 1, argv + argc);
  if (a.empty() || a[0] == "--help") {
    fmt::print(stderr, "usage: gpu_bench MODULES_DIR [--repeats N] [--out FILE.jsonl]\n");
    return 2;
  }
  int repeats = 50;
  std::string out_file;
  for (std::size_t i = 1; i < a.size(); ++i) {
    if (a[i] == "--repeats" && i + 1 < a.size()) {
      repeats = std::atoi(a[++i].c_str());
      if (repeats < 1) {
        fmt::print(stderr, "gpu_bench: --repeats must be a positive integer, got '{}'\n", a[i]);
        return 2;
      }
    } else if (a[i] == "--out" && i + 1 < a.size()) {
      out_file = a[++i];
    } else {
      fmt::print(stderr, "gpu_bench: unknown argument '{}' (usage: gpu_bench MODULES_DIR [--repeats N] [--out F])\n",
                 a[i]);
      return 2;
    }
  }
  try {
    return run(a[0], repeats, out_file);
  } catch (const rt::BackendUnavailable& e) {
    fmt::print(stderr, "gpu_bench: {}\n", e.what());
    return 3;
  } catch (const rt::ManifestError& e) {
    fmt::print(stderr, "gpu_bench: {}\n", e.what());
    return 2;
  } catch (const rt::Error& e) {
    fmt::print(stderr, "gpu_bench: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "gpu_bench: {}\n", e.what());
    return 1;
  }
}
