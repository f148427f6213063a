#pragma once
// What the primitive kernels' .cpp files share: the kernel cache, dim
// coalescing, and the checks that keep 32-bit kernel indexing exact.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ir/ir.h"
#include "templates/primitives.h"

namespace tilec::templates::prim::detail {

// The kernel built for `key`, building it on first use (thread-safe).
ir::Kernel cached_kernel(const std::string& key, const std::function<ir::Kernel()>& build);

// Smallest power of two >= n, clamped to [lo, hi].
int64_t pow2_block(int64_t n, int64_t lo, int64_t hi);

// Drops size-1 dims and merges neighbours that every operand walks as one
// (stride[d] == stride[d+1] * shape[d+1]), so kernels see the fewest dims;
// the row-major order of the elements is kept. Dims before `keep` stay as
// they are (IndexSelect's gathered dim). Always leaves at least one dim.
void coalesce(ir::Shape& shape, std::vector<std::vector<int64_t>*> strides, int keep = 0);

// UserError unless every element index the kernel will form fits in i32:
// `numel` and offset + Σ (shape-1)·|stride| of `t`.
void require_i32_indexing(const Tensor& t, const char* op);
// UserError unless the offset and strides of a tensor read through them (an elementwise
// input, the source of a gather) fit in i32, the kernels' parameter type. Its elements may
// lie past 2^31: a launch on a buffer that large computes the offsets into it in 64 bits
// (CompileOptions::large_buffers), from these same values.
void require_i32_strides(const Tensor& t, const char* op);

// "f32", "i1", ... for kernel names.
std::string dname(ir::DType t);

// The launch's argument for a tensor's buffer.
launch::Arg buffer_arg(const Tensor& t);

} // namespace tilec::templates::prim::detail
