#pragma once
// The manifest of a compiled module: what a host program needs to launch its kernel
// without the compiler (symbol, parameters in order, block size, shared memory, code files).
//
//   kernel = "vector_add"
//   symbol = "vector_add"
//   arch = "sm_90"
//   threads_per_block = 128
//   shared_bytes = 0
//   compiler_version = "tilec 0.1.0"
//   ir_hash = "9c0e54b1d2a3f4e5"
//   run = ["vector_add"]        # optional: the kernels one run launches, in order (a
//                               # multi-kernel op lists each, e.g. a kernel and its combine)
//
//   [code]                      # paths relative to the manifest's folder; at least one
//   ptx = "vector_add.ptx"
//   cubin = "vector_add.cubin"  # optional
//   emulator = "vector_add.so"  # optional: the emu target's shared library
//
//   [[params]]                  # in launch order
//   name = "x"
//   type = "ptr<f32>"           # i1 i8..i64 u8..u64 f16 bf16 f32 f8e4m3 f8e5m2, or ptr<T>
//   access = "read"             # optional, pointers: the kernel never writes through it
//                               # (absent: it may); a written buffer may overlap no other
//
//   [specialization]            # template parameter values: integers or strings
//   block = 1024
//
//   [divisibility]              # optional: integer parameters the code assumes a power of
//   stride = 16                 # two divides; launching with another value is an error
//
//   [fixed]                     # optional: integer parameters compiled in as constants (a
//   col_stride = 1              # value of 1 is specialized); launching with another is an error
//
//   [problem]                   # optional: the problem sizes it was compiled for (not matched;
//   n = 4096                    # benchmarks run that problem)
//
//   [[tensor_maps]]             # optional: TMA tensor maps the kernel takes after its
//   base = "a"                  # params, in order; the launch encodes each from the
//   sizes = ["m", "k"]          # arguments: sizes and strides (elements, outermost first)
//   strides = ["k", 1]          # are integer parameters' names or numbers; box: the block
//   box = [128, 64]             # one copy moves; swizzle: 0, 32, 64 or 128 bytes
//   swizzle = 128
//
//   [ptxas]                     # optional
//   registers = 16
//   spills = 0
//
//   [checksums]                 # optional: "<bytes>:<FNV-1a 64 hex>" of each code file,
//   ptx = "5321:8c1f0e2a9b3d4c5e"  # so a truncated or corrupt module is detected
#include "abi/types.h"

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tilec::rt {

struct ModuleParam {
  std::string name;
  ParamType type;
  bool read_only = false; // a pointer the kernel only reads through (access = "read")
  // A pointer whose offsets the code computes in 64 bits (offsets = 64): it may address more
  // than 2^31 elements. Without it check_launch_args refuses a buffer that large.
  bool offsets64 = false;
  bool operator==(const ModuleParam&) const = default;
};

using SpecValue = std::variant<std::int64_t, std::string>;

// A tensor map the kernel takes after its [[params]], for its TMA copies (sm_90): the launch
// encodes it from the arguments (cuTensorMapEncodeTiled) and passes it by value.
struct ModuleTensorMap {
  std::string base;                 // the pointer parameter: the tensor's first element
  std::vector<SpecValue> sizes;     // outermost first: a number, or an integer parameter's name
  std::vector<SpecValue> strides;   // likewise, in elements; the last is 1
  std::vector<std::int64_t> box;    // the box one copy moves, outermost first
  int swizzle = 0;                  // 0, 32, 64 or 128: the shared layout's swizzle pattern in bytes
  bool operator==(const ModuleTensorMap&) const = default;
};

struct PtxasReport {
  int registers = 0;
  int spills = 0; // spill bytes, stores plus loads
  bool operator==(const PtxasReport&) const = default;
};

struct Manifest {
  std::string kernel;
  std::string symbol;
  std::string arch;                           // "sm_90"
  std::filesystem::path ptx, cubin, emulator; // empty when absent
  std::vector<ModuleParam> params;
  int threads_per_block = 0;
  int shared_bytes = 0; // dynamic shared memory per block
  std::map<std::string, SpecValue> specialization;
  std::string compiler_version;
  std::string ir_hash;
  std::optional<PtxasReport> ptxas;
  std::map<std::string, std::string> checksums; // "ptx" / "cubin" / "emulator" -> file_checksum()
  // The kernels one run of the op launches, in order, this one among them (all specialized
  // alike); empty: this kernel alone. rt::load_tuned loads them all from the first.
  std::vector<std::string> run;
  // The --shape values the module was compiled with, choices by name: informational (a host
  // benchmark runs that problem); lookups match [specialization] only.
  std::map<std::string, SpecValue> problem;
  // Integer parameters (by name) and a power of two the compiled code assumes divides each
  // (CompileOptions::int_arg_divisibility); check_launch_args refuses other values.
  std::map<std::string, std::int64_t> divisibility;
  // Integer parameters (by name) compiled in with one value (CompileOptions::int_arg_values);
  // check_launch_args refuses any other.
  std::map<std::string, std::int64_t> fixed;
  // The tensor maps the kernel takes after `params`, in order.
  std::vector<ModuleTensorMap> tensor_maps;

  // The folder the manifest was read from (not written); code paths are relative to it.
  std::filesystem::path dir;
  std::filesystem::path code_path(const std::filesystem::path& file) const {
    return file.empty() ? file : dir / file;
  }

  bool operator==(const Manifest&) const = default;
};

// "<bytes>:<FNV-1a 64 hex>" of `data`: what [checksums] records for a code file.
std::string file_checksum(std::string_view data);

// Both throw ManifestError naming the file, the line:column when known, and the key.
Manifest read_manifest(const std::filesystem::path& file);
Manifest parse_manifest(std::string_view text, const std::filesystem::path& source);

std::string format_manifest(const Manifest& m);
// Checks the manifest reads back, then writes a temporary file beside `file` and renames it.
void write_manifest(const Manifest& m, const std::filesystem::path& file);

} // namespace tilec::rt
