#pragma once
// The runs of paged attention and reshape_and_cache as data (runtime/op_run.h), declared once:
// the kernel cards carry them (`tilec autotune --export`, `tilec compile`), so a host in any
// language runs the ops through the C ABI (runtime/tilec.h) with no code of its own, and the
// templates' C++ launches take their grids, workspace buffers and module specializations from
// the same declarations (rt::RunValues). This file needs only the runtime: the input fuzzer
// builds it without LLVM.
#include "runtime/op_run.h"

namespace tilec::templates {

// Paged attention: the fused walk, and with split-KV the combine.
const rt::OpRun& paged_attention_run();
// reshape_and_cache: the caches written in place.
const rt::OpRun& reshape_and_cache_run();

} // namespace tilec::templates
