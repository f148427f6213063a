#pragma once
// The template kernels. Each returns its registry entry; the DSL builders are
// exposed too so tests and examples can build them directly.
#include "dsl/dsl.h"
#include "templates/registry.h"

namespace tilec::templates {

KernelTemplate vector_add_template();
KernelTemplate softmax_template();
KernelTemplate matmul_template();

ir::Kernel vector_add(int64_t block);
ir::Kernel softmax(int64_t block);
ir::Kernel matmul(int64_t block_m, int64_t block_n, int64_t block_k);
ir::Kernel matmul(int64_t block_m, int64_t block_n, int64_t block_k, ir::DType dt, int64_t num_stages,
                  int64_t n_multiple, int64_t k_multiple, bool warp_specialize = false);

} // namespace tilec::templates
