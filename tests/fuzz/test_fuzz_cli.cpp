#include <sys/wait.h>

#include <array>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <string>

#include "tests/build_paths.h"

namespace {

struct Run {
  int code = -1;
  std::string out;
};

// `redirect` says where stderr goes ("2>&1" or "2>/dev/null").
Run run_tilec_cli(const std::string& args, const std::string& redirect) {
  std::string cmd = std::string(tilec::test::tilec_binary()) + " " + args + " " + redirect;
  Run r;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = pclose(p);
  REQUIRE(WIFEXITED(status));
  r.code = WEXITSTATUS(status);
  return r;
}

std::string last_line(const std::string& s) {
  size_t end = s.find_last_not_of('\n');
  size_t start = s.rfind('\n', end);
  start = start == std::string::npos ? 0 : start + 1;
  return s.substr(start, end - start + 1);
}

} // namespace

TEST_CASE("tilec fuzz runs programs and reports in JSON", "[fuzz][cli]") {
  std::string dir = (std::filesystem::temp_directory_path() / "tilec_fuzz_cli_test").string();
  Run r = run_tilec_cli("fuzz --count 5 --seed 3 --json --save-dir " + dir, "2>/dev/null");
  INFO(r.out);
  CHECK(r.code == 0);
  std::string j = last_line(r.out);
  CHECK_THAT(j, Catch::StartsWith("{\"ok\": true, \"programs\": 5, \"seed\": 3"));
  CHECK_THAT(j, Catch::Contains("\"disagreements\": 0"));
  CHECK_THAT(j, Catch::Contains("\"ops\": {"));
  CHECK_THAT(j, Catch::Contains("\"failures\": []"));

  Run human = run_tilec_cli("fuzz --count 2 --seed 3 --save-dir " + dir, "2>&1");
  CHECK(human.code == 0);
  CHECK_THAT(human.out, Catch::Contains("2 programs (seeds 3..4): 2 agree, 0 disagreements"));
  CHECK_THAT(human.out, Catch::Contains("dtypes exercised:"));
}

TEST_CASE("tilec fuzz rejects bad arguments with exit 2", "[fuzz][cli][errors]") {
  for (const char* args : {"fuzz --count 0", "fuzz --count -3", "fuzz --count many", "fuzz --jobs 0",
                           "fuzz --frobnicate", "fuzz --seed"}) {
    Run r = run_tilec_cli(args, "2>&1");
    INFO(args << "\n" << r.out);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Catch::Contains("tilec: error:"));
  }
}
