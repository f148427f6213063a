// The runtime library and the example host program must not link LLVM or the compiler's IR:
// a host program launches compiled modules with runtime/ alone.
#include <catch2/catch.hpp>

#include "tests/runtime/helpers.h"

#include <algorithm>

namespace fs = std::filesystem;
using namespace tilec::rt::test;

namespace {

bool have(const char* tool) {
  return run_command(std::string("command -v ") + tool).status == 0;
}

} // namespace

TEST_CASE("the example and the runtime library link without LLVM or the IR", "[runtime]") {
  REQUIRE(fs::exists(kExample));
  REQUIRE(fs::exists(kRuntimeLibrary));

  if (have("ldd")) {
    Output ldd = run_command("ldd " + quoted(kExample));
    INFO(ldd.text);
    REQUIRE(ldd.status == 0);
    CHECK(ldd.text.find("libstdc++") != std::string::npos); // ldd really listed something
    CHECK(ldd.text.find("LLVM") == std::string::npos);
    CHECK(ldd.text.find("libcuda") == std::string::npos); // the driver is dlopen'd, not linked
  } else {
    WARN("ldd not found; dynamic dependencies not checked");
  }

  if (have("nm")) {
    for (const fs::path& file : {kExample, kRuntimeLibrary}) {
      Output nm = run_command("nm -C " + quoted(file));
      INFO(file.string());
      REQUIRE(nm.status == 0);
      CHECK(nm.text.find("tilec::rt::") != std::string::npos);
      CHECK(nm.text.find("llvm::") == std::string::npos);
      CHECK(nm.text.find("tilec::ir::") == std::string::npos);
      CHECK(nm.text.find(" U cu") == std::string::npos); // no libcuda symbol needed at link time
    }
  } else {
    WARN("nm not found; symbols not checked");
  }
}

TEST_CASE("the example exits 3 with one clear line when there is no CUDA driver", "[runtime]") {
  REQUIRE(fs::exists(kExample));
  Output out = run_command(quoted(kExample) + " " + quoted(kExampleManifest) + " 1000");
  INFO(out.text);
  if (out.status == 0) {
    CHECK(out.text.find("all correct") != std::string::npos); // a machine with a GPU
    return;
  }
  CHECK(out.status == 3);
  CHECK_THAT(out.text, Catch::StartsWith("launch_module: "));
  CHECK(out.text.find("CUDA") != std::string::npos);
  CHECK(std::count(out.text.begin(), out.text.end(), '\n') == 1);

  Output usage = run_command(quoted(kExample));
  CHECK(usage.status == 2);
  Output bad_manifest = run_command(quoted(kExample) + " /nonexistent/m.toml");
  CHECK(bad_manifest.status == 2);
  CHECK_THAT(bad_manifest.text, Catch::Contains("/nonexistent/m.toml: cannot open"));
}
