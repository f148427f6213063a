// The CLI runs every config on its own grid and every problem at the sizes its files hold:
// autotune measures configs whose blocks differ from the default's, `run --tuned` runs such a
// winner right, `--inputs` takes sizes and dtypes from the .npy files (paged attention's own
// reader and the generic one of a kernel that declares its tensors), and what ships with
// `--export` is the modules, the card and the database, nothing else.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "templates/attention/paged_attention.h"
#include "templates/registry.h"
#include "runtime/module_store.h"
#include "runtime/npy.h"
#include "tests/runtime/helpers.h"
#include "tests/tilec_process.h"

namespace fs = std::filesystem;
using namespace tilec;

namespace {

// A scratch folder removed at the end of the test.
struct Scratch : rt::test::TempDir {
  const fs::path& dir = path;
};

test::Process cli(const std::string& args, int want_exit) {
  test::Process p = test::run_tilec(args);
  INFO("tilec " << args << "\n" << p.text());
  REQUIRE(p.exited());
  CHECK(p.exit_code == want_exit);
  return p;
}

void write_f32(const fs::path& file, std::vector<int64_t> shape, float first) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<std::byte> bytes(size_t(n) * 4);
  for (int64_t i = 0; i < n; ++i) {
    float v = first + 0.01f * float(i % 97);
    std::memcpy(bytes.data() + i * 4, &v, 4);
  }
  rt::write_npy(file.string(), {"<f4", std::move(shape), std::move(bytes)});
}

} // namespace

TEST_CASE("autotune measures configs with other blocks than the default's, and --tuned runs the winner right",
          "[tools][autotune][exact]") {
  Scratch s;
  fs::path space = s.dir / "space.toml", db = s.dir / "db.toml", out = s.dir / "deploy";
  // Three blocks, the smallest below the default 1024: each runs on its own cdiv(n, block) grid.
  std::ofstream(space) << "kernel = \"vector_add\"\n[params]\nblock = [256, 1024, 4096]\n[measure]\nwarmup = 0\n"
                          "repeats = 1\n";
  test::Process tuned = cli("autotune vector_add --space " + space.string() + " --shape n=100003 --backend emulate "
                              "--no-ptxas -o " + db.string() + " --export " + out.string() + " --json", 0);
  CHECK_THAT(tuned.out, Catch::Contains("\"measured\": 3") && Catch::Contains("\"rejected\": 0"));
  // What ships: modules, their card and the database; no lock file.
  for (const auto& e : fs::directory_iterator(out)) {
    INFO(e.path());
    CHECK(e.path().extension() != ".lock");
  }
  CHECK(fs::exists(out / "db.toml"));
  CHECK(rt::read_kernel_card(out / "vector_add.kernel.toml").compiler == "tilec");

  // A database whose only config has the small block: run --tuned launches it on its grid.
  std::ofstream(space) << "kernel = \"vector_add\"\n[params]\nblock = [256]\n[measure]\nwarmup = 0\nrepeats = 1\n";
  fs::path small = s.dir / "small.toml";
  cli("autotune vector_add --space " + space.string() + " --shape n=100003 --backend emulate --no-ptxas -o " +
            small.string(),
        0);
  // Two keys with one winner share its modules: each manifest is listed once.
  test::Process two = cli("autotune vector_add --space " + space.string() + " --shape n=1000 --shape n=999 --backend "
                          "emulate --no-ptxas -o " + (s.dir / "two.toml").string() + " --export " +
                          (s.dir / "two").string() + " --json", 0);
  CHECK(test::last_line(two.out).find("\"exported\": [\"") != std::string::npos);
  {
    std::string exported = two.out.substr(two.out.find("\"exported\""));
    CHECK(std::count(exported.begin(), exported.end(), '"') == 2 + 2 * 2); // the key, then sm_90 and host
  }
  test::Process run = cli("run vector_add --tuned " + small.string() + " --backend emulate", 0);
  CHECK_THAT(run.text(), Catch::Contains("block=256") && Catch::Contains(": ok"));
  cli("bench vector_add --tuned " + small.string() + " --backend emulate --warmup 0 --repeats 1", 0);

  // matmul over its block sizes: a 2-d grid per config.
  std::ofstream(space) << "kernel = \"matmul\"\n[params]\nblock_m = [16, 64]\nblock_n = [16, 64]\n[measure]\n"
                          "warmup = 0\nrepeats = 1\n";
  test::Process mm = cli("autotune matmul --space " + space.string() + " --shape m=100 n=75 k=20 --backend emulate "
                           "--no-ptxas -o " + (s.dir / "mm.toml").string() + " --json", 0);
  CHECK_THAT(mm.out, Catch::Contains("\"measured\": 4") && Catch::Contains("\"rejected\": 0"));
  cli("run matmul --tuned " + (s.dir / "mm.toml").string() + " --shape m=100 n=75 k=20 --backend emulate", 0);
}

TEST_CASE("run --inputs takes paged attention's sizes from the files and checks the config against them",
          "[tools][inputs][exact]") {
  Scratch s;
  templates::PagedAttentionShape shape;
  shape.batch = 2, shape.hq = 12, shape.hkv = 4, shape.head_dim = 32, shape.block_size = 8, shape.max_blocks = 3;
  shape.num_blocks = 6;
  templates::write_paged_attention_inputs((s.dir / "in").string(), templates::make_paged_attention_inputs(shape, 3, 20));
  const std::string in = (s.dir / "in").string();
  // Hq/Hkv = 3 in the files (the default sizes' 8/2 = 4 would refuse head_group=3).
  test::Process ok = cli("run paged_attention --backend emulate --inputs " + in + " --set head_group=3 --json", 0);
  CHECK_THAT(ok.out, Catch::Contains("\"ok\": true"));
  cli("run paged_attention --backend emulate --path decompose --inputs " + in, 0);
  // A --shape value that agrees with the files is fine; one that contradicts them names both.
  cli("run paged_attention --backend emulate --inputs " + in + " --shape hq=12 hkv=4", 0);
  test::Process bad = cli("run paged_attention --backend emulate --inputs " + in + " --shape hq=8", 2);
  CHECK_THAT(bad.err, Catch::Contains("--shape hq=8 contradicts the inputs") && Catch::Contains("hq=12"));
  // A config that does not fit the files' sizes is named with them.
  test::Process group = cli("run paged_attention --backend emulate --inputs " + in + " --set head_group=2", 2);
  CHECK_THAT(group.err, Catch::Contains("head_group"));
}

TEST_CASE("a kernel that declares its tensors reads --inputs and writes a shaped --out with no code of its own",
          "[tools][inputs][exact]") {
  Scratch s;
  fs::create_directories(s.dir / "in");
  write_f32(s.dir / "in" / "x.npy", {5, 300}, -1.0f);
  fs::path out = s.dir / "out.npy";
  test::Process ok = cli("run softmax --backend emulate --set block=512 --inputs " + (s.dir / "in").string() +
                               " --out " + out.string(),
                           0);
  CHECK_THAT(ok.out, Catch::Contains(": ok"));
  rt::NpyArray y = rt::read_npy(out.string());
  CHECK(y.descr == "<f4");
  CHECK(y.shape == std::vector<int64_t>{5, 300}); // rows and cols from x.npy, not the defaults 37 x 1000
  float first = 0;
  std::memcpy(&first, y.data.data(), 4);
  CHECK(first > 0.0f);
  CHECK(first < 1.0f);

  // tilec list names the files a kernel with declared tensors reads.
  CHECK_THAT(cli("list", 0).out, Catch::Contains("--inputs DIR             x.npy [rows, cols]") &&
                                     Catch::Contains("a.npy [m, k] b.npy [k, n]"));

  // The files decide the sizes: a config too small for them is refused, naming both.
  test::Process small = cli("run softmax --backend emulate --set block=256 --inputs " + (s.dir / "in").string(), 2);
  CHECK_THAT(small.err, Catch::Contains("block=256") && Catch::Contains("cols=300"));
  test::Process contra = cli("run softmax --backend emulate --shape rows=6 --inputs " + (s.dir / "in").string(), 2);
  CHECK_THAT(contra.err, Catch::Contains("--shape rows=6 contradicts the inputs") && Catch::Contains("rows=5"));

  // Another dtype or rank than the kernel's is an error naming the file and both.
  fs::create_directories(s.dir / "f16");
  rt::write_npy((s.dir / "f16" / "x.npy").string(), {"<f2", {2, 8}, std::vector<std::byte>(32)});
  test::Process dtype = cli("run softmax --backend emulate --inputs " + (s.dir / "f16").string(), 2);
  CHECK_THAT(dtype.err, Catch::Contains("x.npy: holds <f2") && Catch::Contains("f32"));
  fs::create_directories(s.dir / "rank");
  write_f32(s.dir / "rank" / "x.npy", {40}, 0.0f);
  test::Process rank = cli("run softmax --backend emulate --inputs " + (s.dir / "rank").string(), 2);
  CHECK_THAT(rank.err, Catch::Contains("a 1-d array") && Catch::Contains("[rows, cols]"));

  // Two files that disagree on a size name both (matmul: a [m, k], b [k, n]).
  fs::create_directories(s.dir / "mm");
  write_f32(s.dir / "mm" / "a.npy", {4, 6}, 0.5f);
  write_f32(s.dir / "mm" / "b.npy", {7, 3}, 0.5f);
  test::Process k = cli("run matmul --backend emulate --inputs " + (s.dir / "mm").string(), 2);
  CHECK_THAT(k.err, Catch::Contains("b.npy gives k=7") && Catch::Contains("a.npy gives k=6"));
  write_f32(s.dir / "mm" / "b.npy", {6, 3}, 0.5f);
  cli("run matmul --backend emulate --inputs " + (s.dir / "mm").string() + " --out " + out.string(), 0);
  CHECK(rt::read_npy(out.string()).shape == std::vector<int64_t>{4, 3});
}

TEST_CASE("a CLI started under another name speaks in that name", "[tools][exact]") {
  Scratch s;
  fs::create_symlink(tilec::test::tilec_binary(), s.dir / "my_kernels_cli"); // as a user's tilec_add_kernels executable
  test::Process p = test::run_process((s.dir / "my_kernels_cli").string(), {"run", "no_such_kernel"});
  INFO(p.text());
  CHECK(p.exit_code == 2);
  CHECK_THAT(p.err, Catch::StartsWith("my_kernels_cli: error:"));
  test::Process none = test::run_process((s.dir / "my_kernels_cli").string(), {});
  CHECK_THAT(none.err, Catch::Contains("see my_kernels_cli --help"));
}

TEST_CASE("a size checked as a power of two is named with --shape", "[tools][exact]") {
  templates::ParamMap shape{{"block_size", 12}};
  CHECK_THROWS_WITH(templates::require_pow2(shape, "block_size", 1, 256, "--shape"),
                    Catch::StartsWith("--shape block_size=12: must be a power of two"));
  CHECK_THROWS_WITH(templates::require_pow2({{"block", 3}}, "block", 1, 256), Catch::StartsWith("--set block=3"));
}
