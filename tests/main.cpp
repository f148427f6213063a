#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

// ctest registers each test case by name through a CMake list, which splits at ';': a name
// with one would register two tests that match nothing and silently never run.
TEST_CASE("no test case's name holds a semicolon", "[tests]") {
  const std::vector<Catch::TestCase>& all = Catch::getAllTestCasesSorted(*Catch::getCurrentContext().getConfig());
  CHECK(all.size() > 100);
  for (const Catch::TestCase& t : all) {
    INFO(t.name);
    CHECK(t.name.find(';') == std::string::npos);
  }
}
