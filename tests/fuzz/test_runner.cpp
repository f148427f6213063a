#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "dsl/dsl.h"
#include "fuzz/compare.h"
#include "fuzz/fuzz.h"
#include "fuzz/shrink.h"
#include "interp/launcher.h"
#include "ir/passes.h"
#include "tests/fuzz/helpers.h"

using namespace tilec;
using namespace tilec::fuzz;
using tilec::fuzz::test::has_op;
using tilec::fuzz::test::PlantedBugLauncher;

namespace {

// The first seed from `from` whose program has an op of kind `k`.
Program program_with(ir::OpKind k, uint64_t from = 1) {
  for (uint64_t s = from;; ++s) {
    Program p = generate(s);
    if (has_op(*p.kernel, k)) return p;
  }
}

// Adds one to element 0 of the first output buffer.
void perturb_first_output(const ir::Function& fn, const std::vector<launch::Arg>& args) {
  for (size_t i = 0; i < fn.params.size(); ++i)
    if (fn.params[i]->name.rfind("out", 0) == 0) {
      launch::Buffer& b = *args[i].buffer;
      if (ir::is_float(b.dtype)) b.set(0, b.get(0) == 0 || !std::isfinite(b.get(0)) ? 1 : b.get(0) * 1.5);
      else b.set_int(0, b.get_int(0) == 0 ? 1 : 0);
      return;
    }
}

} // namespace

TEST_CASE("fuzz: floats compare bitwise or within the ulp bound", "[fuzz]") {
  using ir::DType;
  CHECK(ulp_distance(1.0, 1.0, DType::f32) == 0);
  CHECK(ulp_distance(1.0, std::nextafter(1.0f, 2.0f), DType::f32) == 1);
  CHECK(ulp_distance(-0.0, 0.0, DType::f32) == 0);
  CHECK(ulp_distance(NAN, NAN, DType::f16) == 0);
  CHECK(ulp_distance(NAN, 1.0, DType::f16) == -1);
  CHECK(ulp_distance(1.0, 1.0 + 0x1p-7, DType::bf16) == 1);
  CHECK(ulp_distance(-0x1p-149, 0x1p-149, DType::f32) == 2);

  launch::Buffer a("out", DType::f32, 3), b("out", DType::f32, 3);
  a.set(0, NAN), b.set(0, -NAN);
  a.set(1, 0.0), b.set(1, 0.0);
  a.set(2, 1.0), b.set(2, 1.0);
  CHECK(compare_buffers(a, b, std::nullopt).mismatches == 0);
  b.set(1, -0.0);
  CHECK(compare_buffers(a, b, std::nullopt).mismatches == 1); // bitwise: -0 is not +0
  CHECK(compare_buffers(a, b, DType::f32).mismatches == 0);
  b.set(2, 1.0 + 3 * 0x1p-23);
  BufferDiff d = compare_buffers(a, b, std::nullopt);
  CHECK(d.mismatches == 2);
  CHECK_THAT(d.first, Catch::Contains("out[1]"));
  CHECK(compare_buffers(a, b, DType::f32).mismatches == 0);
  b.set(2, 1.0 + 300 * 0x1p-23);
  CHECK_THAT(compare_buffers(a, b, DType::f32).first, Catch::Contains("300 ulps apart; bound 256"));

  launch::Buffer i("idx", DType::i64, 1), j("idx", DType::i64, 1);
  i.set_int(0, INT64_MAX), j.set_int(0, INT64_MAX - 1);
  CHECK(compare_buffers(i, j, DType::f32).mismatches == 1); // integers are always bitwise
}

TEST_CASE("fuzz: exp, log and float sums make outputs inexact, integer work does not", "[fuzz]") {
  bool some_inexact = false, some_exact = false;
  for (uint64_t s = 1; s <= 60; ++s) {
    Program p = generate(s);
    std::vector<bool> inexact = inexact_params(*p.kernel);
    for (size_t i = 0; i < inexact.size(); ++i) {
      if (!p.kernel->params[i]->type.is_ptr()) CHECK_FALSE(inexact[i]);
      if (p.kernel->params[i]->name.rfind("in", 0) == 0) CHECK_FALSE(inexact[i]); // never stored to
      (inexact[i] ? some_inexact : some_exact) = true;
    }
  }
  CHECK(some_inexact);
  CHECK(some_exact);
}

TEST_CASE("fuzz: the runner finds a planted disagreement", "[fuzz]") {
  auto same = interp::make_interpret_launcher();
  PlantedBugLauncher broken(perturb_first_output);
  for (uint64_t s = 1; s <= 5; ++s) {
    Program p = generate(s);
    INFO(to_text(p));
    CHECK(run_program(p, *same).verdict == Verdict::agree);
    Outcome o = run_program(p, broken);
    CHECK(o.verdict == Verdict::disagree);
    CHECK_THAT(o.message, Catch::Contains("out0"));
  }
}

TEST_CASE("fuzz: a backend that throws disagrees, a program the interpreter rejects is invalid", "[fuzz]") {
  PlantedBugLauncher throws([](const ir::Function&, const std::vector<launch::Arg>&) {
    throw UserError("planted failure");
  });
  Program p = generate(3);
  Outcome o = run_program(p, throws);
  CHECK(o.verdict == Verdict::disagree);
  CHECK_THAT(o.message, Catch::Contains("planted failure"));
  for (size_t i = 0; i < p.params.size(); ++i)
    if (p.kernel->params[i]->type.is_ptr()) p.params[i].count = 0; // every access now out of bounds
  CHECK(run_program(p, throws).verdict == Verdict::invalid);
}

TEST_CASE("fuzz: the shrinker reduces a program that hits a planted bug", "[fuzz]") {
  // The planted bug: any kernel with a rem op gets a wrong first output.
  PlantedBugLauncher broken([](const ir::Function& fn, const std::vector<launch::Arg>& args) {
    if (has_op(fn, ir::OpKind::Rem)) perturb_first_output(fn, args);
  });
  Program p = program_with(ir::OpKind::Rem);
  REQUIRE(run_program(p, broken).verdict == Verdict::disagree);
  ShrinkStats st;
  Program small = shrink(
      p, [&](const Program& c) { return run_program(c, broken).verdict == Verdict::disagree; }, 400, &st);
  INFO(to_text(p) << "\nshrunk to\n" << to_text(small));
  CHECK(run_program(small, broken).verdict == Verdict::disagree);
  CHECK(has_op(*small.kernel, ir::OpKind::Rem));
  CHECK(count_ops(small) < count_ops(p));
  CHECK(count_ops(small) <= 40); // the address computations are kept as generated
  CHECK(st.accepted > 0);
  CHECK(small.grid == launch::Grid{1, 1, 1});

  std::filesystem::path dir = std::filesystem::temp_directory_path() / "tilec_fuzz_test_regressions";
  std::filesystem::remove_all(dir);
  std::string path = save_regression(small, dir.string(), "planted");
  Program back = from_text([&] {
    std::ifstream f(path);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }());
  CHECK(to_text(back) == to_text(small));
  std::filesystem::remove_all(dir);
}

// A backend may trip over code whose result nobody uses (the fuzzer's seed 41054: a dot in a
// pipelined loop, its result unused). Removing all dead code then hides the failure, so the
// shrinker keeps it and removes what it can op by op.
TEST_CASE("fuzz: the shrinker reduces a program whose failure needs dead code", "[fuzz]") {
  PlantedBugLauncher broken([](const ir::Function& fn, const std::vector<launch::Arg>& args) {
    if (has_op(fn, ir::OpKind::Rem)) perturb_first_output(fn, args);
  });
  Program p = program_with(ir::OpKind::Rem);
  // Every rem's result replaced by its dividend: the rems stay, dead.
  std::vector<ir::Op*> rems;
  ir::walk(p.kernel->body, [&](ir::Op& op) {
    if (op.kind == ir::OpKind::Rem) rems.push_back(&op);
  });
  REQUIRE(!rems.empty());
  for (ir::Op* r : rems) ir::replace_all_uses(p.kernel->body, r->result(), r->operands[0]);
  p = from_text(to_text(p));
  REQUIRE(run_program(p, broken).verdict == Verdict::disagree);
  Program no_dead = from_text(to_text(p));
  ir::dce(*no_dead.kernel);
  REQUIRE_FALSE(has_op(*no_dead.kernel, ir::OpKind::Rem)); // dead code elimination hides it
  Program small = shrink(
      p, [&](const Program& c) { return run_program(c, broken).verdict == Verdict::disagree; }, 400);
  INFO(to_text(p) << "\nshrunk to\n" << to_text(small));
  CHECK(has_op(*small.kernel, ir::OpKind::Rem));
  CHECK(count_ops(small) <= 40);
  CHECK(count_ops(small) < count_ops(p) / 2);
}

TEST_CASE("fuzz: a bounded run agrees on the emulator (the path of tilec fuzz)", "[fuzz][emulate]") {
  FuzzOptions o;
  o.count = 40;
  o.seed = 20261129;
  o.jobs = 2;
  FuzzSummary s = run_fuzz(o);
  std::string failures;
  for (const Failure& f : s.failures) failures += fmt::format("seed {}: {}\n{}\n", f.seed, f.message, to_text(f.shrunk));
  INFO(failures);
  CHECK(s.programs == 40);
  CHECK(s.failures.empty());
  CHECK(s.agreed == 40);
  CHECK(s.ops.count("dot"));
}

// An inexact value's error is counted in the coarsest float type it passed through: a bf16 sum
// cast to f32 may differ by a few bf16 ulps, which are 2^16 f32 ulps each (the fuzzer's seed
// 41839: a combine reduction adding bf16 values in the backend's order, stored as f32).
TEST_CASE("fuzz: an inexact bf16 value stored as f32 is compared in bf16 ulps", "[fuzz]") {
  using namespace tilec::dsl;
  KernelBuilder kb("bf16_sum_to_f32");
  auto x = kb.arg<Ptr<bf16>>("x"), y = kb.arg<Ptr<f32>>("y"), z = kb.arg<Ptr<f32>>("z");
  auto i = arange(0, 32);
  auto v = load(x + i);
  store(y + i, zeros({32}) + reduce_sum(v, 0).to(f32)); // inexact, coarsest bf16
  store(z + i, exp(v.to(f32)));                         // inexact, f32 throughout
  ir::Kernel k = kb.finish();
  std::vector<std::optional<DType>> in = inexact_dtypes(*k);
  REQUIRE(in.size() == 3);
  CHECK_FALSE(in[0].has_value());
  CHECK(in[1] == DType::bf16);
  CHECK(in[2] == DType::f32);
  launch::Buffer a("y", DType::f32, 1), b("y", DType::f32, 1);
  a.set(0, 492.0), b.set(0, 496.0); // one bf16 ulp apart at 492
  CHECK(compare_buffers(a, b, in[1]).mismatches == 0);
  CHECK(compare_buffers(a, b, in[2]).mismatches == 1);
  // f16 subnormals are 2^-24 apart however small: 20 f16 ulps there are too many, 10 are not.
  a.set(0, 100 * 0x1p-24), b.set(0, 120 * 0x1p-24);
  CHECK(compare_buffers(a, b, DType::f16).mismatches == 1);
  b.set(0, 110 * 0x1p-24);
  CHECK(compare_buffers(a, b, DType::f16).mismatches == 0);
}
