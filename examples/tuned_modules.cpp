// A host program that ships without the compiler: it asks the tilec runtime which paged-
// attention config the tuning database holds for its problem on its device, and which
// modules to launch for it, from a folder written by `tilec autotune --export DIR`.
//
//   tuned_modules DIR/tuning.toml DIR "cpu-emulator" host
//       "batch=4 hq=8 hkv=2 sq=1 head_dim=64 block_size=16 ctx=512 dtype=f16 alibi=0 max_blocks=32 num_blocks=0"
//
// Prints the config and each module's kernel, threads and parameters; exits 2 with the
// runtime's message (naming the module and the `tilec` command that builds it) when a module
// is missing.
#include <cstdio>
#include <exception>

#include "runtime/module_store.h"
#include "runtime/tuning_db.h"

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s DB MODULE_DIR DEVICE ARCH \"KEY\"\n", argv[0]);
    return 2;
  }
  using namespace tilec::rt;
  try {
    TuningDb db = read_tuning_db(argv[1]);
    TunedModules t = load_tuned(db, "paged_attention", argv[3], parse_key(argv[5]), argv[4], {argv[2]});
    std::printf("%s\nconfig: %s\n", t.note.c_str(), format_config(t.config).c_str());
    for (const Manifest& m : t.modules) {
      std::printf("module %s (%s): %d threads, %d B shared, %zu parameters:", m.kernel.c_str(), m.arch.c_str(),
                  m.threads_per_block, m.shared_bytes, m.params.size());
      for (const ModuleParam& p : m.params) std::printf(" %s:%s", p.name.c_str(), p.type.str().c_str());
      std::printf("\n");
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tuned_modules: %s\n", e.what());
    return 2;
  }
}
