#include <sys/wait.h>

#include <array>
#include <catch2/catch.hpp>
#include <cstdio>
#include <string>

namespace {

struct Outcome {
  int code = -1;
  std::string out; // stdout and stderr together
};

Outcome tilec(const std::string& args) {
  std::string cmd = std::string(TILEC_BINARY) + " " + args + " 2>&1";
  Outcome o;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p);
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) o.out.append(buf.data(), n);
  int status = pclose(p);
  REQUIRE(WIFEXITED(status)); // never killed by a signal
  o.code = WEXITSTATUS(status);
  return o;
}

std::string last_line(const std::string& s) {
  size_t end = s.find_last_not_of('\n');
  size_t start = s.rfind('\n', end);
  return s.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1) + 1);
}

int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

} // namespace

TEST_CASE("tilec list names every template", "[cli]") {
  auto o = tilec("list");
  CHECK(o.code == 0);
  for (const char* k : {"vector_add", "softmax", "matmul", "block_m", "--shape"})
    CHECK_THAT(o.out, Catch::Contains(k));
  auto j = tilec("list --json");
  CHECK(j.code == 0);
  CHECK_THAT(last_line(j.out), Catch::StartsWith("{\"kernels\": ["));
}

TEST_CASE("tilec run on the interpreter passes every template", "[cli]") {
  for (const char* k : {"vector_add", "softmax", "matmul"}) {
    auto o = tilec(std::string("run ") + k + " --backend interpret --json");
    INFO(o.out);
    CHECK(o.code == 0);
    CHECK_THAT(last_line(o.out), Catch::Contains("\"ok\": true"));
    CHECK_THAT(last_line(o.out), Catch::Contains("\"bytes_loaded\": null"));
  }
}

TEST_CASE("tilec run takes shapes and template parameters", "[cli]") {
  auto o = tilec("run matmul --backend interpret --set block_m=16 block_n=64 --shape m=33 n=65 k=7");
  INFO(o.out);
  CHECK(o.code == 0);
  CHECK_THAT(o.out, Catch::Contains("m=33"));
}

TEST_CASE("tilec exit codes for bad usage", "[cli][errors]") {
  auto unknown = tilec("run nosuchkernel");
  CHECK(unknown.code == 2);
  CHECK(count_lines(unknown.out) == 1);
  CHECK_THAT(unknown.out, Catch::Contains("nosuchkernel"));

  CHECK(tilec("run softmax --no-such-flag").code == 2);
  CHECK(tilec("frobnicate").code == 2);
  CHECK(tilec("").code == 2);

  auto malformed = tilec("ir softmax --set block");
  CHECK(malformed.code == 2);
  CHECK_THAT(malformed.out, Catch::Contains("NAME=VALUE"));
  auto unknown_param = tilec("ir softmax --set blok=64");
  CHECK(unknown_param.code == 2);
  CHECK_THAT(unknown_param.out, Catch::Contains("blok"));
  auto not_int = tilec("ir softmax --set block=big");
  CHECK(not_int.code == 2);
  CHECK_THAT(not_int.out, Catch::Contains("not an integer"));
  auto not_pow2 = tilec("ir softmax --set block=100");
  CHECK(not_pow2.code == 2);
  CHECK_THAT(not_pow2.out, Catch::Contains("power of two"));
  auto bad_shape = tilec("run softmax --backend interpret --shape cols=5000");
  CHECK(bad_shape.code == 2);
  CHECK_THAT(bad_shape.out, Catch::Contains("cols=5000"));
  CHECK(tilec("run softmax --backend warp-drive").code == 2);
}

TEST_CASE("errors are reported as a JSON last line under --json too", "[cli][errors]") {
  auto o = tilec("run nosuchkernel --json");
  CHECK(o.code == 2);
  CHECK_THAT(last_line(o.out), Catch::StartsWith("{\"ok\": false"));
}

TEST_CASE("every command has --help", "[cli]") {
  for (const char* c : {"", "list", "ir", "run"}) {
    auto o = tilec(std::string(c) + " --help");
    CHECK(o.code == 0);
    CHECK_THAT(o.out, Catch::Contains("Usage"));
  }
}

TEST_CASE("tilec ir prints tile IR that names the kernel", "[cli]") {
  auto o = tilec("ir softmax");
  CHECK(o.code == 0);
  CHECK_THAT(o.out, Catch::Contains("kernel @softmax("));
  CHECK_THAT(o.out, Catch::Contains("reduce"));
}
