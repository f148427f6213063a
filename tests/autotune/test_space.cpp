// Search-space parsing (configs/*.toml), its error messages and enumeration.
#include <catch2/catch.hpp>

#include <string>

#include "autotune/space.h"
#include "ir/error.h"

using namespace tilec;
using namespace tilec::autotune;

namespace {

const SpaceNames kNames{"paged_attention",
                        {"block_n", "head_group", "num_warps", "num_splits", "num_stages"},
                        {"batch", "hq", "hkv", "sq", "head_dim", "block_size", "ctx", "dtype", "kv_dtype"}};

std::string error_of(const std::string& text) {
  try {
    parse_space(text, "space.toml", kNames);
  } catch (const UserError& e) {
    return e.what();
  }
  return "no error";
}

} // namespace

TEST_CASE("the shipped paged-attention space parses and enumerates", "[autotune]") {
  SearchSpace s = load_space(std::string(TILEC_SOURCE_DIR) + "/configs/paged_attention.toml", kNames);
  CHECK(s.kernel == "paged_attention");
  CHECK(s.params.size() == 5);
  CHECK(s.constraints.size() >= 1);
  Values shape{{"batch", 2}, {"hq", 8}, {"hkv", 2}, {"sq", 1}, {"head_dim", 64}, {"block_size", 16}, {"ctx", 256},
               {"dtype", 1}, {"kv_dtype", 0}};
  Enumeration en = enumerate(s, shape);
  CHECK(en.candidates.size() + en.rejected.size() == s.size());
  REQUIRE(!en.candidates.empty());
  for (const Values& c : en.candidates) CHECK(4 % c.at("head_group") == 0);
  bool saw_head_group_reason = false;
  for (const Rejection& r : en.rejected)
    if (r.params.at("head_group") == 8) saw_head_group_reason |= r.reason.find("head_group_divides_group") != std::string::npos;
  CHECK(saw_head_group_reason);
  shape["kv_dtype"] = 1; // an fp8 cache: no pipelined loads to tune
  for (const Values& c : enumerate(s, shape).candidates) CHECK(c.at("num_stages") == 1);
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
