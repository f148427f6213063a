// Input fuzzing of the .npy reader (runtime/npy.h): any bytes either parse or raise
// NpyError naming the input. A parsed array holds exactly the bytes its dtype and shape
// need, and writing it and reading the file back gives the same array.
#include "fuzz/targets/fuzz_target.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "runtime/npy.h"

using namespace tilec;
using namespace tilec::fuzz_targets;

namespace {

// One scratch file per process, removed at exit.
struct ScratchFile {
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("tilec-fuzz-npy-" + std::to_string(::getpid()) + ".npy");
  ~ScratchFile() {
    std::error_code ignored;
    std::filesystem::remove(path, ignored);
  }
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static ScratchFile scratch;
  std::vector<std::byte> bytes(size);
  if (size) std::memcpy(bytes.data(), data, size);
  const std::string source(kSource);
  auto array = read_or_reject<rt::NpyError>(source, [&] { return rt::parse_npy(bytes, source); });
  if (!array) return 0;

  require(array->item_size() > 0, "an accepted dtype has no item size", array->descr);
  require(array->count() >= 0 &&
              array->data.size() == static_cast<size_t>(array->count()) * static_cast<size_t>(array->item_size()),
          "the data does not match the shape and dtype", array->descr);
  must("write_npy(parsed array)", [&] { rt::write_npy(scratch.path.string(), *array); });
  rt::NpyArray back = must("read_npy(write_npy(parsed array))", [&] { return rt::read_npy(scratch.path.string()); });
  require(back.descr == array->descr && back.shape == array->shape && back.data == array->data,
          "write -> read changes the array", array->descr);
  return 0;
}
