// Buffers past 2^31 elements: offsets into them are computed in 64 bits (ir::widen_offsets),
// decided per pointer parameter from the buffer each launch passes; every other offset stays
// in the kernel's own 32-bit arithmetic. The buffers here are gigabytes of address space of
// which the tests touch a few pages (ByteArray maps them lazily).
#include <catch2/catch.hpp>

#include <regex>

#include "backends/launchers.h"
#include "codegen/compile.h"
#include "codegen/module.h"
#include "codegen/ptx_loops.h"
#include "dsl/dsl.h"
#include "interp/interpreter.h"
#include "interp/launcher.h"
#include "ir/parser.h"
#include "ir/passes.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "launch/launcher.h"
#include "tests/codegen/codegen_test_util.h"
#include "templates/registry.h"
#include "launch/module_launcher.h"
#include "runtime/emulator/emulator.h"
#include "tests/runtime/helpers.h"

using namespace tilec;
using codegen::test::count;
using namespace tilec::dsl;
using ir::DType;

namespace {

constexpr int64_t kRows = 4, kCols = 64;

// out[r, c] = x[r * stride + c]: with stride 2^30 the offsets of rows 2 and 3 pass 2^31.
ir::Kernel strided_rows() {
  KernelBuilder kb("strided_rows");
  auto x = kb.arg(ptr_to(DType::i8), "x");
  auto out = kb.arg(ptr_to(DType::i8), "out");
  auto stride = kb.arg(ElemType{DType::i32, false}, "stride");
  auto r = arange(0, kRows), c = arange(0, kCols);
  store(out + r.col() * kCols + c.row(), load(x + r.col() * stride + c.row()));
  return kb.finish();
}

// The same rows through an offset carried around a loop: off += stride each trip.
ir::Kernel carried_rows() {
  KernelBuilder kb("carried_rows");
  auto x = kb.arg(ptr_to(DType::i8), "x");
  auto out = kb.arg(ptr_to(DType::i8), "out");
  auto stride = kb.arg(ElemType{DType::i32, false}, "stride");
  auto c = arange(0, kCols);
  Var off = stride * 0;
  for_range(0, kRows, 1, [&](Scalar r) {
    store(out + r * kCols + c, load(x + off + c));
    off = off + stride;
  });
  return kb.finish();
}

constexpr int64_t kStride = int64_t(1) << 30;

// x holds kRows rows of kCols bytes at multiples of kStride: 3 GiB of address space.
launch::Buffer big_input() {
  launch::Buffer x("x", DType::i8, size_t(kRows * kStride));
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < kCols; ++c) x.set_int(size_t(r * kStride + c), (r * 31 + c * 7) % 127 - 60);
  return x;
}

void check_rows(const launch::Buffer& out) {
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < kCols; ++c) {
      INFO("row " << r << " col " << c);
      REQUIRE(out.get_int(size_t(r * kCols + c)) == (r * 31 + c * 7) % 127 - 60);
    }
}

} // namespace

TEST_CASE("a lazily mapped buffer costs only the pages written", "[runtime][large]") {
  ByteArray a(size_t(8) << 30); // 8 GiB of address space
  CHECK(a.lazy());
  CHECK(a.resident_bytes() == 0);
  a[size_t(7) << 30] = std::byte{1};
  a[10] = std::byte{2};
  CHECK(a.resident_bytes() <= 2 * 65536);
  CHECK(a.resident_bytes() > 0);
  ByteArray small(100);
  CHECK_FALSE(small.lazy());
  CHECK(small.resident_bytes() == 100);
  // A copy takes the pages the source wrote, and the same bytes.
  ByteArray b = a;
  CHECK(b[size_t(7) << 30] == std::byte{1});
  CHECK(b[10] == std::byte{2});
  CHECK(b.resident_bytes() <= 2 * 65536);
}

TEST_CASE("widen_offsets recomputes the chain into a large buffer in i64 and leaves the rest", "[ir][large]") {
  ir::Kernel k = strided_rows();
  std::string before = ir::print(*k);
  ir::Kernel w = ir::clone(*k);
  CHECK(ir::print(*w) == before);
  CHECK(ir::widen_offsets(*w, {"x"}) == 1);
  ir::verify(*w);
  std::string after = ir::print(*w);
  INFO(before << "\n----\n" << after);
  // x's row offset (r * stride) is computed in i64, its column offset (an arange) needs no
  // widening, and out's row offset (r * 64) stays i32.
  CHECK(std::regex_search(after, std::regex(R"(cast %stride : i64)")));
  CHECK(std::regex_search(after, std::regex(R"(mul %\d+, %\d+ : tile<4x1xi64>)")));
  CHECK(std::regex_search(after, std::regex(R"(mul %\d+, %\d+ : tile<4x1xi32>)")));
  CHECK(std::regex_search(after, std::regex(R"(cast %\d+ : tile<64xi64>)")) == false);
  CHECK(before.find("i64") == std::string::npos);
  // Nothing named: nothing changes.
  ir::Kernel same = ir::clone(*k);
  CHECK(ir::widen_offsets(*same, {}) == 0);
  CHECK(ir::print(*same) == before);
}

TEST_CASE("a loop-carried offset into a large buffer is carried in i64", "[ir][large]") {
  ir::Kernel w = ir::clone(*carried_rows());
  CHECK(ir::widen_offsets(*w, {"x"}) == 1);
  ir::verify(*w);
  std::string after = ir::print(*w);
  INFO(after);
  // The for op carries an i64 (the i32 one is dead and gone).
  CHECK(std::regex_search(after, std::regex(R"(iter_args\(%\d+ = %\d+\) -> \(i64\))")));
}

TEST_CASE("offsets past 2^31 elements are right on every CPU backend", "[codegen][large][emulator]") {
  launch::Buffer x = big_input();
  for (auto make : {+[] { return ir::Kernel(strided_rows()); }, +[] { return ir::Kernel(carried_rows()); }}) {
    ir::Kernel k = make();
    INFO(k->name);
    std::vector<std::unique_ptr<launch::Launcher>> launchers;
    launchers.push_back(interp::make_interpret_launcher());
    launchers.push_back(backends::make_emulate_launcher(backends::EmuLowering::emu));
    launchers.push_back(backends::make_emulate_launcher(backends::EmuLowering::nvptx));
    for (auto& l : launchers) {
      INFO(l->backend());
      launch::Buffer out("out", DType::i8, size_t(kRows * kCols));
      l->launch(k, 1, {1, 1, 1}, {launch::Arg::of(x), launch::Arg::of(out), launch::Arg::of_int(kStride)});
      check_rows(out);
    }
  }
  // Untouched pages of x never took memory.
  CHECK(x.bytes.resident_bytes() <= size_t(kRows) * 2 * 65536);
}

TEST_CASE("a module with 32-bit offsets refuses a buffer past 2^31 elements", "[codegen][large][emulator]") {
  rt::test::TempDir dir;
  ir::Kernel k = strided_rows();
  codegen::CompileOptions o;
  o.target = codegen::Target::emu;
  o.num_warps = 1;
  rt::Manifest small = codegen::write_module(*k, codegen::compile(*k, o), o, {}, dir.path / "small", "m");
  o.large_buffers = {"x"};
  rt::Manifest large = codegen::write_module(*k, codegen::compile(*k, o), o, {}, dir.path / "large", "m");
  CHECK_FALSE(small.params[0].offsets64);
  CHECK(large.params[0].offsets64);
  CHECK_FALSE(large.params[1].offsets64);
  // The manifest says so and reads back.
  CHECK(rt::read_manifest(dir.path / "large" / "m.toml").params[0].offsets64);

  launch::Buffer x = big_input();
  std::vector<std::int8_t> out(size_t(kRows * kCols));
  std::vector<rt::Arg> args = {
      rt::Arg::buffer(reinterpret_cast<std::uint64_t>(x.bytes.data()), x.bytes.size(), rt::ScalarType::i8),
      rt::Arg::array(out.data(), out.size()), rt::Arg(std::int32_t(kStride))};
  rt::EmuModule m32(rt::read_manifest(dir.path / "small" / "m.toml"));
  CHECK_THROWS_WITH(m32.launch({1, 1, 1}, args),
                    Catch::Contains("parameter 'x' is given 4294967296 elements of i8") &&
                        Catch::Contains("--large-buffers x"));
  rt::EmuModule m64(rt::read_manifest(dir.path / "large" / "m.toml"));
  m64.launch({1, 1, 1}, args);
  for (int64_t r = 0; r < kRows; ++r) CHECK(out[size_t(r * kCols + 5)] == (r * 31 + 5 * 7) % 127 - 60);

  // A name that is no pointer parameter is an error.
  o.large_buffers = {"stride"};
  CHECK_THROWS_WITH(codegen::compile(*k, o), Catch::Contains("no pointer parameter of that name"));
}

TEST_CASE("64-bit offsets cost 64-bit arithmetic only in the large variant", "[codegen][large]") {
  ir::Kernel k = strided_rows();
  codegen::CompileOptions o;
  o.num_warps = 1;
  o.run_ptxas = false;
  std::string small = codegen::compile(*k, o).ptx;
  o.large_buffers = {"x"};
  std::string large = codegen::compile(*k, o).ptx;
  INFO(small << "\n----\n" << large);
  CHECK(count(small, "mul.lo.s64") + count(small, "mad.lo.s64") == 0);
  CHECK(count(large, "mul.lo.s64") + count(large, "mad.lo.s64") + count(large, "mul.wide.s32") >= 1);
}

TEST_CASE("paged attention keeps 32-bit K/V offsets below 2^31 elements and pays little above",
          "[codegen][large][paged_attention]") {
  const templates::KernelTemplate* t = templates::find_template("paged_attention");
  REQUIRE(t);
  templates::ParamMap params{{"block_n", 64}, {"head_group", 4}, {"num_warps", 4}, {"num_splits", 1}, {"num_stages", 2}};
  templates::ParamMap shape;
  for (const templates::Param& p : t->shape) shape[p.name] = p.value;
  shape["batch"] = 1, shape["hq"] = 32, shape["hkv"] = 8, shape["sq"] = 1, shape["head_dim"] = 128;
  shape["block_size"] = 16, shape["dtype"] = 2; // bf16
  ir::Kernel k = t->build(params, shape);
  codegen::CompileOptions o;
  o.arch = "sm_90";
  o.run_ptxas = codegen::find_ptxas().has_value();
  codegen::CompiledKernel small = codegen::compile(*k, o);
  o.large_buffers = {"k_cache", "v_cache"};
  codegen::CompiledKernel large = codegen::compile(*k, o);
  auto wide_ops = [](const codegen::PtxLoop& l) {
    return l.count("mul.lo.s64") + l.count("mad.lo.s64") + l.count("mul.wide.s32") + l.count("mad.wide.s32");
  };
  std::vector<codegen::PtxLoop> ls = codegen::ptx_loops(small.ptx), ll = codegen::ptx_loops(large.ptx);
  const codegen::PtxLoop *s = codegen::main_loop(ls), *l = codegen::main_loop(ll);
  REQUIRE(s);
  REQUIRE(l);
  WARN("paged attention K/V loop, caches below 2^31 elements: " << s->instructions << " PTX instructions per step, "
       << s->count("mul.lo.s64") + s->count("mad.lo.s64") << " 64-bit multiply(-add)s, " << wide_ops(*s)
       << " counting 32x32->64 ones; above: " << l->instructions << ", " << l->count("mul.lo.s64") + l->count("mad.lo.s64")
       << ", " << wide_ops(*l) << "; registers " << (small.ptxas ? small.ptxas->registers : 0) << " / "
       << (large.ptxas ? large.ptxas->registers : 0));
  // Below 2^31 the offsets stay 32-bit: no 64-bit multiply in the loop.
  CHECK(s->count("mul.lo.s64") + s->count("mad.lo.s64") == 0);
  // Above, the page offset is formed in 64 bits once per row, not per element, and the loop
  // grows by a few percent.
  CHECK(wide_ops(*l) >= 1);
  CHECK(l->instructions <= s->instructions * 11 / 10);
  CHECK(l->count("mma") == s->count("mma"));
  CHECK(l->count("cp.async.cg") == s->count("cp.async.cg"));
}
