#pragma once
// Shared by the runtime tests: a scratch folder and running a command in a child process.
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/build_paths.h"

namespace tilec::rt::test {

// A fresh folder under the system temp dir, removed with the object.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("tilec_rt_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

// Sets an environment variable for the scope of the object.
struct EnvVar {
  std::string name;
  std::optional<std::string> old;
  EnvVar(std::string n, const std::string& value) : name(std::move(n)) {
    if (const char* v = std::getenv(name.c_str())) old = v;
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~EnvVar() {
    if (old) ::setenv(name.c_str(), old->c_str(), 1);
    else ::unsetenv(name.c_str());
  }
};

struct Output {
  int status = -1;  // exit code; -1 when the command did not exit normally
  std::string text; // stdout and stderr together
};

inline Output run_command(const std::string& command) {
  Output out;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return out;
  std::array<char, 4096> buf;
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe))
    out.text.append(buf.data(), n);
  int status = ::pclose(pipe);
  out.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

inline std::string quoted(const std::filesystem::path& p) {
  return "'" + p.string() + "'";
}

// The example host program and the runtime library, as built beside the tests.
inline const std::filesystem::path kExample = ::tilec::test::launch_module_binary();
inline const std::filesystem::path kRuntimeLibrary = ::tilec::test::runtime_library();
inline const std::filesystem::path kFakeCudaDir = ::tilec::test::fake_cuda_dir();

inline const std::filesystem::path kExampleManifest =
    std::filesystem::path(TILEC_SOURCE_DIR) / "examples/vector_add/manifest.toml";

} // namespace tilec::rt::test
