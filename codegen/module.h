#pragma once
// A compiled module on disk: the code files plus the TOML manifest a host
// program launches it from (abi/manifest.h).
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "codegen/compile.h"
#include "abi/manifest.h"

namespace tilec::codegen {

// A stable hash (hex) of the kernel's printed IR without its source locations: what a
// module's manifest records, so the same kernel hashes the same from any checkout.
std::string ir_hash(const ir::Function& fn);

// Writes `<dir>/<name>.ptx` (+ `.cubin` when ptxas ran) for nvptx, or
// `<dir>/<name>.so` for emu, and `<dir>/<name>.toml`; returns the manifest.
// Every file is written to a temporary name and renamed into place.
rt::Manifest write_module(const ir::Function& fn, const CompiledKernel& k, const CompileOptions& opts,
                          const std::map<std::string, rt::SpecValue>& specialization,
                          const std::filesystem::path& dir, const std::string& name,
                          const std::vector<std::string>& run = {},
                          const std::map<std::string, rt::SpecValue>& problem = {});

} // namespace tilec::codegen
