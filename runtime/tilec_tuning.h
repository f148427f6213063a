/* A plain C API over the tuning database (runtime/tuning_db.h), for hosts written in
   other languages: open a database written by `tilec autotune`, select the config for a
   problem, read it. No LLVM and no compiler are involved.

     char err[256];
     tilec_tuning_db* db = tilec_tuning_open("tuning.toml", err, sizeof err);
     const char* names[8]; long long values[8]; char note[256];
     int n = tilec_tuning_select(db, "paged_attention", "NVIDIA H100 80GB HBM3",
                                 "batch=2 hq=8 hkv=2 head_dim=64 ctx=256 dtype=f32 ...",
                                 names, values, 8, note, sizeof note);
     tilec_tuning_close(db);
*/
#ifndef TILEC_RUNTIME_TILEC_TUNING_H
#define TILEC_RUNTIME_TILEC_TUNING_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tilec_tuning_db tilec_tuning_db;

/* Opens and parses `path` (a missing file is an empty database). NULL on failure, with
   the reason (file:line:column) in `err`. */
tilec_tuning_db* tilec_tuning_open(const char* path, char* err, size_t err_len);
void tilec_tuning_close(tilec_tuning_db* db);
/* Number of entries. */
int tilec_tuning_size(const tilec_tuning_db* db);

/* Selects a config for `kernel` on `device` and `key` ("name=value ..."), by the rules
   of select_config (exact key, else nearest context length and batch). Writes up to
   `capacity` parameter names (valid until the database is closed) and values, and a
   line saying what was chosen to `note`. Returns the number of parameters, 0 when
   nothing fits (use the defaults), -1 on a malformed key (reason in `note`). */
int tilec_tuning_select(const tilec_tuning_db* db, const char* kernel, const char* device, const char* key,
                        const char** names, long long* values, int capacity, char* note, size_t note_len);

/* Selects the config as tilec_tuning_select does (the documented defaults when nothing
   fits) and finds the modules to launch for it, in launch order, for `arch` ("sm_80",
   "sm_90", or "host" for the emulator): in `dirs` (folders separated by ':', e.g. one
   written by `tilec autotune --export`; may be NULL), then the module cache ($TILEC_CACHE_DIR,
   else ~/.cache/tilec). `extra` ("softcap=1", or NULL) names values that specialize the
   modules without being part of the tuning key. Writes the manifest paths, one per line,
   to `manifests` and a line saying what was chosen to `note`. Returns the number of
   modules, or -1 when one is missing, corrupt or does not fit (the reason, naming the
   module and the `tilec` command that builds it, in `note`). */
int tilec_tuned_modules(const tilec_tuning_db* db, const char* kernel, const char* device, const char* key,
                        const char* arch, const char* dirs, const char* extra, char* manifests,
                        size_t manifests_len, char* note, size_t note_len);

#ifdef __cplusplus
}
#endif

#endif
