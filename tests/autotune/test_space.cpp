// Search-space parsing (configs/*.toml), its error messages and enumeration.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "autotune/space.h"
#include "autotune/tuner.h"
#include "templates/registry.h"
#include "ir/error.h"

using namespace tilec;
using namespace tilec::autotune;

namespace {

const SpaceNames kNames{"paged_attention",
                        {"block_n", "head_group", "num_warps", "num_splits", "num_stages", "block_m", "split_tokens",
                         "plan_programs", "overlap", "kv_tma"},
                        {"batch", "hq", "hkv", "sq", "head_dim", "block_size", "max_blocks", "ctx", "dtype", "kv_dtype"},
                        {"tile_m"}};

std::string error_of(const std::string& text) {
  try {
    parse_space(text, "space.toml", kNames);
  } catch (const UserError& e) {
    return e.what();
  }
  return "no error";
}

int64_t pow2(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

// paged attention's derived tile_m (paged_attention_block_m), written out again.
Values tile_m_of(const Values& c, const Values& shape) {
  int64_t automatic = std::min<int64_t>(256, std::max<int64_t>(16, 1024 * c.at("num_warps") / pow2(shape.at("head_dim"))));
  int64_t bm = c.at("block_m") ? c.at("block_m") : automatic;
  const int64_t group = c.at("head_group") ? c.at("head_group") : shape.at("hq") / shape.at("hkv");
  return Values{{"tile_m", std::min(bm, pow2(group * shape.at("sq")))}};
}

// The shipped space is read with the names the template declares, as `tilec autotune` reads it.
SpaceNames shipped_names() { return space_names(*templates::find_template("paged_attention")); }

} // namespace

TEST_CASE("the shipped paged-attention space parses and enumerates", "[autotune]") {
  SearchSpace s = load_space(std::string(TILEC_SOURCE_DIR) + "/configs/paged_attention.toml", shipped_names());
  CHECK(s.kernel == "paged_attention");
  CHECK(s.params.size() == 10);
  CHECK(s.constraints.size() >= 1);
  Values shape{{"sm", 0}};
  for (const templates::Param& p : templates::find_template("paged_attention")->shape) shape[p.name] = p.value;
  for (const auto& [name, value] : Values{{"batch", 2}, {"hq", 8}, {"hkv", 2}, {"sq", 1}, {"head_dim", 64},
                                          {"block_size", 16}, {"max_blocks", 16}, {"ctx", 256}, {"dtype", 1},
                                          {"kv_dtype", 0}})
    shape[name] = value;
  Enumeration en = enumerate(s, shape, tile_m_of);
  CHECK(en.candidates.size() + en.rejected.size() == s.size());
  REQUIRE(!en.candidates.empty());
  for (const Values& c : en.candidates) CHECK((c.at("head_group") == 0 || 4 % c.at("head_group") == 0));
  bool saw_head_group_reason = false;
  for (const Rejection& r : en.rejected)
    if (r.params.at("head_group") == 8) saw_head_group_reason |= r.reason.find("head_group_divides_group") != std::string::npos;
  CHECK(saw_head_group_reason);
  shape["kv_dtype"] = 1; // an fp8 cache: no pipelined loads to tune
  for (const Values& c : enumerate(s, shape, tile_m_of).candidates) CHECK(c.at("num_stages") == 1);
}

TEST_CASE("constraint expressions: precedence, logic, division by zero", "[autotune]") {
  auto v = [](const std::string& text, Values vars = {}) { return eval(*parse_expr(text, "f", 1, 1), vars, "c"); };
  CHECK(v("1 + 2 * 3") == 7);
  CHECK(v("(1 + 2) * 3") == 9);
  CHECK(v("7 / 2 % 2") == 1);
  CHECK(v("1 < 2 && 2 < 1 || 3 == 3") == 1);
  CHECK(v("!0 && -2 < 0") == 1);
  CHECK(v("(hq / hkv) % g == 0", {{"hq", 8}, {"hkv", 2}, {"g", 4}}) == 1);
  CHECK(v("(hq / hkv) % g == 0", {{"hq", 8}, {"hkv", 2}, {"g", 3}}) == 0);
  CHECK(v("0 && 1 / 0") == 0); // short-circuit
  CHECK(v("pow2(80) + pow2(64) + pow2(1) + pow2(0) + pow2(-5)") == 128 + 64 + 1 + 1 + 1);
  CHECK(v("pow2 ( d + 1 ) * 2", {{"d", 64}}) == 256);
  CHECK_THROWS_WITH(v("pow2(x)", {{"x", INT64_MAX}}), Catch::Contains("overflows"));
  CHECK_THROWS_WITH(parse_expr("log2(8)", "f", 1, 1), Catch::StartsWith("f:1:1:") && Catch::Contains("unknown function 'log2'"));
  CHECK_THROWS_WITH(parse_expr("pow2(8", "f", 1, 1), Catch::Contains("expected ')'"));
  CHECK_THROWS_WITH(v("1 / x", {{"x", 0}}), Catch::Contains("division by zero"));
}

TEST_CASE("malformed spaces are rejected with file:line:column", "[autotune]") {
  // A TOML syntax error.
  CHECK_THAT(error_of("kernel = \"paged_attention\"\n[params\nblock_n = [16]\n"), Catch::StartsWith("space.toml:2:"));
  // An unknown parameter, at its line and column.
  CHECK_THAT(error_of("kernel = \"paged_attention\"\n[params]\nblok_n = [16]\n"),
             Catch::StartsWith("space.toml:3:1:") && Catch::Contains("unknown parameter 'blok_n'"));
  // Not integers; empty; repeated.
  CHECK_THAT(error_of("kernel = \"paged_attention\"\n[params]\nblock_n = [16, \"x\"]\n"),
             Catch::StartsWith("space.toml:3:16:") && Catch::Contains("integers"));
  CHECK_THAT(error_of("kernel = \"paged_attention\"\n[params]\nblock_n = []\n"),
             Catch::StartsWith("space.toml:3:") && Catch::Contains("empty"));
  CHECK_THAT(error_of("kernel = \"paged_attention\"\n[params]\nblock_n = [16, 32, 16]\n"),
             Catch::StartsWith("space.toml:3:20:") && Catch::Contains("listed twice"));
  // A syntax error inside a constraint: the column points into the string.
  CHECK_THAT(error_of("kernel = \"paged_attention\"\n[params]\nblock_n = [16]\n[constraints]\nc = \"block_n <= * 2\"\n"),
             Catch::StartsWith("space.toml:5:17:") && Catch::Contains("unexpected '*'"));
  CHECK_THAT(error_of("kernel = \"paged_attention\"\n[params]\nblock_n = [16]\n[constraints]\nc = \"(block_n < 2\"\n"),
             Catch::StartsWith("space.toml:5:18:") && Catch::Contains("expected ')'"));
  // Unknown names; a parameter the space does not list.
  CHECK_THAT(error_of("kernel = \"paged_attention\"\n[params]\nblock_n = [16]\n[constraints]\nc = \"block_n < ctxx\"\n"),
             Catch::StartsWith("space.toml:5:16:") && Catch::Contains("unknown name 'ctxx'"));
  CHECK_THAT(error_of("kernel = \"paged_attention\"\n[params]\nblock_n = [16]\n[constraints]\nc = \"num_warps < 8\"\n"),
             Catch::StartsWith("space.toml:5:6:") && Catch::Contains("does not list"));
  // Wrong kernel, unknown keys, missing [params], bad [measure].
  CHECK_THAT(error_of("kernel = \"softmax\"\n[params]\nblock_n = [16]\n"),
             Catch::StartsWith("space.toml:1:10:") && Catch::Contains("not 'paged_attention'"));
  CHECK_THAT(error_of("kernel = \"paged_attention\"\nfoo = 1\n[params]\nblock_n = [16]\n"),
             Catch::StartsWith("space.toml:2:") && Catch::Contains("unknown key 'foo'"));
  CHECK_THAT(error_of("kernel = \"paged_attention\"\n"), Catch::Contains("missing table [params]"));
  CHECK_THAT(error_of("kernel = \"paged_attention\"\n[params]\nblock_n = [16]\n[measure]\nrepeats = 0\n"),
             Catch::StartsWith("space.toml:5:") && Catch::Contains("repeats"));
}

TEST_CASE("enumeration is the constrained cross product", "[autotune]") {
  SearchSpace s = parse_space("kernel = \"paged_attention\"\n[params]\nblock_n = [16, 32]\nnum_splits = [1, 2, 4]\n"
                              "[constraints]\nwork = \"num_splits * block_n <= ctx\"\n",
                              "s.toml", kNames);
  Enumeration en = enumerate(s, {{"ctx", 64}});
  CHECK(s.size() == 6);
  CHECK(en.candidates.size() == 5); // 32 * 4 > 64
  REQUIRE(en.rejected.size() == 1);
  CHECK(en.rejected[0].params == Values{{"block_n", 32}, {"num_splits", 4}});
  CHECK_THAT(en.rejected[0].reason, Catch::Contains("work"));
}

// Found by input fuzzing (fuzz/corpus/space_toml/every_operator.toml): arithmetic that
// leaves int64 was undefined behaviour; deep nesting overflowed the stack.
TEST_CASE("constraint overflow and deep nesting are errors instead of undefined behaviour", "[autotune]") {
  auto v = [](const std::string& text, Values vars = {}) { return eval(*parse_expr(text, "f", 1, 1), vars, "c"); };
  const Values big{{"x", INT64_MAX}, {"m", INT64_MIN}};
  CHECK_THROWS_WITH(v("x * 2", big), Catch::StartsWith("c: 9223372036854775807 * 2 overflows") &&
                                         Catch::Contains("column 3"));
  CHECK_THROWS_WITH(v("x + 1", big), Catch::Contains("overflows 64-bit integers"));
  CHECK_THROWS_WITH(v("m - 1", big), Catch::Contains("overflows 64-bit integers"));
  CHECK_THROWS_WITH(v("-m", big), Catch::Contains("overflows 64-bit integers"));
  CHECK_THROWS_WITH(v("m / -1", big), Catch::Contains("overflows 64-bit integers"));
  CHECK(v("m % -1", big) == 0);
  CHECK(v("-x - 1", big) == INT64_MIN);
  CHECK_THROWS_WITH(parse_expr(std::string(100000, '(') + "1", "f", 1, 1),
                    Catch::StartsWith("f:1:65:") && Catch::Contains("more than 64 deep"));
  CHECK_THROWS_WITH(parse_expr(std::string(100000, '-') + "1", "f", 1, 1), Catch::Contains("more than 64 deep"));
  std::string sum = "1";
  for (int i = 0; i < 100000; ++i) sum += "+1";
  CHECK_THROWS_WITH(parse_expr(sum, "f", 1, 1), Catch::Contains("more than 1000 terms"));
}

TEST_CASE("derived values reach the constraints, and the shipped space keeps tiles within registers and shared memory",
          "[autotune]") {
  SearchSpace s = load_space(std::string(TILEC_SOURCE_DIR) + "/configs/paged_attention.toml", shipped_names());
  // A derived name must be declared by the kernel.
  SpaceNames plain = shipped_names();
  plain.derived.clear();
  CHECK_THROWS_WITH(load_space(std::string(TILEC_SOURCE_DIR) + "/configs/paged_attention.toml", plain),
                    Catch::Contains("unknown name 'tile_m'"));
  // tile_m as paged_attention_block_m gives it: block_m, or 0's automatic 1024 q elements a warp
  // in [16, 256], cut to head_group x sq rounded up to a power of two.
  const Derive tile_m = tile_m_of;
  for (int64_t d : {64, 128, 256})
    for (int64_t sq : {1, 4, 64, 2048}) {
      // Every shape name the template declares at its default, then the case's.
      Values shape;
      for (const templates::Param& p : templates::find_template("paged_attention")->shape) shape[p.name] = p.value;
      for (const auto& [name, value] : Values{{"batch", 1}, {"hq", 32}, {"hkv", 8}, {"sq", sq}, {"head_dim", d},
                                              {"block_size", 16}, {"max_blocks", 256}, {"ctx", -1}, {"dtype", 2},
                                              {"kv_dtype", 0}, {"sm", 0}})
        shape[name] = value;
      Enumeration en = enumerate(s, shape, tile_m);
      INFO("head_dim " << d << " sq " << sq);
      REQUIRE(!en.candidates.empty());
      bool some_explicit = false;
      for (const Values& c : en.candidates) {
        int64_t m = tile_m(c, shape).at("tile_m"), dp = pow2(d);
        // What the sm_80 / sm_90 compile sweep behind the constraints found safe.
        CHECK(m * (dp + c.at("block_n")) <= (dp <= 128 ? 2560 : 2176) * c.at("num_warps"));
        CHECK(c.at("num_stages") * c.at("block_n") * (4 * dp + 32) + m * (4 * dp + 32) + 528 <= 163 * 1024);
        some_explicit |= c.at("block_m") != 0;
        if (sq == 1) CHECK(c.at("block_m") == 0); // decode: block_m is cut to the group's rows
      }
      if (sq >= 64) CHECK(some_explicit);
    }
}

TEST_CASE("a space's constraints see the arch the tuner compiles for as sm", "[autotune]") {
  CHECK(sm_of(std::string("sm_80")) == 80);
  CHECK(sm_of(std::string("sm_90a")) == 90);
  CHECK(sm_of(std::nullopt) == 0);
  CHECK(sm_of(std::string("host")) == 0);
  const templates::KernelTemplate& t = *templates::find_template("paged_attention");
  SearchSpace s = load_space(std::string(TILEC_SOURCE_DIR) + "/configs/paged_attention.toml", shipped_names());
  // A prefill shape where the rotated walk and the TMA gathers apply on Hopper.
  Values shape;
  for (const templates::Param& p : t.shape) shape[p.name] = p.value;
  for (const auto& [name, value] : Values{{"batch", 1}, {"hq", 32}, {"hkv", 8}, {"sq", 256}, {"head_dim", 128},
                                          {"block_size", 16}, {"max_blocks", 64}, {"dtype", 2}})
    shape[name] = value;
  auto count = [&](int64_t sm, const char* param) {
    size_t n = 0, all = 0;
    for (const Values& c : enumerate_for(t, s, shape, sm).candidates) {
      ++all;
      n += c.at(param) == 1;
    }
    INFO("sm " << sm << ": " << n << " of " << all << " candidates with " << param << " = 1");
    CHECK(all > 0);
    return n;
  };
  // sm_80 leaves out what only costs there; sm_90 and the emulator alone (0) keep it.
  CHECK(count(80, "kv_tma") == 0);
  CHECK(count(80, "overlap") == 0);
  CHECK(count(90, "kv_tma") > 0);
  CHECK(count(90, "overlap") > 0);
  CHECK(count(0, "kv_tma") == count(90, "kv_tma"));
  // A space that names sm is read with the names `tilec autotune` gives it; one that misspells it is refused.
  CHECK_THROWS_WITH(parse_space("kernel = \"paged_attention\"\n[params]\nblock_n = [32]\n[constraints]\nx = \"smm == 0\"\n",
                                "s.toml", shipped_names()),
                    Catch::Contains("unknown name 'smm'"));
}
