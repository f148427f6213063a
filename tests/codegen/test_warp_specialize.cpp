// Warp specialization of the sm_90 GEMM (issue 46, items 2 and 5): with warp_specialize=1 a
// producer warpgroup after the kernel's warps issues every TMA copy of the K loop (waiting for
// each stage's "empty" mbarrier before refilling it), the consumers wait for the "full" ones,
// keep one wgmma group in flight and arrive on "empty" once it retires; setmaxnreg moves
// registers from the producer to the consumers. Read statically from the PTX (and ptxas's
// verdict), run on the emulator in both lowerings against a double-precision reference, and
// each classic bug planted into the emu lowering's LLVM IR (or a hand-written kernel, for
// setmaxnreg) reported by the emulator as a named error.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <random>
#include <regex>

#include "backends/launchers.h"
#include "codegen/compile.h"
#include "codegen/layout_print.h"
#include "codegen/module.h"
#include "codegen/ptx_loops.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "launch/launcher.h"
#include "launch/module_launcher.h"
#include "runtime/emulator/emulator.h"
#include "templates/kernels.h"
#include "tests/codegen/codegen_test_util.h"
#include "tests/runtime/helpers.h"

using namespace tilec;
using ir::DType;

namespace {

struct Gemm {
  int64_t bm, bn, bk, stages;
  int warps;
  int64_t m, n, k;
};

ir::Kernel ws_matmul(const Gemm& g, bool ws = true) {
  // The largest powers of two up to 16 dividing n and k, as the template promises.
  return templates::matmul(g.bm, g.bn, g.bk, DType::bf16, g.stages, std::min<int64_t>(16, g.n & -g.n),
                           std::min<int64_t>(16, g.k & -g.k), ws);
}

struct Problem {
  launch::Buffer a, b;
  std::vector<double> want;
};

Problem problem(const Gemm& g, uint32_t seed) {
  Problem p{launch::Buffer("a", DType::bf16, size_t(g.m * g.k)), launch::Buffer("b", DType::bf16, size_t(g.k * g.n)), {}};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(-1, 1);
  for (launch::Buffer* x : {&p.a, &p.b})
    for (size_t i = 0; i < x->count(); ++i) x->set(i, d(rng));
  p.want.assign(size_t(g.m * g.n), 0.0);
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t q = 0; q < g.k; ++q) {
      const double av = p.a.get(size_t(i * g.k + q));
      for (int64_t j = 0; j < g.n; ++j) p.want[size_t(i * g.n + j)] += av * p.b.get(size_t(q * g.n + j));
    }
  return p;
}

// Launches the GEMM on `launcher`; "" when it ran and matched the reference, else the error.
std::string run(launch::Launcher& launcher, const ir::Kernel& kern, const Gemm& g, Problem& p) {
  launch::Buffer out("c", DType::f32, size_t(g.m * g.n));
  try {
    launcher.launch(kern, g.warps, {(g.m + g.bm - 1) / g.bm, (g.n + g.bn - 1) / g.bn, 1},
                    {launch::Arg::of(p.a), launch::Arg::of(p.b), launch::Arg::of(out), launch::Arg::of_int(g.m),
                     launch::Arg::of_int(g.n), launch::Arg::of_int(g.k)});
  } catch (const std::exception& e) {
    return e.what();
  }
  for (size_t i = 0; i < p.want.size(); ++i)
    if (std::abs(out.get(i) - p.want[i]) > 1e-4 * (1 + std::abs(p.want[i])))
      return fmt::format("c[{}] = {}, want {}", i, out.get(i), p.want[i]);
  return "";
}

// The name of the private string constant (a site) whose text contains `marker`.
std::string site_global(const std::string& ir, const std::string& marker) {
  std::smatch m;
  std::regex r("(@[A-Za-z0-9_.]+) = [^\\n]*c\"[^\"\\n]*" + std::regex_replace(marker, std::regex("[.()]"), "\\$&"));
  REQUIRE(std::regex_search(ir, m, r));
  return m[1].str();
}

// Applies `edit` to every line calling `callee` with the site `global` (at least one).
void edit_calls(std::string& ir, const std::string& callee, const std::string& global,
                const std::function<std::string(const std::string&)>& edit) {
  std::istringstream in(ir);
  std::string out;
  int edited = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.find("@" + callee + "(") != std::string::npos &&
        (line.find(global + ")") != std::string::npos || line.find(global + ",") != std::string::npos)) {
      line = edit(line);
      ++edited;
    }
    out += line + "\n";
  }
  REQUIRE(edited > 0);
  ir = out;
}

// The emulate launcher, its module built from the emu lowering's LLVM IR after `plant` edits it.
std::unique_ptr<launch::Launcher> planted_launcher(const std::function<void(std::string&)>& plant,
                                                 const std::filesystem::path& dir) {
  auto source = [plant, dir](const ir::Function& fn, int num_warps, const launch::Specialization&) {
    codegen::CompileOptions o;
    o.target = codegen::Target::emu;
    o.num_warps = num_warps;
    codegen::CompiledKernel ck = codegen::compile(fn, o);
    std::string ir = codegen::lower_to_llvm(fn, o).llvm_ir;
    plant(ir);
    ck.object = codegen::emit_object(ir, o);
    return codegen::write_module(fn, ck, o, {}, dir, fn.name);
  };
  return launch::make_module_launcher(source, false, "emulate");
}

const Gemm kPinned{128, 128, 64, 3, 4, 136, 144, 320}; // 5 K steps over 3 stages, partial M and N tiles

} // namespace

TEST_CASE("warp specialization: the sm_90 GEMM's consumer K loop has no CTA barrier, the producer waits for empty "
          "stages, and setmaxnreg moves the registers",
          "[codegen][wgmma][tma][nvptx]") {
  ir::Kernel k = ws_matmul(kPinned);
  codegen::CompileOptions o; // sm_90, 4 warps
  codegen::CompiledKernel ck = codegen::compile(*k, o);
  INFO(ck.ptx);
  // The block: the 4 consumer warps and one producer warpgroup; its launch ceiling.
  CHECK(ck.threads_per_block == 256);
  CHECK(ck.stats.threads_per_block == 256);
  CHECK(ck.ptx.find(".maxntid 256, 1, 1") != std::string::npos);
  CHECK(ck.ptx.find(".maxnreg 240") != std::string::npos);
  CHECK(codegen::test::count(ck.ptx, "setmaxnreg.dec.sync.aligned.u32 40;") == 1);
  CHECK(codegen::test::count(ck.ptx, "setmaxnreg.inc.sync.aligned.u32 240;") == 1);
  CHECK(ck.ptx.find("setmaxnreg.dec") < ck.ptx.find("cp.async.bulk.tensor.2d.shared"));
  // The two loops: the producer's (copies, no MMA) and the consumers' (MMAs, no copy).
  const std::vector<codegen::PtxLoop> all = codegen::ptx_loops(ck.ptx);
  const codegen::PtxLoop *producer = nullptr, *consumer = nullptr;
  for (const codegen::PtxLoop& l : all) {
    if (l.count("wgmma.mma_async") && !consumer) consumer = &l;
    if (l.count("cp.async.bulk") && !l.count("wgmma.mma_async") && !producer) producer = &l;
  }
  REQUIRE(producer);
  REQUIRE(consumer);
  // What `tilec compile` reports: the consumers' loop (the MMAs) as the main loop, the
  // producer's on a line of its own.
  CHECK(codegen::main_loop(all) == consumer);
  CHECK(codegen::producer_loop(all) == producer);
  const std::optional<codegen::PtxLoop> main = codegen::kernel_main_loop(*k, ck.ptx),
                                        copies = codegen::kernel_producer_loop(*k, ck.ptx);
  REQUIRE(main);
  REQUIRE(copies);
  CHECK(main->first_line == consumer->first_line);
  CHECK(copies->first_line == producer->first_line);
  // A K step: 55 PTX on the consumers' side (69 unspecialized), 29 on the producer's.
  CHECK(consumer->instructions <= 55);
  CHECK(producer->instructions <= 29);
  CHECK(consumer->count("wgmma.mma_async") == 8);
  CHECK(consumer->count("cp.async.bulk") == 0);
  CHECK(consumer->count("bar.sync") == 0);     // no CTA barrier in the steady state
  CHECK(consumer->count("barrier.sync") == 0); // nor a named one
  CHECK(consumer->count("mbarrier.try_wait.parity") == 1); // full
  CHECK(consumer->count("mbarrier.arrive") == 1);          // empty, after the group retired
  CHECK(consumer->count("wgmma.wait_group") == 1);
  CHECK(producer->count("mbarrier.try_wait.parity") == 1); // empty
  CHECK(producer->count("mbarrier.arrive.expect_tx") == 1); // full
  CHECK(producer->count("cp.async.bulk") == 3);
  CHECK(producer->count("bar.sync") == 0);
  // In the consumer's trip the arrival follows the wait that retires the previous group.
  const std::vector<std::string> lines = [&] {
    std::vector<std::string> v;
    std::istringstream in(ck.ptx);
    for (std::string l; std::getline(in, l);) v.push_back(l);
    return v;
  }();
  int wait_at = -1, arrive_at = -1;
  for (int i = consumer->first_line - 1; i < consumer->last_line; ++i) {
    if (lines[size_t(i)].find("wgmma.wait_group.sync.aligned 1") != std::string::npos) wait_at = i;
    if (lines[size_t(i)].find("mbarrier.arrive.shared") != std::string::npos) arrive_at = i;
  }
  CHECK(wait_at >= 0);
  CHECK(arrive_at > wait_at);
  // The epilogue's barrier (before the TMA store) is among the consumers only.
  CHECK(codegen::test::count_matches(ck.ptx, "barrier\\.sync\\s+1, 128;") >= 1);
  CHECK(codegen::test::count_matches(ck.ptx, "bar\\.sync\\s+0;") == 1); // the mbarrier inits', before the branch
  if (codegen::test::have_ptxas()) {
    REQUIRE(ck.ptxas.has_value());
    INFO(ck.ptxas->log);
    CHECK(ck.ptxas->spill_stores == 0);
    CHECK(ck.ptxas->spill_loads == 0);
    CHECK(ck.ptxas->log.find("serialized") == std::string::npos);
  }
  // The loop's attribute prints and parses back.
  const std::string text = ir::print(*k);
  CHECK(text.find(" stages 3 warp_specialize") != std::string::npos);
  CHECK(ir::print(*ir::parse(text)) == text);
  // warp_specialize=0 is the kernel it always was.
  const codegen::CompiledKernel plain = codegen::compile(*ws_matmul(kPinned, false), o);
  const codegen::CompiledKernel before = codegen::compile(*templates::matmul(128, 128, 64, DType::bf16, 3, 16, 16), o);
  CHECK(plain.ptx == before.ptx);
  CHECK(plain.threads_per_block == 128);
  // Unspecialized, the one K loop both copies and multiplies: it is the main loop and there is
  // no producer loop.
  const std::vector<codegen::PtxLoop> plain_loops = codegen::ptx_loops(plain.ptx);
  const codegen::PtxLoop* plain_main = codegen::main_loop(plain_loops);
  REQUIRE(plain_main);
  CHECK(plain_main->count("wgmma.mma_async") == 8);
  CHECK(plain_main->count("cp.async.bulk") > 0);
  CHECK(codegen::producer_loop(plain_loops) == nullptr);
  CHECK_FALSE(codegen::kernel_producer_loop(*k, plain.ptx).has_value());
  // Where the loop does not qualify (no TMA: cp.async copies; sm_80: no wgmma), asking for it
  // changes nothing.
  for (const char* arch : {"sm_90", "sm_80"}) {
    INFO(arch);
    codegen::CompileOptions no = o;
    no.arch = arch;
    no.tma = std::string(arch) != "sm_90";
    no.run_ptxas = false;
    const codegen::CompiledKernel asked = codegen::compile(*k, no), not_asked = codegen::compile(*ws_matmul(kPinned, false), no);
    CHECK(asked.threads_per_block == 128);
    CHECK(asked.ptx == not_asked.ptx);
    CHECK(asked.ptx.find("setmaxnreg") == std::string::npos);
    CHECK(codegen::producer_loop(codegen::ptx_loops(asked.ptx)) == nullptr);
  }
  CHECK_THAT(codegen::print_pipelines(*k, o), Catch::Contains("warp specialized: warpgroup 1 (threads 128-255) issues every copy"));
}

// (scripts/test.sh runs this again with TILEC_EMU_SCHEDULE=reverse.)
TEST_CASE("warp specialization: the GEMM runs on the emulator in both lowerings against the reference",
          "[codegen][wgmma][tma][emulator]") {
  // The pinned tile; K not a multiple of block_k with a two-stage ring; two consumer warpgroups.
  const std::vector<Gemm> gemms = {kPinned, {64, 64, 32, 2, 4, 70, 80, 200}, {128, 64, 32, 4, 8, 128, 72, 96}};
  uint32_t seed = 19;
  for (const Gemm& g : gemms) {
    INFO("block " << g.bm << "x" << g.bn << "x" << g.bk << ", " << g.stages << " stages, " << g.warps
                  << " warps; m=" << g.m << " n=" << g.n << " k=" << g.k);
    ir::Kernel kern = ws_matmul(g);
    codegen::CompileOptions o;
    o.num_warps = g.warps;
    o.target = codegen::Target::emu;
    const codegen::LoweringStats st = codegen::lower_to_llvm(*kern, o).stats;
    CHECK(st.threads_per_block == 32 * g.warps + 128);
    CHECK(st.tma_loads == 2);
    Problem p = problem(g, seed++);
    for (auto lowering : {backends::EmuLowering::emu, backends::EmuLowering::nvptx}) {
      INFO((lowering == backends::EmuLowering::emu ? "emu lowering" : "nvptx lowering"));
      CHECK(run(*backends::make_emulate_launcher(lowering), kern, g, p) == "");
    }
  }
}

TEST_CASE("warp specialization: the emulator names each planted synchronization bug", "[codegen][wgmma][emulator]") {
  const Gemm g = kPinned;
  ir::Kernel kern = ws_matmul(g);
  Problem p = problem(g, 7);
  rt::test::TempDir dir;
  int variant = 0;
  auto planted = [&](const std::function<void(std::string&)>& plant) {
    return run(*planted_launcher(plant, dir.path / std::to_string(variant++)), *&kern, g, p);
  };
  // The right kernel, through the same path, runs.
  CHECK(planted([](std::string&) {}) == "");
  const char* wait = "tilec_emu_mbarrier_wait";
  SECTION("the producer refills a stage without waiting for its empty phase") {
    const std::string e = planted([&](std::string& ir) {
      edit_calls(ir, wait, site_global(ir, "waited for by the producer"), [](const std::string&) { return ""; });
    });
    INFO(e);
    // The refill overwrites bytes of a copy the consumers have not waited for.
    CHECK(e.find("kernel 'matmul'") != std::string::npos);
    CHECK(e.find("TMA copy issued ahead)) that a TMA copy") != std::string::npos);
    CHECK(e.find("which this thread has not waited for: the copy may land after it") != std::string::npos);
  }
  SECTION("a consumer reads a stage before its full phase completes") {
    const std::string e = planted([&](std::string& ir) {
      edit_calls(ir, wait, site_global(ir, "TMA copies waited for"), [](const std::string&) { return ""; });
    });
    INFO(e);
    // The MMA reads the stage before the copy landed (a bytes' phase not waited for, or in the
    // forward schedule, where the consumers run first, bytes no copy has written yet).
    CHECK(e.find("(dot: dot (wgmma) operands A and B read)") != std::string::npos);
    CHECK((e.find("which this thread has not waited for (mbarrier.try_wait.parity missing)") != std::string::npos ||
           e.find("which no thread of the block has written") != std::string::npos));
  }
  SECTION("a consumer's phase bit is off by one") {
    const std::string e = planted([&](std::string& ir) {
      int n = 0;
      edit_calls(ir, wait, site_global(ir, "TMA copies waited for"), [&](const std::string& line) {
        std::smatch m;
        REQUIRE(std::regex_search(line, m, std::regex("(ptr [^,]+, ptr [^,]+, )i32 ([^,]+),")));
        const std::string flipped = fmt::format("%planted.parity{}", n++);
        const std::string indent = line.substr(0, line.find_first_not_of(' '));
        return fmt::format("{}{} = xor i32 {}, 1\n{}", indent, flipped, m[2].str(),
                           std::regex_replace(line, std::regex("i32 " + std::regex_replace(m[2].str(), std::regex("[.%]"), "\\$&") + ","),
                                              "i32 " + flipped + ",", std::regex_constants::format_first_only));
      });
    });
    INFO(e);
    CHECK(e.find("mbarrier phase error") != std::string::npos);
  }
  SECTION("a consumer never arrives on the empty mbarrier") {
    const std::string e = planted([&](std::string& ir) {
      edit_calls(ir, "tilec_emu_mbarrier_arrive", site_global(ir, "stage emptied (its wgmma retired)"),
                 [](const std::string&) { return ""; });
    });
    INFO(e);
    CHECK(e.find("an mbarrier phase that never completes") != std::string::npos);
  }
  SECTION("the consumers ask for a register count that is no multiple of 8") {
    const std::string e = planted([&](std::string& ir) {
      edit_calls(ir, "tilec_emu_setmaxnreg", site_global(ir, "consumer warpgroups' registers"),
                 [](const std::string& line) { return std::regex_replace(line, std::regex("i32 240,"), "i32 236,"); });
    });
    INFO(e);
    CHECK(e.find("setmaxnreg misuse") != std::string::npos);
    CHECK(e.find("setmaxnreg.inc to 236 registers; the count is a multiple of 8 in [24, 256]") != std::string::npos);
  }
}

namespace {

// A hand-written emu-ABI kernel of `threads` threads in warpgroups of 128 that runs setmaxnreg:
// warpgroup 0 (the producer) dec to 40, the others inc to 232, from a launch ceiling of 168.
// Modes: 0 right; 1 the consumers ask for 236 (no multiple of 8); 2 only warp 0 of warpgroup 1
// runs its inc; 3 every warpgroup inc to 256 (past the register file with 3 warpgroups); 4 the
// producer's dec asks for more than its ceiling.
const char* kSetmaxnreg = R"C(
#include "abi/emu_abi.h"
void regs(tilec_emu_thread* c, void* const* args) {
  int32_t mode = *(int32_t const*)args[0];
  uint32_t t = tilec_emu_thread_id(c), g = t / 128;
  if (mode == 3) tilec_emu_setmaxnreg(c, 256, 1, 168, "every warpgroup inc");
  else if (g == 0) tilec_emu_setmaxnreg(c, mode == 4 ? 200 : 40, 0, 168, "producer dec");
  else if (!(mode == 2 && g == 1 && t / 32 != 4)) tilec_emu_setmaxnreg(c, mode == 1 ? 236 : 232, 1, 168, "consumer inc");
  tilec_emu_barrier(c, 0);
}
)C";

std::string run_setmaxnreg(int mode, rt::EmuSchedule order) {
  static rt::test::TempDir dir;
  static const std::filesystem::path so = [] {
    std::ofstream(dir.path / "regs.c") << kSetmaxnreg;
    std::filesystem::path lib = dir.path / "regs.so";
    rt::test::Output o = rt::test::run_command("cc -O1 -shared -fPIC -I " + rt::test::quoted(TILEC_SOURCE_DIR) +
                                               " -o " + rt::test::quoted(lib) + " " +
                                               rt::test::quoted(dir.path / "regs.c"));
    INFO(o.text);
    REQUIRE(o.status == 0);
    return lib;
  }();
  rt::Manifest m;
  m.kernel = m.symbol = "regs";
  m.arch = "host";
  m.emulator = so;
  m.params = {{"mode", {rt::ScalarType::i32, false}}};
  m.threads_per_block = 384;
  rt::EmuModule mod(m);
  rt::EmuOptions o;
  o.schedule = {order, 1};
  try {
    mod.launch({2, 1, 1}, std::vector<rt::Arg>{rt::Arg(std::int32_t(mode))}, {}, o);
  } catch (const rt::EmulationError& e) {
    return e.what();
  }
  return "";
}

} // namespace

TEST_CASE("warp specialization: the emulator checks setmaxnreg as PTX defines it", "[emulator][wgmma]") {
  for (rt::EmuSchedule order : {rt::EmuSchedule::forward, rt::EmuSchedule::reverse}) {
    CHECK(run_setmaxnreg(0, order) == "");
    CHECK_THAT(run_setmaxnreg(1, order),
               Catch::Contains("setmaxnreg misuse (at consumer inc): setmaxnreg.inc to 236 registers; the count is a "
                               "multiple of 8 in [24, 256]"));
    CHECK_THAT(run_setmaxnreg(2, order),
               Catch::Contains("setmaxnreg misuse: thread 128 ran it 1 time (ceiling 232), thread 160 of the same "
                               "warpgroup 1 0 times (ceiling 0); every warp of a warpgroup runs each setmaxnreg"));
    CHECK_THAT(run_setmaxnreg(3, order),
               Catch::Contains("setmaxnreg misuse: the warps' register ceilings add up to 98304 registers, more than "
                               "the register file's 65536"));
    CHECK_THAT(run_setmaxnreg(4, order),
               Catch::Contains("setmaxnreg misuse (at producer dec): setmaxnreg.dec to 200 registers from the warp's "
                               "ceiling of 168"));
  }
}
