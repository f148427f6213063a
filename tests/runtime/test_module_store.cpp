// Tuned loading: modules found by their specialization in an exported folder or the cache,
// checksums catching truncated files, the builder compiling what is missing, the error a
// runtime-only host gets, and the C API over it.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "codegen/compile.h"
#include "runtime/module_store.h"
#include "runtime/tilec_tuning.h"
#include "backends/module_builder.h"
#include "templates/attention/paged_attention.h"
#include "tests/runtime/helpers.h"

using namespace tilec;
namespace fs = std::filesystem;

namespace {

using rt::test::EnvVar;

// No builder for the scope of the object (as in a host linking only the runtime).
struct NoBuilder {
  NoBuilder() { rt::set_module_builder({}); }
  ~NoBuilder() { rt::set_module_builder({}); }
};

const templates::KernelTemplate& paged() { return *templates::find_template("paged_attention"); }

templates::ParamMap shape_of(std::vector<std::string> set) {
  return templates::resolve_params(paged().shape, set, "--shape");
}
templates::ParamMap params_of(std::vector<std::string> set) {
  return templates::resolve_params(paged().params, set, "--set");
}

// The tuning key `tilec autotune` would store for these --shape values.
rt::ProblemKey key_of(const templates::ParamMap& shape) {
  rt::ProblemKey key;
  for (const templates::Param& p : paged().shape)
    key[p.name] = p.choices.empty() ? rt::KeyValue(shape.at(p.name)) : rt::KeyValue(p.value_str(shape.at(p.name)));
  return key;
}

rt::TuningEntry tuned_entry(const rt::ProblemKey& key, rt::TunedConfig config) {
  rt::TuningEntry e;
  e.kernel = "paged_attention";
  e.device = "cpu-emulator";
  e.backend = "emulate";
  e.key = key;
  e.config = std::move(config);
  e.median_ms = e.min_ms = e.max_ms = 1.0;
  e.repeats = 1;
  return e;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

const std::vector<std::string> kShape{"batch=2", "hq=4", "hkv=2", "head_dim=16", "block_size=4", "ctx=32"};

} // namespace

TEST_CASE("manifest checksums: recorded, read back, and catch a truncated code file", "[runtime][modules]") {
  rt::test::TempDir dir;
  auto ms = backends::write_template_modules(paged(), params_of({"block_n=8"}), shape_of(kShape), "host",
                                              dir.path, true);
  REQUIRE(ms.size() == 1);
  const rt::Manifest& m = ms[0];
  REQUIRE(m.checksums.count("emulator"));
  CHECK(rt::check_module(m).empty());
  CHECK(m.specialization.at("head_group") == rt::SpecValue(int64_t(0))); // as configured: 0 is all Hq/Hkv heads
  CHECK(m.specialization.at("dtype") == rt::SpecValue(std::string("f32")));
  CHECK_FALSE(m.specialization.count("batch")); // the kernel is generic in batch and ctx

  fs::path so = m.code_path(m.emulator);
  std::string bytes = read_all(so);
  { std::ofstream(so, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size() / 2)); }
  CHECK_THAT(rt::check_module(m), Catch::Contains("truncated or corrupt"));
  fs::remove(so);
  CHECK_THAT(rt::check_module(m), Catch::Contains("missing"));
}

TEST_CASE("find_module matches on every specialization value and skips corrupt modules", "[runtime][modules]") {
  rt::test::TempDir dir;
  auto shape = shape_of(kShape);
  backends::write_template_modules(paged(), params_of({"block_n=8"}), shape, "host", dir.path, true);
  backends::write_template_modules(paged(), params_of({"block_n=16"}), shape, "host", dir.path, true);

  rt::ModuleQuery q;
  q.kernel = "paged_attention";
  q.arch = "host";
  q.values = rt::spec_of(key_of(shape), {{"block_n", 16}, {"head_group", 0}, {"num_warps", 4}, {"num_splits", 1},
                                         {"num_stages", 2}, {"block_m", 0}, {"split_tokens", 0},
                                         {"plan_programs", 0}, {"overlap", 0}, {"kv_tma", 0}});
  q.values["softcap"] = int64_t(0);
  auto m = rt::find_module({dir.path}, q);
  REQUIRE(m);
  CHECK(m->specialization.at("block_n") == rt::SpecValue(int64_t(16)));

  q.values["batch"] = int64_t(64); // not a specialization: still matches
  CHECK(rt::find_module({dir.path}, q));
  q.values["softcap"] = int64_t(1); // is one: no module for it
  CHECK_FALSE(rt::find_module({dir.path}, q));
  q.values["softcap"] = int64_t(0);
  q.arch = "sm_90";
  CHECK_FALSE(rt::find_module({dir.path}, q));
  q.arch = "host";

  // Truncate the block_n=16 library: it is skipped, and the reason is reported.
  fs::path so = m->code_path(m->emulator);
  { std::ofstream(so, std::ios::binary | std::ios::trunc) << "ELF"; }
  std::vector<std::string> problems;
  CHECK_FALSE(rt::find_module({dir.path}, q, &problems));
  REQUIRE(problems.size() == 2); // the corrupt module, then the closest one (block_n=8)
  CHECK_THAT(problems[0], Catch::Contains(so.filename().string()) && Catch::Contains("truncated or corrupt"));
  CHECK_THAT(problems[1], Catch::Contains("closest module") && Catch::Contains("block_n: it has 8, asked 16"));
}

TEST_CASE("a runtime-only host gets an error naming the module and the tilec command", "[runtime][modules]") {
  NoBuilder none;
  rt::test::TempDir cache, dir;
  EnvVar env("TILEC_CACHE_DIR", cache.path.string());
  auto shape = shape_of(kShape);
  rt::TuningDb db;
  db.entries.push_back(tuned_entry(key_of(shape), {{"block_n", 8}, {"head_group", 1}, {"num_splits", 2}, {"num_warps", 2}}));
  try {
    rt::load_tuned(db, "paged_attention", "cpu-emulator", key_of(shape), "sm_90", {dir.path});
    FAIL("expected ModuleNotFound");
  } catch (const rt::ModuleNotFound& e) {
    std::string msg = e.what();
    CHECK_THAT(msg, Catch::Contains("no module paged_attention for sm_90") && Catch::Contains("block_n=8") &&
                        Catch::Contains(dir.path.string()) && Catch::Contains((cache.path / "modules").string()) &&
                        Catch::Contains("tilec compile paged_attention --arch sm_90 --set block_n=8 head_group=1 "
                                        "num_splits=2 num_warps=2 --shape"));
  }
  // With a module of another config there, the error names it and the values that differ.
  backends::write_template_modules(paged(), params_of({"block_n=16", "head_group=1", "num_splits=2", "num_warps=2"}),
                                   shape, "sm_90", dir.path, true);
  CHECK_THROWS_WITH(rt::load_tuned(db, "paged_attention", "cpu-emulator", key_of(shape), "sm_90", {dir.path}),
                    Catch::Contains("the closest module, " + dir.path.string()) &&
                        Catch::Contains("differs in ") && Catch::Contains("block_n: it has 16, asked 8"));
}

TEST_CASE("load_tuned: the database's config, its modules from an exported folder, the combine kernel too",
          "[runtime][modules]") {
  NoBuilder none;
  rt::test::TempDir cache, dir;
  EnvVar env("TILEC_CACHE_DIR", cache.path.string());
  auto shape = shape_of(kShape);
  auto params = params_of({"block_n=8", "head_group=1", "num_splits=2", "num_warps=2"});
  auto written = backends::write_template_modules(paged(), params, shape, "host", dir.path, true);
  REQUIRE(written.size() == 2); // the fused kernel and its combine kernel
  CHECK(written[0].run == std::vector<std::string>{"paged_attention", "paged_attention_combine"});
  rt::TuningDb db;
  db.entries.push_back(tuned_entry(key_of(shape), rt::TunedConfig(params.begin(), params.end())));
  auto other = key_of(shape);
  other["batch"] = int64_t(8);
  other["ctx"] = int64_t(64);

  // Without the kernel's card only an exactly tuned key is served: a nearer one is not.
  CHECK_THROWS_AS(rt::load_tuned(db, "paged_attention", "cpu-emulator", other, "host", {dir.path}), rt::ModuleNotFound);
  CHECK(rt::load_tuned(db, "paged_attention", "cpu-emulator", key_of(shape), "host", {dir.path},
                       {{"softcap", int64_t(0)}})
            .modules.size() == 2);
  rt::write_kernel_card(templates::kernel_card(paged()), dir.path); // as autotune --export does

  // A different batch and context length: the nearest key's config, the same modules.
  rt::TunedModules t = rt::load_tuned(db, "paged_attention", "cpu-emulator", other, "host", {dir.path});
  REQUIRE(t.selection);
  CHECK(t.selection->rule == "nearest");
  REQUIRE(t.modules.size() == 2);
  CHECK(t.modules[0].kernel == "paged_attention");
  CHECK(t.modules[1].kernel == "paged_attention_combine");
  CHECK(t.modules[0].dir == dir.path);

  // Nothing tuned for another head geometry: the card's defaults, and their module is missing.
  auto wide = key_of(shape_of({"hq=8", "hkv=2", "head_dim=16", "block_size=4", "ctx=32"}));
  CHECK_THROWS_WITH(rt::load_tuned(db, "paged_attention", "cpu-emulator", wide, "host", {dir.path}),
                    Catch::Contains("block_n=32") && Catch::Contains("head_group=0"));
  CHECK_THROWS_AS(rt::load_tuned(db, "paged_attention", "cpu-emulator", wide, "host", {dir.path}), rt::ModuleNotFound);
}

TEST_CASE("a kernel card carries the template's defaults and reads back", "[runtime][modules]") {
  rt::test::TempDir dir;
  rt::KernelCard card = templates::kernel_card(paged());
  CHECK(card.defaults ==
        rt::TunedConfig{{"block_m", 0}, {"block_n", 32}, {"head_group", 0}, {"kv_tma", 0}, {"num_splits", 1},
                        {"num_stages", 2}, {"num_warps", 4}, {"overlap", 0}, {"plan_programs", 0}, {"split_tokens", 0}});
  CHECK(card.size_fields == paged().size_fields);
  CHECK(card.size_buckets == rt::SizeBuckets{{"sq", {1, 4, 16, 128}}});
  CHECK(card.spec_defaults == rt::Spec{{"softcap", int64_t(0)}});
  CHECK(rt::read_kernel_card(rt::write_kernel_card(card, dir.path)) == card);
  CHECK(rt::find_kernel_card("paged_attention", {dir.path}) == card);
  // The default config's modules are specialized on exactly these values.
  auto shape = shape_of({"hq=12", "hkv=3"});
  templates::PagedAttentionConfig d = templates::paged_attention_config(templates::resolve_params(paged().params, {}, "--set"));
  auto spec = templates::paged_attention_module_spec(templates::paged_attention_shape(shape), d);
  for (const auto& [name, v] : card.defaults) CHECK(spec.at(name) == rt::SpecValue(v));
  // A malformed card is reported with its file.
  { std::ofstream(dir.path / "bad.kernel.toml") << "kernel = \"bad\"\n[defaults]\nblock = \"x\"\n"; }
  CHECK_THROWS_WITH(rt::read_kernel_card(dir.path / "bad.kernel.toml"),
                    Catch::Contains("bad.kernel.toml") && Catch::Contains("defaults.block"));
  { std::ofstream(dir.path / "bad.kernel.toml") << "kernel = \"bad\"\n[size_buckets]\nsq = [4, 1]\n"; }
  CHECK_THROWS_WITH(rt::read_kernel_card(dir.path / "bad.kernel.toml"),
                    Catch::Contains("bad.kernel.toml") && Catch::Contains("size_buckets.sq") &&
                        Catch::Contains("increasing integers"));
}

TEST_CASE("with the compiler linked, a missing module is built into the cache, reused, and rebuilt when corrupt",
          "[runtime][modules]") {
  rt::test::TempDir cache;
  EnvVar env("TILEC_CACHE_DIR", cache.path.string());
  backends::enable_module_builder();
  struct Reset {
    ~Reset() { rt::set_module_builder({}); }
  } reset;
  auto shape = shape_of(kShape);
  rt::TuningDb empty;
  rt::TunedModules t = rt::load_tuned(empty, "paged_attention", "cpu-emulator", key_of(shape), "host", {},
                                      {{"softcap", int64_t(1)}});
  CHECK_FALSE(t.selection);
  CHECK_THAT(t.note, Catch::Contains("using the defaults"));
  REQUIRE(t.modules.size() == 1);
  const rt::Manifest first = t.modules[0];
  CHECK(first.dir == cache.path / "modules");
  CHECK(first.specialization.at("softcap") == rt::SpecValue(int64_t(1)));
  fs::path so = first.code_path(first.emulator);
  auto stamp = fs::last_write_time(so);

  rt::TunedModules again = rt::load_tuned(empty, "paged_attention", "cpu-emulator", key_of(shape), "host", {},
                                          {{"softcap", int64_t(1)}});
  CHECK(fs::last_write_time(so) == stamp); // reused, not rebuilt

  { std::ofstream(so, std::ios::binary | std::ios::trunc) << "not a library"; }
  rt::TunedModules rebuilt = rt::load_tuned(empty, "paged_attention", "cpu-emulator", key_of(shape), "host", {},
                                            {{"softcap", int64_t(1)}});
  CHECK(rt::check_module(rebuilt.modules[0]).empty());
}

TEST_CASE("C API: tilec_tuned_modules lists the manifests or says what is missing", "[runtime][modules]") {
  NoBuilder none;
  rt::test::TempDir cache, dir;
  EnvVar env("TILEC_CACHE_DIR", cache.path.string());
  auto shape = shape_of(kShape);
  auto params = params_of({"block_n=8", "head_group=2", "num_splits=1", "num_warps=4"});
  backends::write_template_modules(paged(), params, shape, "host", dir.path, true);
  rt::write_kernel_card(templates::kernel_card(paged()), dir.path); // as autotune --export does
  rt::TuningDb db;
  db.entries.push_back(tuned_entry(key_of(shape), rt::TunedConfig(params.begin(), params.end())));
  fs::path db_path = dir.path / "tuning.toml";
  rt::merge_into_file(db_path.string(), db);

  char err[512] = {0};
  tilec_tuning_db* h = tilec_tuning_open(db_path.c_str(), err, sizeof err);
  REQUIRE(h);
  std::string key = rt::format_key(key_of(shape));
  char paths[1024], note[1024];
  int n = tilec_tuned_modules(h, "paged_attention", "cpu-emulator", key.c_str(), "host",
                              ("/nonexistent:" + dir.path.string()).c_str(), nullptr, paths, sizeof paths, note,
                              sizeof note);
  INFO(note);
  REQUIRE(n == 1);
  std::string first = std::string(paths).substr(0, std::string(paths).find('\n'));
  CHECK(rt::read_manifest(first).kernel == "paged_attention");

  n = tilec_tuned_modules(h, "paged_attention", "cpu-emulator", key.c_str(), "sm_80", dir.path.c_str(), nullptr,
                          paths, sizeof paths, note, sizeof note);
  CHECK(n == -1);
  CHECK_THAT(std::string(note), Catch::Contains("no module paged_attention for sm_80") &&
                                    Catch::Contains("tilec compile paged_attention --arch sm_80"));
  // Modules a user's own CLI exported (tilec_add_kernels): the hint names that program.
  rt::KernelCard mine = templates::kernel_card(paged());
  mine.compiler = "my_kernels_cli";
  rt::write_kernel_card(mine, dir.path);
  n = tilec_tuned_modules(h, "paged_attention", "cpu-emulator", key.c_str(), "sm_80", dir.path.c_str(), nullptr,
                          paths, sizeof paths, note, sizeof note);
  CHECK(n == -1);
  CHECK_THAT(std::string(note), Catch::Contains("my_kernels_cli compile paged_attention --arch sm_80"));
  tilec_tuning_close(h);
}

TEST_CASE("two processes building the same module into one cache both get a whole module", "[runtime][modules]") {
  rt::test::TempDir cache;
  EnvVar env("TILEC_CACHE_DIR", cache.path.string());
  auto key = key_of(shape_of(kShape));
  rt::TuningDb empty;
  std::vector<pid_t> kids;
  for (int i = 0; i < 2; ++i) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int code = 1;
      try {
        backends::enable_module_builder();
        rt::TunedModules t = rt::load_tuned(empty, "paged_attention", "cpu-emulator", key, "host", {});
        code = t.modules.size() == 1 && rt::check_module(t.modules[0]).empty() ? 0 : 1;
      } catch (...) {
        code = 2;
      }
      ::_exit(code);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  rt::set_module_builder({});
  std::vector<std::string> problems;
  rt::ModuleQuery q;
  q.kernel = "paged_attention";
  q.arch = "host";
  q.values = rt::spec_of(key, templates::kernel_card(paged()).defaults);
  q.values["softcap"] = int64_t(0);
  CHECK(rt::find_module({rt::cache_module_dir()}, q, &problems));
  CHECK(problems.empty());
  for (const auto& e : fs::directory_iterator(rt::cache_module_dir()))
    CHECK(e.path().string().find(".tmp.") == std::string::npos); // no temporary left behind
}
