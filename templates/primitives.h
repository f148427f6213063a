#pragma once
// Primitive tensor ops, each a kernel written in the DSL and run through a
// Launcher (so on every backend): the closed basis the paged-attention
// decomposition is built from (docs/ARCHITECTURE.md "Paged attention").
//
// Tensors are strided views of host buffers. Three ops only relabel a view and
// launch nothing: permute, broadcast_to (stride 0) and reshape when the
// strides allow it (a copy otherwise). Each of them has a materializing form
// (permute_copy, broadcast_to_copy, contiguous) that does launch.
//
// One kernel generator serves every elementwise op: a 1-d program over the
// output's flat index that splits the index into up to kMaxRank coordinates
// with runtime sizes and reads each input through its own runtime strides.
// Copy, Cast, Permute/BroadcastTo materialization, Reshape copy, IndexSelect,
// MulScalar, Tanh, Add, Sub, Mul, Ge, MaskedFill and Iota are its modes; Concat is two
// copies into narrowed views of its result (Narrow itself is a view).
// MatMul (batched, strided operands, f32 accumulation) and SoftmaxLastDim
// have kernels of their own. Kernels are specialized per (op, rank, dtypes,
// block) and built once per process.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launch/args.h"
#include "ir/types.h"
#include "launch/launcher.h"

namespace tilec::templates::prim {

inline constexpr int kMaxRank = 5;

// A view of a host buffer: element (c_0, …, c_{r-1}) lives at
// offset + Σ c_d · strides[d]. A stride of 0 repeats an element (broadcast).
// Views share their buffer; every op that computes makes a fresh, contiguous one.
struct Tensor {
  std::shared_ptr<launch::Buffer> buffer;
  ir::Shape shape;
  std::vector<int64_t> strides;
  int64_t offset = 0;

  ir::DType dtype() const { return buffer->dtype; }
  int rank() const { return static_cast<int>(shape.size()); }
  int64_t numel() const;
  bool is_contiguous() const; // dense row-major from `offset`
  // Host read of one element (tests and references; no launch).
  double at(const std::vector<int64_t>& index) const;
};

std::vector<int64_t> row_major_strides(const ir::Shape& shape);
// A fresh contiguous tensor (zero-filled) over a new buffer called `name`.
Tensor empty(ir::DType dtype, const ir::Shape& shape, std::string name);
// Takes `buffer` as a contiguous tensor of `shape`; its element count must match.
Tensor from_buffer(launch::Buffer buffer, const ir::Shape& shape);
// The same over `buffer` itself, not a copy: it must outlive the tensor, and the primitives
// only read it (an input of a recipe).
Tensor borrow_buffer(const launch::Buffer& buffer, const ir::Shape& shape);

// Numpy broadcasting: the common shape of a and b (UserError naming `what`
// and both shapes when there is none), and whether `from` broadcasts to `to`.
ir::Shape broadcast_shapes(const ir::Shape& a, const ir::Shape& b, std::string_view what);
bool broadcasts_to(const ir::Shape& from, const ir::Shape& to);

// --- views: no launch
Tensor permute(const Tensor& x, const std::vector<int64_t>& perm); // result dim i = x dim perm[i]
// Numpy rules: missing leading dims are added, size-1 dims grow (stride 0).
Tensor broadcast_to(const Tensor& x, const ir::Shape& shape);
// Elements [start, start + length) of dim `dim` (torch's narrow).
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
// The same elements in row-major order under `shape`, when x's strides allow
// it without a copy (the rule of torch's view); nullopt otherwise.
std::optional<Tensor> reshape_view(const Tensor& x, const ir::Shape& shape);

// --- ops that launch (each returns a fresh contiguous tensor unless noted)
// A view when reshape_view allows it (no launch), else a contiguous copy.
Tensor reshape(launch::Launcher& l, const Tensor& x, const ir::Shape& shape);
// x itself when already contiguous, else a copy.
Tensor contiguous(launch::Launcher& l, const Tensor& x);
Tensor permute_copy(launch::Launcher& l, const Tensor& x, const std::vector<int64_t>& perm);
Tensor broadcast_to_copy(launch::Launcher& l, const Tensor& x, const ir::Shape& shape);
// IR cast semantics (floats round to nearest even, float->int truncates, ->i1 is != 0).
Tensor cast(launch::Launcher& l, const Tensor& x, ir::DType dtype);
// out[i, …] = x[index[i], …]; index is a 1-d i32 tensor, every entry in
// [0, x.shape[0]) (checked before launch). Only dim 0 is supported.
Tensor index_select(launch::Launcher& l, const Tensor& x, const Tensor& index, int64_t dim = 0);
// [..., M, K] · [..., K, N] -> [..., M, N] with numpy-broadcast batch dims (at
// most 3), any strides, products and sums in f32. Float operands; the result
// is `out_dtype`, else a's dtype when a and b agree, else f32.
Tensor matmul(launch::Launcher& l, const Tensor& a, const Tensor& b,
              std::optional<ir::DType> out_dtype = std::nullopt);
// Elementwise; floats compute in f32 and round once to the result dtype.
Tensor mul_scalar(launch::Launcher& l, const Tensor& x, double s);
Tensor tanh(launch::Launcher& l, const Tensor& x); // float dtypes
// a and b of one dtype, numpy-broadcast to a common shape.
Tensor add(launch::Launcher& l, const Tensor& a, const Tensor& b);
Tensor sub(launch::Launcher& l, const Tensor& a, const Tensor& b);
Tensor mul(launch::Launcher& l, const Tensor& a, const Tensor& b);
Tensor ge(launch::Launcher& l, const Tensor& a, const Tensor& b); // an i1 tensor
// a and b of one dtype and one shape but in dim `dim`, joined along it (a's elements first).
Tensor concat(launch::Launcher& l, const Tensor& a, const Tensor& b, int64_t dim);
// value where mask (i1, broadcast to x) else x.
Tensor masked_fill(launch::Launcher& l, const Tensor& x, const Tensor& mask, double value);
// out[i] = row-major flat index i, converted to dtype.
Tensor iota(launch::Launcher& l, ir::DType dtype, const ir::Shape& shape);
// Softmax over the last dim in f32, any row length, one program per row; a
// row that is all -inf gives all zeros. `block` (0: chosen from the row
// length) is the columns one step of the row loop covers.
Tensor softmax_last_dim(launch::Launcher& l, const Tensor& x,
                        std::optional<ir::DType> out_dtype = std::nullopt, int64_t block = 0);

// Kernels the primitives have built in this process (each built once per
// specialization key, then reused), and their keys.
std::vector<std::string> built_kernel_keys();

} // namespace tilec::templates::prim
