#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "backends/launchers.h"
#include "fuzz/runner.h"

using namespace tilec;
using namespace tilec::fuzz;

// Every program the fuzzer ever shrank and saved must now agree.
TEST_CASE("fuzz: every saved regression replays and agrees", "[fuzz][emulate]") {
  std::filesystem::path dir = std::filesystem::path(TILEC_SOURCE_DIR) / "tests/fuzz/regressions";
  auto launcher = backends::make_emulate_launcher();
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".tir") continue;
    ++files;
    std::ifstream f(e.path());
    std::string text(std::istreambuf_iterator<char>(f), {});
    INFO(e.path().string() << "\n" << text);
    Program p = from_text(text, e.path().string());
    Outcome o = run_program(p, *launcher);
    INFO(o.message);
    CHECK(o.verdict == Verdict::agree);
  }
  CHECK(files > 0);
}
