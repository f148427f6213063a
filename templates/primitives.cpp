#include "templates/primitives.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <numeric>

#include "dsl/dsl.h"
#include "templates/prim_detail.h"
#include "templates/registry.h"

namespace tilec::templates::prim {

using ir::DType;
using ir::Shape;

// --- tensors and views

int64_t Tensor::numel() const {
  return ir::num_elements(shape);
}

bool Tensor::is_contiguous() const {
  int64_t expect = 1;
  for (int d = rank() - 1; d >= 0; --d) {
    if (shape[d] != 1 && strides[d] != expect) return false;
    expect *= shape[d];
  }
  return true;
}

double Tensor::at(const std::vector<int64_t>& index) const {
  if (index.size() != shape.size())
    throw UserError(fmt::format("tensor of shape {} indexed with {} coordinates",
                                ir::shape_str(shape), index.size()));
  int64_t e = offset;
  for (size_t d = 0; d < index.size(); ++d) {
    if (index[d] < 0 || index[d] >= shape[d])
      throw UserError(fmt::format("index {} out of range for dim {} of shape {}", index[d], d,
                                  ir::shape_str(shape)));
    e += index[d] * strides[d];
  }
  return buffer->get(static_cast<size_t>(e));
}

std::vector<int64_t> row_major_strides(const Shape& shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    s[d] = acc;
    acc *= shape[d];
  }
  return s;
}

Tensor empty(DType dtype, const Shape& shape, std::string name) {
  for (int64_t d : shape)
    if (d < 0)
      throw UserError(fmt::format("tensor '{}': negative size in {}", name, ir::shape_str(shape)));
  auto buf = std::make_shared<launch::Buffer>(std::move(name), dtype,
                                              static_cast<size_t>(ir::num_elements(shape)));
  return {std::move(buf), shape, row_major_strides(shape), 0};
}

Tensor from_buffer(launch::Buffer buffer, const Shape& shape) {
  if (static_cast<int64_t>(buffer.count()) != ir::num_elements(shape))
    throw UserError(fmt::format("buffer '{}' has {} elements, shape {} needs {}", buffer.name,
                                buffer.count(), ir::shape_str(shape), ir::num_elements(shape)));
  return {std::make_shared<launch::Buffer>(std::move(buffer)), shape, row_major_strides(shape), 0};
}

Tensor borrow_buffer(const launch::Buffer& buffer, const Shape& shape) {
  if (static_cast<int64_t>(buffer.count()) != ir::num_elements(shape))
    throw UserError(fmt::format("buffer '{}' has {} elements, shape {} needs {}", buffer.name,
                                buffer.count(), ir::shape_str(shape), ir::num_elements(shape)));
  // A shared_ptr that owns nothing: the caller keeps the buffer alive.
  std::shared_ptr<launch::Buffer> view(std::shared_ptr<void>(), const_cast<launch::Buffer*>(&buffer));
  return {std::move(view), shape, row_major_strides(shape), 0};
}

Shape broadcast_shapes(const Shape& a, const Shape& b, std::string_view what) {
  std::optional<Shape> s = ir::broadcast_shapes(a, b);
  if (!s) throw UserError(fmt::format("{}: shapes {} and {} do not broadcast", what, ir::shape_str(a), ir::shape_str(b)));
  return *s;
}

bool broadcasts_to(const Shape& from, const Shape& to) { return ir::broadcasts_to(from, to); }

Tensor permute(const Tensor& x, const std::vector<int64_t>& perm) {
  std::vector<bool> seen(x.shape.size());
  bool ok = perm.size() == x.shape.size();
  for (int64_t p : perm) {
    ok = ok && p >= 0 && p < x.rank() && !seen[p];
    if (ok) seen[p] = true;
  }
  if (!ok)
    throw UserError(fmt::format("Permute: [{}] is not a permutation of the {} dims of {}",
                                fmt::join(perm, ", "), x.rank(), ir::shape_str(x.shape)));
  Tensor r = x;
  for (size_t i = 0; i < perm.size(); ++i) {
    r.shape[i] = x.shape[perm[i]];
    r.strides[i] = x.strides[perm[i]];
  }
  return r;
}

Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  if (!broadcasts_to(x.shape, shape))
    throw UserError(fmt::format("BroadcastTo: cannot broadcast {} to {}", ir::shape_str(x.shape),
                                ir::shape_str(shape)));
  size_t lead = shape.size() - x.shape.size();
  Tensor r = x;
  r.shape = shape;
  r.strides.assign(shape.size(), 0); // new and size-1 dims repeat
  for (size_t d = 0; d < x.shape.size(); ++d)
    if (x.shape[d] == shape[lead + d]) r.strides[lead + d] = x.strides[d];
  return r;
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  if (dim < 0 || dim >= x.rank() || start < 0 || length < 0 || start + length > x.shape[size_t(dim)])
    throw UserError(fmt::format("Narrow: elements [{}, {}) of dim {} are not within {}", start, start + length, dim,
                                ir::shape_str(x.shape)));
  Tensor r = x;
  r.shape[size_t(dim)] = length;
  r.offset += start * x.strides[size_t(dim)];
  return r;
}

std::optional<Tensor> reshape_view(const Tensor& x, const Shape& shape) {
  if (ir::num_elements(shape) != x.numel())
    throw UserError(fmt::format("Reshape: {} has {} elements, {} has {}", ir::shape_str(x.shape),
                                x.numel(), ir::shape_str(shape), ir::num_elements(shape)));
  Tensor r = x;
  r.shape = shape;
  if (x.numel() <= 1 || x.is_contiguous()) {
    r.strides = row_major_strides(shape);
    return r;
  }
  // Walk x's dims from the right in chunks that are contiguous among
  // themselves; each chunk must be covered exactly by consecutive new dims.
  r.strides.assign(shape.size(), 0);
  int view_d = static_cast<int>(shape.size()) - 1;
  int64_t chunk_base = x.strides.back(), tensor_numel = 1, view_numel = 1;
  for (int d = x.rank() - 1; d >= 0; --d) {
    tensor_numel *= x.shape[d];
    bool chunk_ends =
        d == 0 || (x.shape[d - 1] != 1 && x.strides[d - 1] != tensor_numel * chunk_base);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
      r.strides[view_d] = view_numel * chunk_base;
      view_numel *= shape[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (d > 0) {
      chunk_base = x.strides[d - 1];
      tensor_numel = view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return r;
}

// --- shared machinery

namespace detail {

namespace {
std::mutex g_cache_mutex;
std::map<std::string, ir::Kernel>& kernel_cache() {
  static std::map<std::string, ir::Kernel> cache;
  return cache;
}
} // namespace

ir::Kernel cached_kernel(const std::string& key, const std::function<ir::Kernel()>& build) {
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  auto& cache = kernel_cache();
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  return cache.emplace(key, build()).first->second;
}

int64_t pow2_block(int64_t n, int64_t lo, int64_t hi) {
  int64_t b = lo;
  while (b < n && b < hi)
    b *= 2;
  return b;
}

void coalesce(Shape& shape, std::vector<std::vector<int64_t>*> strides, int keep) {
  Shape s;
  std::vector<std::vector<int64_t>> st(strides.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    bool kept = static_cast<int>(d) < keep;
    if (shape[d] == 1 && !kept) continue;
    bool merge = !s.empty() && !kept && static_cast<int>(s.size()) > keep;
    for (size_t k = 0; merge && k < strides.size(); ++k)
      merge = st[k].back() == (*strides[k])[d] * shape[d];
    if (merge) {
      s.back() *= shape[d];
      for (size_t k = 0; k < strides.size(); ++k)
        st[k].back() = (*strides[k])[d];
    } else {
      s.push_back(shape[d]);
      for (size_t k = 0; k < strides.size(); ++k)
        st[k].push_back((*strides[k])[d]);
    }
  }
  if (s.empty()) {
    s.push_back(1);
    for (auto& v : st)
      v.push_back(0);
  }
  shape = std::move(s);
  for (size_t k = 0; k < strides.size(); ++k)
    *strides[k] = std::move(st[k]);
}

void require_i32_indexing(const Tensor& t, const char* op) {
  constexpr int64_t limit = (int64_t(1) << 31) - 4096; // headroom for program_id * block + arange
  int64_t last = t.offset;
  for (int d = 0; d < t.rank(); ++d) {
    if (t.strides[d] < 0) internal_fail("a tensor view with a negative stride");
    if (t.shape[d] > 0) last += (t.shape[d] - 1) * t.strides[d];
  }
  if (t.numel() >= limit || last >= limit)
    throw UserError(
        fmt::format("{}: tensor {} ({} elements, last element at {}) is too large for the "
                    "primitives' 32-bit indexing (limit {})",
                    op, ir::shape_str(t.shape), t.numel(), last, limit));
}

void require_i32_strides(const Tensor& t, const char* op) {
  constexpr int64_t limit = int64_t(1) << 31;
  bool ok = t.offset < limit;
  for (int d = 0; d < t.rank(); ++d) {
    if (t.strides[d] < 0) internal_fail("a tensor view with a negative stride");
    ok = ok && t.strides[d] < limit;
  }
  if (!ok)
    throw UserError(fmt::format("{}: tensor {} (offset {}, strides [{}]) has an offset or stride past the "
                                "primitives' 32-bit parameters (limit {})",
                                op, ir::shape_str(t.shape), t.offset, fmt::join(t.strides, ", "), limit - 1));
}

std::string dname(DType t) {
  return std::string(ir::dtype_name(t));
}

launch::Arg buffer_arg(const Tensor& t) {
  return launch::Arg::of(*t.buffer);
}

} // namespace detail

std::vector<std::string> built_kernel_keys() {
  std::lock_guard<std::mutex> lock(detail::g_cache_mutex);
  std::vector<std::string> keys;
  for (const auto& [key, kernel] : detail::kernel_cache())
    keys.push_back(key);
  return keys;
}

// --- the strided elementwise generator

namespace {

constexpr int kNumWarps = 4;
constexpr int64_t kElementBlock = 256;

enum class Ew : uint8_t { copy, gather, mul_scalar, tanh, add, sub, mul, ge, masked_fill, iota };

const char* ew_name(Ew op) {
  switch (op) {
  case Ew::copy:
    return "copy";
  case Ew::gather:
    return "gather";
  case Ew::mul_scalar:
    return "mul_scalar";
  case Ew::tanh:
    return "tanh";
  case Ew::add:
    return "add";
  case Ew::sub:
    return "sub";
  case Ew::mul:
    return "mul";
  case Ew::ge:
    return "ge";
  case Ew::masked_fill:
    return "masked_fill";
  case Ew::iota:
    return "iota";
  }
  return "?";
}

bool has_scalar(Ew op) {
  return op == Ew::mul_scalar || op == Ew::masked_fill;
}

// The dtype arithmetic runs in: f32 for any float operand, else the widest int.
DType compute_dtype(const std::vector<DType>& ts) {
  bool any_i64 = false;
  for (DType t : ts) {
    if (ir::is_float(t)) return DType::f32;
    any_i64 |= t == DType::i64;
  }
  return any_i64 ? DType::i64 : DType::i32;
}

struct EwSpec {
  Ew op;
  int rank;
  std::vector<DType> ins; // gather: {source, i32 index}
  DType out;
  int64_t block;

  std::string key() const {
    std::string k = fmt::format("prim_{}_r{}", ew_name(op), rank);
    for (DType t : ins)
      k += "_" + detail::dname(t);
    return k + fmt::format("_to_{}_b{}", detail::dname(out), block);
  }
};

ir::Kernel elementwise_kernel(const EwSpec& s) {
  using namespace dsl;
  const bool gather = s.op == Ew::gather;
  const DType cdt = compute_dtype(s.ins);
  KernelBuilder k(s.key());
  Tile out = k.arg(ptr_to(s.out), "out");
  std::vector<Tile> in;
  in.reserve(s.ins.size());
  for (size_t i = 0; i < s.ins.size(); ++i)
    in.push_back(k.arg(ptr_to(s.ins[i]), fmt::format("in{}", i)));
  Tile n = k.arg(i32, "n");
  std::vector<Tile> dims;
  dims.reserve(s.rank);
  for (int d = 0; d < s.rank; ++d)
    dims.push_back(k.arg(i32, fmt::format("dim{}", d)));

  struct Strided {
    Tile offset;
    std::vector<Tile> strides;
  };
  auto strided = [&](const std::string& what, int rank) {
    Strided st{k.arg(i32, what + "_offset"), {}};
    st.strides.reserve(rank);
    for (int d = 0; d < rank; ++d)
      st.strides.push_back(k.arg(i32, fmt::format("{}_stride{}", what, d)));
    return st;
  };
  Strided so = strided("out", s.rank);
  std::vector<Strided> si;
  si.reserve(s.ins.size());
  for (size_t i = 0; i < s.ins.size(); ++i)
    si.push_back(strided(fmt::format("in{}", i), gather && i == 1 ? 1 : s.rank));
  Tile scalar = has_scalar(s.op) ? k.arg(ElemType{cdt, false}, "scalar") : Tile();

  // This program's slice of the output's flat index, split into coordinates.
  Tile offs = program_id(0) * s.block + arange(0, s.block);
  Tile live = offs < n;
  std::vector<Tile> coord(s.rank);
  Tile rest = offs;
  for (int d = s.rank - 1; d > 0; --d) {
    coord[d] = rest % dims[d];
    rest = rest / dims[d];
  }
  coord[0] = rest;
  auto address = [&](const Strided& st, const Tile& first) {
    Tile a = st.offset + first * st.strides[0];
    for (int d = 1; d < s.rank; ++d)
      a = a + coord[d] * st.strides[d];
    return a;
  };
  auto read = [&](size_t i) { return load(in[i] + address(si[i], coord[0]), live); };

  Tile value;
  switch (s.op) {
  case Ew::copy:
    value = read(0);
    break;
  case Ew::gather: {
    Tile row = load(in[1] + (si[1].offset + coord[0] * si[1].strides[0]), live);
    value = load(in[0] + address(si[0], row), live);
    break;
  }
  case Ew::mul_scalar:
    value = read(0).to(cdt) * scalar;
    break;
  case Ew::tanh:
    value = dsl::tanh(read(0).to(DType::f32));
    break;
  case Ew::add:
    value = read(0).to(cdt) + read(1).to(cdt);
    break;
  case Ew::sub:
    value = read(0).to(cdt) - read(1).to(cdt);
    break;
  case Ew::mul:
    value = read(0).to(cdt) * read(1).to(cdt);
    break;
  case Ew::ge:
    value = read(0).to(cdt) >= read(1).to(cdt);
    break;
  case Ew::masked_fill:
    value = where(read(1), scalar, read(0).to(cdt));
    break;
  case Ew::iota:
    value = offs;
    break;
  }
  store(out + address(so, coord[0]), value, live);
  return k.finish();
}

// Runs `op` writing `out`; every input but gather's index has out's shape
// (gather's source differs in dim 0 only and is addressed through the index).
void launch_elementwise(launch::Launcher& l, Ew op, const Tensor& out, const std::vector<Tensor>& ins,
                        double scalar = 0.0) {
  if (out.numel() == 0) return;
  const bool gather = op == Ew::gather;
  if (out.rank() > kMaxRank)
    throw UserError(fmt::format("{}: rank {} ({}) is above the primitives' limit of {}",
                                ew_name(op), out.rank(), ir::shape_str(out.shape), kMaxRank));
  detail::require_i32_indexing(out, ew_name(op));
  for (const Tensor& t : ins) detail::require_i32_strides(t, ew_name(op));

  Shape shape = out.shape;
  std::vector<int64_t> out_strides = out.strides;
  std::vector<std::vector<int64_t>> in_strides;
  for (size_t i = 0; i < ins.size(); ++i)
    if (!(gather && i == 1)) in_strides.push_back(ins[i].strides);
  std::vector<std::vector<int64_t>*> all = {&out_strides};
  for (auto& s : in_strides)
    all.push_back(&s);
  detail::coalesce(shape, all, gather ? 1 : 0);

  EwSpec spec{op, static_cast<int>(shape.size()), {}, out.dtype(), kElementBlock};
  for (const Tensor& t : ins)
    spec.ins.push_back(t.dtype());
  ir::Kernel kernel = detail::cached_kernel(spec.key(), [&] { return elementwise_kernel(spec); });

  std::vector<launch::Arg> args = {detail::buffer_arg(out)};
  for (const Tensor& t : ins)
    args.push_back(detail::buffer_arg(t));
  args.push_back(launch::Arg::of_int(out.numel()));
  for (int64_t d : shape)
    args.push_back(launch::Arg::of_int(d));
  auto push_strided = [&](int64_t offset, const std::vector<int64_t>& strides) {
    args.push_back(launch::Arg::of_int(offset));
    for (int64_t s : strides)
      args.push_back(launch::Arg::of_int(s));
  };
  push_strided(out.offset, out_strides);
  for (size_t i = 0, j = 0; i < ins.size(); ++i) {
    if (gather && i == 1)
      push_strided(ins[i].offset, {ins[i].strides[0]});
    else
      push_strided(ins[i].offset, in_strides[j++]);
  }
  if (has_scalar(op)) {
    if (ir::is_float(compute_dtype(spec.ins))) {
      args.push_back(launch::Arg::of_float(scalar));
    } else {
      if (!std::isfinite(scalar) || scalar != std::trunc(scalar))
        throw UserError(fmt::format("{}: the scalar {} is not an integer, as {} data needs",
                                    ew_name(op), scalar, ir::dtype_name(out.dtype())));
      args.push_back(launch::Arg::of_int(static_cast<int64_t>(scalar)));
    }
  }
  l.launch(kernel, kNumWarps, {cdiv(out.numel(), kElementBlock), 1, 1}, args);
}

Tensor copy_as(launch::Launcher& l, const Tensor& x, DType dtype, const char* what) {
  Tensor out = empty(dtype, x.shape, what);
  launch_elementwise(l, Ew::copy, out, {x});
  return out;
}

Tensor binary(launch::Launcher& l, Ew op, const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype())
    throw UserError(fmt::format("{}: operands are {} and {}; the primitives take one dtype",
                                ew_name(op), ir::dtype_name(a.dtype()), ir::dtype_name(b.dtype())));
  Shape shape = broadcast_shapes(a.shape, b.shape, ew_name(op));
  Tensor out = empty(op == Ew::ge ? DType::i1 : a.dtype(), shape, ew_name(op));
  launch_elementwise(l, op, out, {broadcast_to(a, shape), broadcast_to(b, shape)});
  return out;
}

} // namespace

// --- the ops

Tensor reshape(launch::Launcher& l, const Tensor& x, const Shape& shape) {
  if (auto v = reshape_view(x, shape)) return *v;
  Tensor dense = copy_as(l, x, x.dtype(), "reshape");
  return *reshape_view(dense, shape);
}

Tensor contiguous(launch::Launcher& l, const Tensor& x) {
  return x.is_contiguous() ? x : copy_as(l, x, x.dtype(), "contiguous");
}

Tensor permute_copy(launch::Launcher& l, const Tensor& x, const std::vector<int64_t>& perm) {
  return copy_as(l, permute(x, perm), x.dtype(), "permute");
}

Tensor broadcast_to_copy(launch::Launcher& l, const Tensor& x, const Shape& shape) {
  return copy_as(l, broadcast_to(x, shape), x.dtype(), "broadcast_to");
}

Tensor cast(launch::Launcher& l, const Tensor& x, DType dtype) {
  return copy_as(l, x, dtype, "cast");
}

Tensor index_select(launch::Launcher& l, const Tensor& x, const Tensor& index, int64_t dim) {
  if (dim != 0)
    throw UserError(fmt::format("IndexSelect: only dim 0 is supported, got dim {}", dim));
  if (x.rank() < 1) throw UserError("IndexSelect: the source is a scalar");
  if (index.rank() != 1 || index.dtype() != DType::i32)
    throw UserError(fmt::format("IndexSelect: the index must be a 1-d i32 tensor, got {} of {}",
                                ir::shape_str(index.shape), ir::dtype_name(index.dtype())));
  for (int64_t i = 0; i < index.shape[0]; ++i) {
    double v = index.at({i});
    if (v < 0 || v >= static_cast<double>(x.shape[0]))
      throw UserError(fmt::format("IndexSelect: index[{}] = {} is outside [0, {}) (dim 0 of {})", i,
                                  v, x.shape[0], ir::shape_str(x.shape)));
  }
  Shape shape = x.shape;
  shape[0] = index.shape[0];
  Tensor out = empty(x.dtype(), shape, "index_select");
  Tensor source = x; // addressed through the index in dim 0
  source.shape = shape;
  launch_elementwise(l, Ew::gather, out, {source, index});
  return out;
}

Tensor mul_scalar(launch::Launcher& l, const Tensor& x, double s) {
  if (x.dtype() == DType::i1) throw UserError("MulScalar: i1 data has no multiplication");
  Tensor out = empty(x.dtype(), x.shape, "mul_scalar");
  launch_elementwise(l, Ew::mul_scalar, out, {x}, s);
  return out;
}

Tensor tanh(launch::Launcher& l, const Tensor& x) {
  if (!ir::is_float(x.dtype()))
    throw UserError(fmt::format("Tanh: needs float data, got {}", ir::dtype_name(x.dtype())));
  Tensor out = empty(x.dtype(), x.shape, "tanh");
  launch_elementwise(l, Ew::tanh, out, {x});
  return out;
}

Tensor add(launch::Launcher& l, const Tensor& a, const Tensor& b) {
  return binary(l, Ew::add, a, b);
}
Tensor sub(launch::Launcher& l, const Tensor& a, const Tensor& b) {
  return binary(l, Ew::sub, a, b);
}
Tensor mul(launch::Launcher& l, const Tensor& a, const Tensor& b) {
  return binary(l, Ew::mul, a, b);
}
Tensor ge(launch::Launcher& l, const Tensor& a, const Tensor& b) {
  return binary(l, Ew::ge, a, b);
}

Tensor concat(launch::Launcher& l, const Tensor& a, const Tensor& b, int64_t dim) {
  bool fits = a.rank() == b.rank() && dim >= 0 && dim < a.rank() && a.dtype() == b.dtype();
  for (int d = 0; fits && d < a.rank(); ++d) fits = d == dim || a.shape[size_t(d)] == b.shape[size_t(d)];
  if (!fits)
    throw UserError(fmt::format("Concat: {} of {} and {} of {} do not join along dim {}", ir::shape_str(a.shape),
                                ir::dtype_name(a.dtype()), ir::shape_str(b.shape), ir::dtype_name(b.dtype()), dim));
  Shape shape = a.shape;
  shape[size_t(dim)] += b.shape[size_t(dim)];
  Tensor out = empty(a.dtype(), shape, "concat");
  launch_elementwise(l, Ew::copy, narrow(out, dim, 0, a.shape[size_t(dim)]), {a});
  launch_elementwise(l, Ew::copy, narrow(out, dim, a.shape[size_t(dim)], b.shape[size_t(dim)]), {b});
  return out;
}

Tensor masked_fill(launch::Launcher& l, const Tensor& x, const Tensor& mask, double value) {
  if (mask.dtype() != DType::i1)
    throw UserError(
        fmt::format("MaskedFill: the mask must be i1, got {}", ir::dtype_name(mask.dtype())));
  Tensor out = empty(x.dtype(), x.shape, "masked_fill");
  launch_elementwise(l, Ew::masked_fill, out, {x, broadcast_to(mask, x.shape)}, value);
  return out;
}

Tensor iota(launch::Launcher& l, DType dtype, const Shape& shape) {
  Tensor out = empty(dtype, shape, "iota");
  launch_elementwise(l, Ew::iota, out, {});
  return out;
}

} // namespace tilec::templates::prim
