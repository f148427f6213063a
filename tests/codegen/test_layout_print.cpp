// `tilec ir --stage layouts`: the tile IR with the layout plan. Every op result
// names a layout from the legend, the convert_layout lines are the plan's
// conversions and what the lowering emits, and the print is the plain print
// plus annotations.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <functional>
#include <regex>
#include <set>
#include <sstream>

#include "codegen/axis_info.h"
#include "codegen/compile.h"
#include "codegen/layout_plan.h"
#include "codegen/layout_print.h"
#include "ir/builder.h"
#include "ir/printer.h"
#include "templates/registry.h"
#include "tests/tilec_process.h"

using namespace tilec;
using namespace tilec::codegen;

namespace {

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

int ops_with_results(const ir::Block& b) {
  int n = 0;
  for (const auto& op : b.ops) {
    n += !op->results.empty();
    for (const auto& r : op->regions) n += ops_with_results(*r);
  }
  return n;
}

// Checks the print of `fn`'s layouts; returns the print.
std::string check_layouts(const ir::Function& fn, int num_warps, bool wgmma = false) {
  LayoutsPrint p = print_layouts(fn, num_warps, wgmma);
  INFO(p.text);
  std::vector<std::string> lines = split_lines(p.text);
  REQUIRE(lines.size() > 2);
  CHECK(lines[0].rfind("// layouts of @" + fn.name, 0) == 0);

  // The legend: #L0, #L1, ... in order; a slice's parent comes before it.
  static const std::regex def(R"(^#L(\d+) = (blocked<size_per_thread=\[[\d,]+\], threads_per_warp=\[[\d,]+\], )"
                              R"(warps_per_block=\[[\d,]+\], order=\[[\d,]+\](, warp_repeat=\[[\d,]+\]>  // wgmma )"
                              R"(m64nNk16 accumulator: warp w holds rows 16w \+ g, 16w \+ g \+ 8|>(  // mma\.sync m16n8 )"
                              R"(accumulator fragments, warps along [MN])?)|slice<dim=\d+, parent=#L(\d+)>)$)");
  size_t i = 1;
  int defined = 0;
  for (; i < lines.size() && !lines[i].empty(); ++i) {
    std::smatch m;
    INFO(lines[i]);
    REQUIRE(std::regex_match(lines[i], m, def));
    CHECK(std::stoi(m[1]) == defined);
    if (m[5].matched) CHECK(std::stoi(m[5]) < defined);
    ++defined;
  }
  CHECK(defined == p.layouts);
  CHECK(defined >= 1);

  // Every op line with results ends with one layout per result; convert_layout
  // lines name defined layouts.
  static const std::regex layout_ref(R"(#L(\d+))");
  static const std::regex layouts(R"((scalar|#L\d+( \| #L\d+)*))");
  static const std::regex convert(R"(^ *convert_layout %[\w.$"]+ : #L\d+ -> #L\d+( \(reshape %\w+\))?$)");
  int annotated = 0, converts = 0, dot_notes = 0;
  std::string plain;
  for (++i; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    INFO(l);
    for (auto it = std::sregex_iterator(l.begin(), l.end(), layout_ref); it != std::sregex_iterator(); ++it)
      CHECK(std::stoi((*it)[1]) < defined);
    if (l.find("convert_layout") != std::string::npos) {
      CHECK(std::regex_match(l, convert));
      ++converts;
      continue;
    }
    if (size_t c = l.find_first_not_of(' '); c != std::string::npos && l.compare(c, 2, "//") == 0) {
      // Each dot says where it runs.
      CHECK((l.find("// tensor cores: mma.sync.m16n8k16") != std::string::npos ||
             (wgmma && l.find("// tensor cores: wgmma.mma_async.m64n") != std::string::npos) ||
             l.find("// CUDA cores: FMA") != std::string::npos));
      ++dot_notes;
      continue;
    }
    size_t eq = l.find(" = ");
    size_t at = l.rfind("  : ");
    bool has_results = l.find_first_not_of(' ') < l.size() && l[l.find_first_not_of(' ')] == '%' && eq != std::string::npos;
    if (has_results) {
      REQUIRE(at != std::string::npos);
      ++annotated;
      size_t results = 1 + std::count(l.begin(), l.begin() + static_cast<std::ptrdiff_t>(eq), ',');
      std::vector<std::string> parts;
      size_t loc = l.find(" loc(", at);
      std::string ann = l.substr(at + 4, loc == std::string::npos ? std::string::npos : loc - at - 4);
      for (size_t s = 0;;) {
        size_t c = ann.find(", ", s);
        parts.push_back(ann.substr(s, c == std::string::npos ? std::string::npos : c - s));
        if (c == std::string::npos) break;
        s = c + 2;
      }
      CHECK(parts.size() == results);
      for (const std::string& part : parts) CHECK(std::regex_match(part, layouts));
    }
    if (at == std::string::npos) {
      plain += l + "\n";
    } else {
      size_t loc = l.find(" loc(", at);
      plain += l.substr(0, at) + (loc == std::string::npos ? "" : l.substr(loc)) + "\n";
    }
  }
  CHECK(annotated == ops_with_results(fn.body));
  int dots = 0;
  std::function<void(const ir::Block&)> count_dots = [&](const ir::Block& b) {
    for (const auto& op : b.ops) {
      dots += op->kind == ir::OpKind::Dot;
      for (const auto& r : op->regions) count_dots(*r);
    }
  };
  count_dots(fn.body);
  CHECK(dot_notes == dots);
  CHECK(annotated > 0);

  // The conversions printed are the plan's, and the lowering emits as many.
  AxisAnalysis axis(fn);
  LayoutPlan plan(fn, axis, num_warps, true, wgmma);
  CHECK(converts == p.conversions);
  CHECK(converts == static_cast<int>(plan.conversions().size()));
  CompileOptions o;
  o.num_warps = num_warps;
  o.wgmma = wgmma;
  CHECK(lower_to_llvm(fn, o).stats.conversions == converts);

  // Without its annotations and conversion lines it is the plain print.
  CHECK(plain == ir::print(fn));
  return p.text;
}

struct Built {
  ir::Kernel fn;
  int num_warps = 4;
};

Built build(const std::string& name, const std::vector<std::string>& sets = {},
            const std::vector<std::string>& shapes = {}) {
  const templates::KernelTemplate* t = templates::find_template(name);
  REQUIRE(t);
  templates::ParamMap params = templates::resolve_params(t->params, sets, "--set");
  templates::ParamMap shape = templates::resolve_params(t->shape, shapes, "--shape");
  Built b{t->build(params, shape)};
  if (params.count("num_warps")) b.num_warps = static_cast<int>(params.at("num_warps"));
  return b;
}

ir::Value* i32c(ir::Builder& b, int64_t v) {
  return b.constant(ir::scalar_type(ir::DType::i32), ir::ConstValue::of_int(v));
}

ir::Value* offsets2d(ir::Builder& b, int64_t rows, int64_t cols) {
  ir::Shape s{rows, cols};
  auto* r = b.broadcast(b.expand_dims(b.arange(0, rows), 1), s);
  auto* c = b.broadcast(b.expand_dims(b.arange(0, cols), 0), s);
  auto* stride = b.constant(ir::tile_type(ir::DType::i32, s), ir::ConstValue::of_int(cols));
  return b.binary(ir::OpKind::Add, b.binary(ir::OpKind::Mul, r, stride), c);
}

// A conversion at each place the lowering emits one: after a reshape that moves
// elements, after a value's definition, at the top of a loop body for a carried
// value and after the loop for its result.
ir::Kernel conversions_kernel() {
  auto fn = std::make_shared<ir::Function>("conversions");
  ir::Builder b(*fn);
  ir::Type f32_ptr{{ir::DType::f32, true}, {}};
  auto* x = fn->add_param("x", f32_ptr);
  auto* out = fn->add_param("out", f32_ptr);
  auto* n = fn->add_param("n", ir::scalar_type(ir::DType::i32));
  auto* v = b.load(b.addptr(b.splat(x, {16, 32}), offsets2d(b, 16, 32)));
  b.store(b.addptr(b.splat(out, {32, 16}), offsets2d(b, 32, 16)), b.reshape(v, {32, 16}));
  auto* row = b.addptr(b.splat(out, {16}), b.arange(0, 16));
  ir::Op* loop = b.for_op(i32c(b, 0), n, i32c(b, 1), {b.reduce(ir::ReduceKind::sum, v, 1)});
  ir::Block* outer = b.block();
  ir::Block& body = loop->region(0);
  b.set_block(&body);
  auto* t = b.load(b.addptr(b.splat(x, {16}), b.binary(ir::OpKind::Add, b.arange(0, 16), b.splat(body.args[0], {16}))));
  b.store(row, body.args[1]);
  b.yield({b.binary(ir::OpKind::Add, body.args[1], t)});
  b.check(*loop);
  b.set_block(outer);
  b.store(row, loop->results[0]);
  b.ret();
  return fn;
}

tilec::test::Process run_cli(const std::vector<std::string>& args) { return tilec::test::run_tilec(args); }

} // namespace

TEST_CASE("the layouts print of softmax names a layout for every value", "[codegen][layouts]") {
  for (const char* nw : {"num_warps=4", "num_warps=1"}) {
    Built b = build("softmax", {nw});
    std::string text = check_layouts(*b.fn, b.num_warps);
    CHECK_THAT(text, Catch::Contains("#L0 = blocked<"));
    CHECK_THAT(text, Catch::Contains("reduce max"));
  }
}

TEST_CASE("the layouts print of paged attention lists its conversions", "[codegen][layouts]") {
  Built b = build("paged_attention");
  std::string text = check_layouts(*b.fn, b.num_warps);
  // Its reductions produce slices, and its loop-carried values are converted.
  CHECK_THAT(text, Catch::Contains("slice<dim="));
  CHECK_THAT(text, Catch::Contains("convert_layout"));
  CHECK_THAT(text, Catch::Contains("for %"));

  Built f16 = build("paged_attention", {"head_group=1", "block_n=16"}, {"dtype=f16", "alibi=1", "head_dim=128"});
  check_layouts(*f16.fn, f16.num_warps);
}

TEST_CASE("the layouts print places each conversion where the lowering emits it", "[codegen][layouts]") {
  ir::Kernel fn = conversions_kernel();
  std::string text = check_layouts(*fn, 4);
  INFO(text);
  auto has = [&](const char* re) { return std::regex_search(text, std::regex(re)); };
  CHECK(has(R"(= reshape (%\d+) : tile<32x16xf32>  : #L\d+\n +convert_layout \1 : #L\d+ -> #L\d+ \(reshape %\d+\)\n)"));
  CHECK(has(R"(iter_args\((%\d+) = %\d+\) -> \(tile<16xf32>\) \{  : #L\d+\n +convert_layout \1 : )"));
  CHECK(has(R"(= load (%\d+) : tile<16xf32>  : (#L\d+)\n +convert_layout %\d+ : \2 -> )"));
  CHECK(has(R"((%\d+) = for [\s\S]*\n  \}\n  convert_layout \1 : #L\d+ -> #L\d+\n)"));
}

TEST_CASE("the layouts print of every template matches its lowering", "[codegen][layouts]") {
  for (const templates::KernelTemplate& t : templates::all_templates()) {
    INFO("template " << t.name);
    templates::ParamMap params = templates::resolve_params(t.params, {}, "--set");
    templates::ParamMap shape = templates::resolve_params(t.shape, {}, "--shape");
    int num_warps = params.count("num_warps") ? static_cast<int>(params.at("num_warps")) : 4;
    for (const ir::Kernel& k : templates::build_kernels(t, params, shape)) check_layouts(*k, num_warps);
  }
}

TEST_CASE("exactly the ops whose elements map coordinate to coordinate take their operands' layout",
          "[codegen][layouts]") {
  // Written out here, not taken from TILEC_VIEW_OR_ELEMENTWISE_OPS: an op belongs when each
  // result element depends only on operand elements at the same coordinate (or the one a
  // broadcast, splat, expand_dims or permute maps it to), so the plan may hand the operands'
  // layout through. IR's own unary, binary and compare lists all belong.
  std::set<ir::OpKind> want = {ir::OpKind::Arange,     ir::OpKind::Constant, ir::OpKind::Splat,
                               ir::OpKind::Broadcast,  ir::OpKind::ExpandDims, ir::OpKind::Permute,
                               ir::OpKind::AddPtr,     ir::OpKind::Select,   ir::OpKind::Fma,
                               ir::OpKind::Cast,       ir::OpKind::Bitcast};
#define TILEC_X(E, N) want.insert(ir::OpKind::E);
  TILEC_UNARY_OPS(TILEC_X)
  TILEC_BINARY_OPS(TILEC_X)
  TILEC_COMPARE_OPS(TILEC_X)
#undef TILEC_X
  // Every op kind of the IR, each judged against that definition (reshape moves elements
  // between coordinates; loads, reductions, dots and control flow pick their own layouts).
#define TILEC_X(E, N)                                                                                            \
  {                                                                                                              \
    INFO(N);                                                                                                     \
    CHECK(is_view_or_elementwise(ir::OpKind::E) == (want.count(ir::OpKind::E) == 1));                            \
  }
  TILEC_OPS(TILEC_X)
#undef TILEC_X
}

TEST_CASE("tilec ir --stage layouts", "[cli][layouts]") {
  auto o = run_cli({"ir", "softmax", "--stage", "layouts"});
  INFO(o.text());
  REQUIRE(o.exited());
  CHECK(o.exit_code == 0);
  CHECK_THAT(o.out, Catch::StartsWith("// layouts of @softmax for num_warps=4: "));
  CHECK_THAT(o.out, Catch::Contains("\n#L0 = blocked<size_per_thread=["));
  CHECK_THAT(o.out, Catch::Contains("kernel @softmax("));
  Built b = build("softmax");
  CHECK(o.out == print_layouts(*b.fn, 4).text);

  auto w = run_cli({"ir", "softmax", "--stage", "layouts", "--set", "num_warps=8"});
  CHECK(w.exit_code == 0);
  CHECK_THAT(w.out, Catch::StartsWith("// layouts of @softmax for num_warps=8: "));

  auto j = run_cli({"ir", "paged_attention", "--stage", "layouts", "--json"});
  INFO(j.text());
  CHECK(j.exit_code == 0);
  std::string last = tilec::test::last_line(j.out);
  CHECK_THAT(last, Catch::StartsWith("{\"kernel\": \"paged_attention\", \"stage\": \"layouts\", \"text\": \"// layouts"));
  Built pa = build("paged_attention");
  LayoutsPrint pp = print_layouts(*pa.fn, pa.num_warps);
  CHECK_THAT(last, Catch::EndsWith(fmt::format("\"layouts\": {}, \"conversions\": {}}}", pp.layouts, pp.conversions)));

  auto help = run_cli({"ir", "--help"});
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.out, Catch::Contains("layouts:"));

  auto bad = run_cli({"ir", "softmax", "--stage", "layout"});
  INFO(bad.text());
  CHECK(bad.exit_code == 2);
  CHECK(bad.out.empty());
  for (const char* s : {"layout", "tile", "layouts", "llvm", "ptx"}) CHECK_THAT(bad.err, Catch::Contains(s));
}

TEST_CASE("the layouts print shows a tensor-core dot's result in the MMA accumulator layout", "[codegen][layouts][mma]") {
  Built b = build("paged_attention", {"block_n=64", "head_group=4"},
                  {"dtype=bf16", "hq=32", "hkv=8", "head_dim=128"});
  std::string text = check_layouts(*b.fn, b.num_warps);
  INFO(text);
  std::smatch m;
  REQUIRE(std::regex_search(text, m, std::regex(R"(#L(\d+) = blocked<size_per_thread=\[1,2\], threads_per_warp=\[8,4\], )"
                                               R"(warps_per_block=\[4,1\], order=\[1,0\]>  // mma\.sync m16n8 )"
                                               R"(accumulator fragments, warps along M)")));
  const std::string mma = "#L" + m[1].str();
  // Both dots of both K/V loops (whole steps, then the masked last one) produce it, and the
  // loops carry the accumulator in it: a decode tile's products are transposed (S^T = K q^T,
  // O^T = V^T P^T), their warps along the keys and along D.
  CHECK(std::regex_search(text, std::regex("= dot [^\\n]*  : " + mma + " loc")));
  size_t notes = 0;
  for (size_t at = text.find("accumulator and result in registers (the MMA layout)"); at != std::string::npos;
       at = text.find("accumulator and result in registers (the MMA layout)", at + 1))
    ++notes;
  CHECK(notes == 4);
  CHECK(std::regex_search(text, std::regex("iter_args\\([^\\n]*\\{  : [^\\n]*" + mma)));
}

TEST_CASE("the layouts print says a prefill tile's accumulator lays its warps along M", "[codegen][layouts][mma]") {
  // 64 packed query rows over 4 warps: 16 rows each (FlashAttention-2's split).
  Built b = build("paged_attention", {"block_n=64", "head_group=4", "block_m=64"},
                  {"dtype=bf16", "hq=32", "hkv=8", "head_dim=128", "sq=64", "causal=1"});
  std::string text = check_layouts(*b.fn, b.num_warps);
  INFO(text);
  CHECK(std::regex_search(text, std::regex(R"(#L\d+ = blocked<size_per_thread=\[1,2\], threads_per_warp=\[8,4\], )"
                                           R"(warps_per_block=\[4,1\], order=\[1,0\]>  // mma\.sync m16n8 )"
                                           R"(accumulator fragments, warps along M)")));
  CHECK(text.find("warps along N") == std::string::npos);
}

TEST_CASE("the layouts print shows a prefill tile's Q K^T on wgmma, its accumulator repeating lanes in a warp",
          "[codegen][layouts][wgmma]") {
  Built b = build("paged_attention", {"block_n=64", "head_group=4", "block_m=64"},
                  {"dtype=bf16", "hq=32", "hkv=8", "head_dim=128", "sq=64", "causal=1"});
  std::string text = check_layouts(*b.fn, b.num_warps, true);
  INFO(text);
  CHECK(std::regex_search(text, std::regex(R"(#L\d+ = blocked<size_per_thread=\[1,2\], threads_per_warp=\[8,4\], )"
                                           R"(warps_per_block=\[4,1\], order=\[1,0\], warp_repeat=\[2,1\]>  // wgmma )")));
  // Q K^T (K read along head_dim: B k-major) and P V (V read along head_dim, its N: B N-major).
  CHECK(text.find("// tensor cores: wgmma.mma_async.m64n64k16 over 64x64x128, per warpgroup 1 per k step of 16; "
                  "operands in shared memory, A k-major, 128-byte swizzle, B k-major, 128-byte swizzle") !=
        std::string::npos);
  CHECK(text.find("// tensor cores: wgmma.mma_async.m64n128k16 over 64x128x64, per warpgroup 1 per k step of 16; "
                  "operands in shared memory, A k-major, 128-byte swizzle, B N-major, 128-byte swizzle") !=
        std::string::npos);
  CHECK(text.find("mma.sync") == std::string::npos);
}
