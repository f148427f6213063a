// A host program that ships without the compiler (it links tilec::runtime alone: no LLVM, no
// IR): it picks the tuned rmsnorm config for its problem from a folder written by
//
//   rmsnorm_tilec autotune rmsnorm --space rmsnorm.toml --shape rows=R cols=C \
//       --backend emulate -o tuning.toml --export DIR
//
// loads that config's module compiled for the CPU emulator, runs it on its own buffers and
// checks the result against a plain C++ RMSNorm.
//
//   rmsnorm_host DIR [ROWS COLS]        (default 64 1000; the database is DIR/tuning.toml)
//
// Exit codes: 0 right result, 1 wrong result or a failed launch, 2 bad usage or no usable
// module (the message names the module and the command that builds it).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "abi/float16.h"
#include "runtime/emulator/emulator.h"
#include "runtime/module_store.h"
#include "runtime/tuning_db.h"

namespace rt = tilec::rt;
namespace fs = std::filesystem;

namespace {

constexpr float kEps = 1e-5f; // as in rmsnorm.cpp's problems

bool parse_positive(std::string_view s, int64_t& out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size() && out > 0 && out <= (1 << 24);
}

int64_t spec_int(const rt::Manifest& m, const std::string& name) {
  auto it = m.specialization.find(name);
  const int64_t* v = it == m.specialization.end() ? nullptr : std::get_if<int64_t>(&it->second);
  if (!v) throw rt::Error("module " + m.kernel + " has no integer specialization '" + name + "'");
  return *v;
}

int run(const fs::path& dir, int64_t rows, int64_t cols) {
  const fs::path db_path = dir / "tuning.toml";
  if (!fs::exists(db_path)) {
    std::fprintf(stderr, "rmsnorm_host: no tuning database %s (autotune -o tuning.toml --export %s)\n",
                 db_path.c_str(), dir.c_str());
    return 2;
  }
  rt::TuningDb db = rt::read_tuning_db(db_path.string());
  // The problem key is the kernel's --shape values; the emulator's device is "cpu-emulator"
  // and its modules are compiled for the arch "host".
  rt::ProblemKey key{{"rows", rows}, {"cols", cols}};
  rt::TunedModules tuned = rt::load_tuned(db, "rmsnorm", rt::host_device_name("emulate"), key, "host", {dir});
  std::printf("%s\nconfig: %s\n", tuned.note.c_str(), rt::format_config(tuned.config).c_str());
  if (tuned.modules.size() != 1) throw rt::Error("expected one rmsnorm module");
  const rt::Manifest& m = tuned.modules.front();
  const int64_t block = spec_int(m, "block");
  if (block < cols) {
    std::fprintf(stderr, "rmsnorm_host: module block=%lld is smaller than cols=%lld\n", (long long)block,
                 (long long)cols);
    return 2;
  }
  std::printf("module %s (%s): block=%lld, %d threads per program\n", m.kernel.c_str(), m.arch.c_str(),
              (long long)block, m.threads_per_block);

  // Inputs as f16 bit patterns (abi/float16.h rounds to nearest even).
  const size_t n = static_cast<size_t>(rows * cols);
  std::vector<uint16_t> x(n), w(static_cast<size_t>(cols)), out(n, 0);
  for (int64_t i = 0; i < rows * cols; ++i)
    x[size_t(i)] = tilec::f32_to_f16_bits(std::sin(0.37f * float(i) + 0.5f) * 2.0f);
  for (int64_t c = 0; c < cols; ++c) w[size_t(c)] = tilec::f32_to_f16_bits(0.5f + float(c % 11) / 10.0f);

  rt::EmuModule module(m);
  const rt::Arg args[] = {rt::Arg::buffer(reinterpret_cast<uint64_t>(x.data()), x.size() * 2),
                          rt::Arg::buffer(reinterpret_cast<uint64_t>(w.data()), w.size() * 2),
                          rt::Arg::buffer(reinterpret_cast<uint64_t>(out.data()), out.size() * 2),
                          rt::Arg(int32_t(cols)), rt::Arg(int32_t(cols)), rt::Arg(kEps)};
  rt::EmuLaunchStats stats = module.launch(rt::Dim3{unsigned(rows), 1, 1}, args);
  std::printf("launched %lld programs: %.3f ms, %lld bytes loaded, %lld stored\n", (long long)rows, stats.time_ms,
              (long long)stats.bytes_loaded, (long long)stats.bytes_stored);

  // The same RMSNorm on the CPU, in double, from the f16 inputs.
  int wrong = 0, shown = 0;
  double max_err = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double sum_sq = 0;
    for (int64_t c = 0; c < cols; ++c) {
      double v = tilec::f16_bits_to_f32(x[size_t(r * cols + c)]);
      sum_sq += v * v;
    }
    const double inv_rms = 1.0 / std::sqrt(sum_sq / double(cols) + kEps);
    for (int64_t c = 0; c < cols; ++c) {
      const size_t i = size_t(r * cols + c);
      const double want = tilec::f16_bits_to_f32(x[i]) * inv_rms * tilec::f16_bits_to_f32(w[size_t(c)]);
      const double got = tilec::f16_bits_to_f32(out[i]);
      const double err = std::fabs(got - want);
      max_err = std::max(max_err, err);
      if (!(err <= 1e-3 + 4e-3 * std::fabs(want)) && wrong++ < 5)
        std::fprintf(stderr, "out[%lld, %lld] = %g, want %g\n", (long long)r, (long long)c, got, want);
      if ((r == 0 || r == rows - 1) && (c == 0 || c == cols - 1) && shown++ < 4)
        std::printf("out[%lld, %lld] = %.5f (cpu %.5f)\n", (long long)r, (long long)c, got, want);
    }
  }
  std::printf("%lld x %lld: max |error| %.2e, %s\n", (long long)rows, (long long)cols, max_err,
              wrong ? (std::to_string(wrong) + " wrong").c_str() : "all correct");
  return wrong ? 1 : 0;
}

} // namespace

int main(int argc, char** argv) {
  int64_t rows = 64, cols = 1000;
  if (argc != 2 && argc != 4) {
    std::fprintf(stderr, "usage: %s DIR [ROWS COLS]\n", argv[0]);
    return 2;
  }
  if (argc == 4 && (!parse_positive(argv[2], rows) || !parse_positive(argv[3], cols))) {
    std::fprintf(stderr, "rmsnorm_host: ROWS and COLS must be positive integers up to 2^24, got '%s' '%s'\n",
                 argv[2], argv[3]);
    return 2;
  }
  try {
    return run(argv[1], rows, cols);
  } catch (const rt::ModuleNotFound& e) {
    std::fprintf(stderr, "rmsnorm_host: %s\n", e.what());
    return 2;
  } catch (const rt::ManifestError& e) {
    std::fprintf(stderr, "rmsnorm_host: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rmsnorm_host: %s\n", e.what());
    return 1;
  }
}
