// Golden text-IR tests of the tile passes: each tests/ir/golden/NAME.in.ir (its first line
// names the passes, `// passes: fold_constants cse dce`; `//` lines are comments) is parsed,
// verified, run through those passes in order and printed; the text must equal
// NAME.out.ir byte for byte. A change to a pass shows as a diff of readable IR. After a
// deliberate change, regenerate with TILEC_GOLDEN_UPDATE=1 and read the diff before
// committing it.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ir/parser.h"
#include "ir/passes.h"
#include "ir/printer.h"
#include "ir/verifier.h"

namespace fs = std::filesystem;
using namespace tilec;

namespace {

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The passes named on the first line, and the IR without its comment lines.
std::pair<std::vector<std::string>, std::string> split(const std::string& text) {
  std::vector<std::string> passes;
  std::string ir, line;
  std::istringstream in(text);
  bool first = true;
  while (std::getline(in, line)) {
    if (first) {
      REQUIRE(line.rfind("// passes:", 0) == 0);
      std::istringstream words(line.substr(10));
      for (std::string w; words >> w;) passes.push_back(w);
      first = false;
      continue;
    }
    if (line.rfind("//", 0) == 0) continue;
    ir += line + "\n";
  }
  return {passes, ir};
}

} // namespace

TEST_CASE("the tile passes turn each golden input into its golden output", "[ir][passes][golden]") {
  const fs::path dir = fs::path(TILEC_SOURCE_DIR) / "tests" / "ir" / "golden";
  const bool update = std::getenv("TILEC_GOLDEN_UPDATE") != nullptr;
  int cases = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!name.ends_with(".in.ir")) continue;
    INFO(name);
    auto [passes, text] = split(read(entry.path()));
    ir::Kernel k = ir::parse(text, name);
    ir::verify(*k);
    for (const std::string& p : passes) {
      INFO("pass " << p);
      if (p == "fold_constants") ir::fold_constants(*k);
      else if (p == "cse") ir::cse(*k);
      else if (p == "dce") ir::dce(*k);
      else if (p == "default") ir::run_default_passes(*k);
      else FAIL("unknown pass '" << p << "' (fold_constants, cse, dce, default)");
      ir::verify(*k);
    }
    const std::string got = ir::print(*k);
    const fs::path out = dir / (name.substr(0, name.size() - 6) + ".out.ir");
    if (update) std::ofstream(out, std::ios::binary) << got;
    REQUIRE(fs::exists(out));
    CHECK(got == read(out));
    ++cases;
  }
  CHECK(cases >= 2);
}
