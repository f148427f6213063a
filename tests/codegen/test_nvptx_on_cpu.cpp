// The nvptx lowering, executed: the GPU's own target code (target_nvptx.cpp) rewritten for
// the emulator (nvptx_on_cpu.cpp) runs every kernel here, under the emulator's checks. Two
// real escapes motivated it: a shuffle member mask of 0xffff and a bf16 conversion that
// truncated; both passed everything that ran only the emulator's own hooks.
#include <catch2/catch.hpp>

#include <cstring>

#include "abi/float16.h"
#include "backends/launchers.h"
#include "codegen/compile.h"
#include "interp/interpreter.h"
#include "interp/launcher.h"
#include "launch/launcher.h"
#include "templates/registry.h"
#include "runtime/emulator/emulator.h"
#include "tests/codegen/codegen_test_util.h"

using namespace tilec;
using ir::DType;
using ir::OpKind;

namespace {

templates::ParamMap defaults(const std::vector<templates::Param>& ps) {
  templates::ParamMap m;
  for (const templates::Param& p : ps) m[p.name] = p.value;
  return m;
}

// out[i] = cast(x[i]) for i < n: f32 -> `to`.
ir::Kernel narrowing(DType to, int64_t block) {
  auto fn = std::make_shared<ir::Function>("narrow_" + std::string(ir::dtype_name(to)));
  ir::Builder b(*fn);
  auto* x = fn->add_param("x", codegen::test::ptr_type(DType::f32));
  auto* out = fn->add_param("out", codegen::test::ptr_type(to));
  auto* n = fn->add_param("n", ir::scalar_type(DType::i32));
  auto* offs = b.binary(OpKind::Add,
                        b.splat(b.binary(OpKind::Mul, b.program_id(0), codegen::test::i32c(b, block)), {block}),
                        b.arange(0, block));
  auto* mask = b.binary(OpKind::Lt, offs, b.splat(n, {block}));
  auto* v = b.load(b.addptr(b.splat(x, {block}), offs), mask);
  b.store(b.addptr(b.splat(out, {block}), offs), b.cast(v, to), mask);
  b.ret();
  return fn;
}

} // namespace

TEST_CASE("nvptx lowering on the emulator: every kernel's default problem on every path", "[codegen][nvptx][emulator]") {
  int checked = 0;
  for (const templates::KernelTemplate& t : templates::all_templates()) {
    if (!t.make_problem) continue;
    templates::ParamMap params = defaults(t.params), shape = defaults(t.shape);
    std::vector<std::string> paths;
    for (const templates::RunPath& p : t.paths) paths.push_back(p.name);
    if (paths.empty()) paths.push_back("");
    for (const std::string& path : paths) {
      INFO(t.name << " path " << (path.empty() ? templates::default_path(t) : path));
      templates::Problem p = templates::make_problem(t, {shape, 3, {}, {}});
      auto emu = backends::make_emulate_launcher(backends::EmuLowering::nvptx);
      templates::run_problem(t, path, params, p, *emu);
      templates::Comparison c = templates::compare_outputs(p);
      INFO(c.first_mismatch);
      CHECK(c.ok);
      std::string traffic = templates::traffic_error(t, path, params, p, emu->stats());
      INFO(traffic);
      CHECK(traffic.empty());
      ++checked;
    }
  }
  CHECK(checked >= 5); // vector_add, softmax, matmul, paged attention fused and decomposed
}

TEST_CASE("nvptx lowering on the emulator: f32 -> bf16 and f16 round to nearest even, bit for bit",
          "[codegen][nvptx][emulator]") {
  // Values on, just under and just over every kind of rounding boundary, both signs, and the
  // specials: a conversion that truncates, or rounds ties away from zero, differs on some.
  std::vector<float> values;
  for (std::uint32_t hi : {0x3f80u, 0x3f81u, 0x4049u, 0x7f7fu, 0x0001u, 0x3880u, 0x4780u})
    for (std::uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu, 0x1234u, 0xc000u})
      for (std::uint32_t sign : {0u, 0x80000000u}) values.push_back(std::bit_cast<float>(sign | hi << 16 | lo));
  for (float f : {0.0f, -0.0f, 65504.0f, 65520.0f, 1e-8f, 6.1e-5f, 3.0e38f, INFINITY, -INFINITY})
    values.push_back(f);
  const int64_t n = int64_t(values.size());
  for (DType to : {DType::bf16, DType::f16}) {
    INFO(ir::dtype_name(to));
    ir::Kernel k = narrowing(to, 128);
    launch::Buffer x("x", DType::f32, size_t(n));
    std::memcpy(x.bytes.data(), values.data(), values.size() * 4);
    launch::Buffer want("out", to, size_t(n)), got("out", to, size_t(n));
    launch::Grid grid{(n + 127) / 128, 1, 1};
    interp::make_interpret_launcher()->launch(k, 4, grid,
                                               {launch::Arg::of(x), launch::Arg::of(want), launch::Arg::of_int(n)});
    backends::make_emulate_launcher(backends::EmuLowering::nvptx)
        ->launch(k, 4, grid, {launch::Arg::of(x), launch::Arg::of(got), launch::Arg::of_int(n)});
    int differ = 0;
    for (int64_t i = 0; i < n; ++i) {
      std::uint16_t a, b;
      std::memcpy(&a, want.bytes.data() + 2 * i, 2);
      std::memcpy(&b, got.bytes.data() + 2 * i, 2);
      std::uint16_t exact = to == DType::bf16 ? f32_to_bf16_bits(values[size_t(i)]) : f32_to_f16_bits(values[size_t(i)]);
      if (a != b || a != exact) {
        ++differ;
        UNSCOPED_INFO("value bits " << std::hex << std::bit_cast<std::uint32_t>(values[size_t(i)]) << ": interpreter "
                                    << a << ", nvptx lowering " << b << ", round to nearest even " << exact);
      }
    }
    CHECK(differ == 0);
  }
}
