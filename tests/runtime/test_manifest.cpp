#include "abi/error.h"
#include "abi/manifest.h"

#include <catch2/catch.hpp>

#include "tests/runtime/helpers.h"

#include <fstream>
#include <sstream>

namespace fs = std::filesystem;
using namespace tilec::rt;
using tilec::rt::test::TempDir;

namespace {

Manifest full_manifest() {
  Manifest m;
  m.kernel = "paged_attention";
  m.symbol = "paged_attention_bn64_g4";
  m.arch = "sm_90";
  m.ptx = "paged_attention.ptx";
  m.cubin = "paged_attention.cubin";
  m.emulator = "emu/paged_attention.so";
  m.params = {{"q", {ScalarType::f16, true}},           {"k_cache", {ScalarType::bf16, true}},
              {"block_table", {ScalarType::i32, true}}, {"scale", {ScalarType::f32, false}},
              {"flag", {ScalarType::i1, false}},        {"count", {ScalarType::i64, false}},
              {"a", {ScalarType::i8, false}},           {"b", {ScalarType::i16, false}}};
  m.threads_per_block = 128;
  m.shared_bytes = 65536;
  m.specialization = {{"block_n", std::int64_t{64}},
                      {"head_group", std::int64_t{-4}},
                      {"dtype", std::string("f16")},
                      {"odd key", std::string("quote \" backslash \\ tab \t")}};
  m.compiler_version = "tilec 0.1.0";
  m.ir_hash = "0123456789abcdef";
  m.ptxas = PtxasReport{96, 8};
  return m;
}

std::string message_of(const std::string& text, const std::string& source = "dir/m.toml") {
  try {
    parse_manifest(text, source);
  } catch (const ManifestError& e) {
    return e.what();
  }
  FAIL("expected a ManifestError for:\n" << text);
  return {};
}

const std::string kValid = R"(kernel = "k"
symbol = "k"
arch = "sm_90"
threads_per_block = 128
shared_bytes = 0
compiler_version = "v"
ir_hash = "h"

[code]
ptx = "k.ptx"

[[params]]
name = "x"
type = "ptr<f32>"

[[params]]
name = "n"
type = "i32"
)";

std::string replace(std::string text, const std::string& from, const std::string& to) {
  auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

} // namespace

TEST_CASE("param types read back from their spelling", "[runtime]") {
  for (const char* s : {"i1", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f16", "bf16", "f32",
                        "ptr<f32>", "ptr<bf16>", "ptr<i1>", "ptr<u64>"}) {
    auto t = parse_param_type(s);
    REQUIRE(t);
    CHECK(t->str() == s);
  }
  for (const char* s : {"", "f64", "ptr<>", "ptr<ptr<f32>>", "ptr<f32", "u128", "U32", "F32"})
    CHECK_FALSE(parse_param_type(s));
  CHECK(scalar_type_bytes(ScalarType::i1) == 1);
  CHECK(scalar_type_bytes(ScalarType::bf16) == 2);
  CHECK(scalar_type_bytes(ScalarType::i64) == 8);
}

TEST_CASE("a manifest round-trips through a file", "[runtime]") {
  TempDir dir;
  Manifest m = full_manifest();
  fs::path file = dir.path / "paged_attention.toml";
  write_manifest(m, file);
  Manifest back = read_manifest(file);
  CHECK(back.dir == dir.path);
  CHECK(back.code_path(back.ptx) == dir.path / "paged_attention.ptx");
  CHECK(back.code_path(back.emulator) == dir.path / "emu/paged_attention.so");
  m.dir = dir.path;
  CHECK(back == m);
  CHECK(format_manifest(back) == format_manifest(m));

  SECTION("optional fields stay absent") {
    m.cubin.clear();
    m.emulator.clear();
    m.ptxas.reset();
    m.specialization.clear();
    write_manifest(m, file);
    CHECK(read_manifest(file) == m);
  }
  SECTION("a kernel without parameters (fuzz/corpus/manifest_toml/regression_no_params.toml)") {
    m.params.clear();
    m.tensor_maps.clear();
    m.specialization.clear();
    write_manifest(m, file);
    CHECK(read_manifest(file) == m);
  }
  SECTION("a module with only an emulator library") {
    m.ptx.clear();
    m.cubin.clear();
    write_manifest(m, file);
    CHECK(read_manifest(file) == m);
  }
  SECTION("rewriting replaces the file and leaves no temporary behind") {
    m.threads_per_block = 256;
    write_manifest(m, file);
    CHECK(read_manifest(file).threads_per_block == 256);
    CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) == 1);
  }
}

TEST_CASE("the example module's manifest is in canonical form", "[runtime]") {
  fs::path file = tilec::rt::test::kExampleManifest;
  Manifest m = read_manifest(file);
  CHECK(m.kernel == "vector_add");
  REQUIRE(m.params.size() == 4);
  CHECK(m.params[3].type.str() == "i32");
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  CHECK(format_manifest(m) == text.str());
}

TEST_CASE("manifest errors name the file, position and key", "[runtime]") {
  CHECK_NOTHROW(parse_manifest(kValid, "dir/m.toml"));

  CHECK(message_of(replace(kValid, "symbol = \"k\"\n", "")) == "dir/m.toml: missing key 'symbol'");
  CHECK(message_of(replace(kValid, "threads_per_block = 128", "threads_per_block = \"128\"")) ==
        "dir/m.toml:4:21: key 'threads_per_block' must be an integer, got a string");
  CHECK(message_of(replace(kValid, "threads_per_block = 128", "threads_per_block = 2048")) ==
        "dir/m.toml:4:21: key 'threads_per_block' is 2048, must be in [1, 1024]");
  CHECK(message_of(replace(kValid, "shared_bytes = 0", "shared_bytes = -1")) ==
        "dir/m.toml:5:16: key 'shared_bytes' is -1, must be in [0, 2147483647]");
  CHECK(message_of(replace(kValid, "ir_hash = \"h\"", "ir_hash = \"\"")) ==
        "dir/m.toml:7:11: key 'ir_hash' must not be empty");
  CHECK(message_of(replace(kValid, "type = \"i32\"", "type = \"u128\"")) ==
        "dir/m.toml:18:8: key 'params[1].type' is 'u128', not a parameter type (i1 i8 i16 i32 "
        "i64 u8 u16 u32 u64 f16 bf16 f32 f8e4m3 f8e5m2, or ptr<T> of one)");
  CHECK(message_of(replace(kValid, "name = \"n\"\n", "")) ==
        "dir/m.toml:16:1: missing key 'params[1].name'");
  CHECK(message_of(replace(kValid, "name = \"n\"", "name = \"x\"")) ==
        "dir/m.toml:17:8: key 'params[1].name': parameter 'x' appears twice");
  CHECK(message_of(replace(kValid, "ptx = \"k.ptx\"", "")) ==
        "dir/m.toml:9:1: missing key 'code.ptx' (the [code] table names no ptx, cubin or "
        "emulator file)");
  CHECK(message_of(replace(kValid, "[code]\nptx = \"k.ptx\"\n", "")) ==
        "dir/m.toml: missing key 'code'");
  CHECK(message_of(kValid + "\n[specialization]\nblock = 1.5\n") ==
        "dir/m.toml:21:9: key 'specialization.block' must be an integer or a string, got a float");
  CHECK(message_of(kValid + "\n[ptxas]\nregisters = 3\n") ==
        "dir/m.toml:20:1: missing key 'ptxas.spills'");
  CHECK(message_of(kValid + "\n[fixed]\nn = \"one\"\n") == "dir/m.toml:21:5: key 'fixed.n' must be an integer");
  CHECK(message_of(kValid + "\n[fixed]\nx = 1\n") == "dir/m.toml:21:5: key 'fixed.x' names no integer parameter");
  CHECK(message_of(kValid + "\n[divisibility]\nn = 12\n") ==
        "dir/m.toml:21:5: key 'divisibility.n' must be a power of two from 2");

  std::string syntax = message_of(replace(kValid, "arch = \"sm_90\"", "arch = sm_90"));
  CHECK_THAT(syntax, Catch::StartsWith("dir/m.toml:3:8: "));

  CHECK_THROWS_WITH(read_manifest("/nonexistent/tilec/m.toml"),
                    "/nonexistent/tilec/m.toml: cannot open: No such file or directory");
}

TEST_CASE("write_manifest refuses what it could not read back, and reports I/O errors",
          "[runtime]") {
  TempDir dir;
  Manifest m = full_manifest();
  m.symbol.clear();
  fs::path file = dir.path / "m.toml";
  CHECK_THROWS_WITH(write_manifest(m, file), Catch::Contains("missing key 'symbol'") ||
                                                 Catch::Contains("key 'symbol' must not be empty"));
  CHECK_FALSE(fs::exists(file));

  CHECK_THROWS_AS(write_manifest(full_manifest(), dir.path / "no/such/dir/m.toml"), ManifestError);
  CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) == 0);
}
