#pragma once
// Modules addressed by what they are specialized on (runtime/module_store.h), compiled
// here: for `tilec autotune --export`, `tilec compile`, and as the runtime's builder in a
// host that links the compiler.
#include <filesystem>
#include <string>
#include <vector>

#include "codegen/compile.h"
#include "runtime/module_store.h"
#include "templates/registry.h"

namespace tilec::backends {

// What a config compiles with for `arch` ("sm_80", "sm_90", ... or "host": the emulator) and
// `target` ("nvptx", "emu", "emu-nvptx"; "host" always compiles for the emulator): its
// num_warps, the rest at their defaults.
codegen::CompileOptions compile_options(const templates::ParamMap& params, const std::string& arch,
                                        const std::string& target = "nvptx");

// Compiles every kernel of one run of `t` (build_kernels) for `arch` ("sm_80", "sm_90", or
// "host" for the emulator) and writes each into `dir` with module_spec(t, ...) as its
// specialization. With `unique_names` a module is named `<kernel>-<ir hash>-<arch>`, so
// many configs share a folder; else `<kernel>` (`tilec compile -o DIR`). In launch order.
std::vector<rt::Manifest> write_template_modules(const templates::KernelTemplate& t, const templates::ParamMap& params,
                                                 const templates::ParamMap& shape, const std::string& arch,
                                                 const std::filesystem::path& dir, bool unique_names);

// The builder rt::load_module uses once enable_module_builder() ran: finds the template
// that makes q.kernel, rebuilds its IR from q.values, and returns a module of exactly that
// IR from `dirs` or rt::cache_module_dir() whose files check out, else compiles it into
// the cache (each file renamed into place, so concurrent processes see whole modules).
rt::Manifest build_module(const rt::ModuleQuery& q, const std::vector<std::filesystem::path>& dirs);

// Installs build_module as the runtime's module builder, and the registry's kernel cards
// (templates::kernel_card) as the runtime's card provider.
void enable_module_builder();

} // namespace tilec::backends
