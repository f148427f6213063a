#pragma once
// What the launchers that run generated code (emulate, cuda) share: the module cache, which
// compiles a kernel once per printed IR and options and keeps it on disk.
#include <filesystem>
#include <string>

#include "codegen/compile.h"
#include "ir/ir.h"
#include "runtime/launch.h"
#include "abi/manifest.h"

namespace tilec::backends {

// rt::cache_root()/<backend> ($TILEC_CACHE_DIR, else $XDG_CACHE_HOME/tilec, else
// ~/.cache/tilec), else a folder under the temp dir; created when missing.
std::filesystem::path module_cache_dir(const std::string& backend);

// Identifies the code generator in this process (the GNU build id of the executable, else
// its path, size and time), so a rebuilt compiler never picks up a stale cached module.
std::string compiler_identity();

// The module of `fn` compiled with `opts`: from this process's cache, else from the disk
// cache under module_cache_dir(backend), else compiled and written there (code files first,
// manifest last, each renamed into place, so concurrent processes see whole modules only).
// The manifest's dir is set, so Manifest::code_path finds the files.
rt::Manifest cached_module(const ir::Function& fn, const codegen::CompileOptions& opts, const std::string& backend);

} // namespace tilec::backends
