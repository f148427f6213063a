#include "codegen/layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>

#include "ir/error.h"

namespace tilec::codegen {

namespace {

int log2i(int64_t v) { return std::countr_zero(static_cast<uint64_t>(v)); }

int64_t pow2_floor(int64_t v) { return v <= 1 ? 1 : int64_t(1) << (63 - std::countl_zero(static_cast<uint64_t>(v))); }

BlockedLayout make_base(int rank) {
  BlockedLayout b;
  b.size_per_thread.assign(rank, 1);
  b.threads_per_warp.assign(rank, 1);
  b.warps_per_block.assign(rank, 1);
  return b;
}

} // namespace

std::string Layout::str() const {
  return fmt::format("blocked<spt=[{}], tpw=[{}], wpb=[{}], order=[{}]{}{}; dims=[{}]>",
                     fmt::join(base.size_per_thread, ","), fmt::join(base.threads_per_warp, ","),
                     fmt::join(base.warps_per_block, ","), fmt::join(base.order, ","),
                     base.warp_repeat.empty() ? "" : fmt::format(", rep=[{}]", fmt::join(base.warp_repeat, ",")),
                     base.warp_order.empty() ? "" : fmt::format(", warp_order=[{}]", fmt::join(base.warp_order, ",")),
                     fmt::join(dims, ","));
}

int lane_shift(const BlockedLayout& b, int dim) {
  int s = 0;
  for (int d : b.order) {
    if (d == dim) return s;
    s += log2i(b.threads_per_warp[d]);
  }
  internal_fail("lane_shift: dim not in order");
}

int warp_shift(const BlockedLayout& b, int dim) {
  int s = 0;
  for (int d : b.warp_order.empty() ? b.order : b.warp_order) {
    if (d == dim) return s;
    s += log2i(b.warps_per_block[d]);
  }
  internal_fail("warp_shift: dim not in order");
}

ThreadElems thread_elems(const Layout& l, const ir::Shape& shape) {
  const BlockedLayout& b = l.base;
  int rb = b.rank();
  internal_assert(l.dims.size() == shape.size(), "layout rank matches the tile rank");
  ThreadElems t;
  t.base_shape.assign(rb, 1);
  for (size_t d = 0; d < shape.size(); ++d) t.base_shape[l.dims[d]] = shape[d];
  std::vector<int64_t> spt_eff(rb), reps(rb), rep_eff(rb);
  t.per_dim.resize(rb);
  t.replicated.resize(rb);
  for (int i = 0; i < rb; ++i) {
    int64_t extent = t.base_shape[i];
    spt_eff[i] = std::min<int64_t>(b.size_per_thread[i], extent);
    // A tile smaller than a pass wraps: the lanes' repeats inside a warp's span that fall past
    // it hold the same elements again and are not the thread's.
    rep_eff[i] = extent >= b.pass(i) ? b.repeat(i)
                                     : std::clamp<int64_t>(extent / (int64_t(b.size_per_thread[i]) * b.threads_per_warp[i]),
                                                           1, b.repeat(i));
    reps[i] = std::max<int64_t>(1, extent / b.pass(i)) * rep_eff[i];
    t.per_dim[i] = reps[i] * spt_eff[i];
    t.replicated[i] = extent < b.pass(i) && b.threads_per_warp[i] * b.warps_per_block[i] > 1;
    t.count *= t.per_dim[i];
  }
  if (rb > 0) {
    int fast = b.order[0];
    t.run = spt_eff[fast];
    for (size_t d = 0; d < l.dims.size(); ++d)
      if (l.dims[d] == fast) t.run_dim = static_cast<int>(d);
    if (t.run_dim < 0) t.run = 1;
  }
  t.offset.resize(t.count);
  std::vector<int64_t> off(rb);
  for (int64_t j = 0; j < t.count; ++j) {
    int64_t rest = j;
    for (int d : b.order) {
      int64_t e = rest % t.per_dim[d];
      rest /= t.per_dim[d];
      // Repeat q of the thread's run: inside its warp's span (q mod repeat, a lane pattern
      // apart), then whole passes.
      const int64_t q = e / spt_eff[d], r = rep_eff[d];
      off[d] = (q / r) * b.pass(d) + (q % r) * b.size_per_thread[d] * b.threads_per_warp[d] + e % spt_eff[d];
    }
    t.offset[j].resize(shape.size());
    for (size_t d = 0; d < shape.size(); ++d) t.offset[j][d] = off[l.dims[d]];
  }
  return t;
}

Layout access_layout(const ir::Shape& shape, int contig_dim, int vec, int num_warps) {
  int r = static_cast<int>(shape.size());
  internal_assert(r > 0 && contig_dim >= 0 && contig_dim < r, "access_layout of a tile");
  BlockedLayout b = make_base(r);
  b.order.push_back(contig_dim);
  for (int d = r - 1; d >= 0; --d)
    if (d != contig_dim) b.order.push_back(d);
  // As many elements per thread as the access allows, but no more than the tile gives each
  // thread: a wider vector would make one pass of the layout larger than the tile, and
  // threads would load the same elements again.
  int64_t elems = 1;
  for (int64_t d : shape) elems *= d;
  int64_t fair = std::max<int64_t>(1, elems / (int64_t(32) * num_warps));
  b.size_per_thread[contig_dim] = static_cast<int>(std::min<int64_t>({vec, shape[contig_dim], fair}));
  int lanes = 32;
  for (int d : b.order) {
    int t = static_cast<int>(std::min<int64_t>(lanes, std::max<int64_t>(1, shape[d] / b.size_per_thread[d])));
    b.threads_per_warp[d] = t;
    lanes /= t;
  }
  b.threads_per_warp[b.order[0]] *= lanes;
  int warps = num_warps;
  for (auto it = b.order.rbegin(); it != b.order.rend(); ++it) {
    int d = *it;
    int64_t room = shape[d] / (int64_t(b.size_per_thread[d]) * b.threads_per_warp[d]);
    int w = static_cast<int>(std::min<int64_t>(warps, std::max<int64_t>(1, room)));
    b.warps_per_block[d] = w;
    warps /= w;
  }
  b.warps_per_block[b.order.back()] *= warps;
  Layout l{b, {}};
  for (int d = 0; d < r; ++d) l.dims.push_back(d);
  return l;
}

Layout default_layout(const ir::Shape& shape, int elem_bytes, int num_warps) {
  int last = static_cast<int>(shape.size()) - 1;
  return access_layout(shape, last, std::max(1, 16 / std::max(1, elem_bytes)), num_warps);
}

Layout dot_layout(int64_t m, int64_t n, int num_warps) {
  int64_t per = std::max<int64_t>(1, m * n / (32 * num_warps));
  int64_t sn = std::min<int64_t>({n, 8, int64_t(1) << ((log2i(per) + 1) / 2)});
  int64_t sm = std::min<int64_t>(m, pow2_floor(std::max<int64_t>(1, per / sn)));
  BlockedLayout b = make_base(2);
  b.order = {1, 0};
  b.size_per_thread = {static_cast<int>(sm), static_cast<int>(sn)};
  int tn = static_cast<int>(std::min<int64_t>(32, std::max<int64_t>(1, n / sn)));
  b.threads_per_warp = {32 / tn, tn};
  int wm = static_cast<int>(
      std::min<int64_t>(num_warps, std::max<int64_t>(1, m / (sm * b.threads_per_warp[0]))));
  b.warps_per_block = {wm, num_warps / wm};
  return Layout{b, {0, 1}};
}

bool mma_warps_along_m(int64_t m, int64_t n, int num_warps) {
  return m >= 16 * num_warps && m % (16 * num_warps) == 0 && n >= 8 && n % 8 == 0;
}

bool mma_layout_fits(int64_t m, int64_t n, int num_warps) {
  return mma_warps_along_m(m, n, num_warps) || (m >= 1 && n >= 8 * num_warps && n % (8 * num_warps) == 0);
}

Layout mma_layout(int64_t m, int64_t n, int num_warps) {
  internal_assert(mma_layout_fits(m, n, num_warps), "the MMA accumulator layout fits the tile");
  BlockedLayout b = make_base(2);
  b.order = {1, 0};
  b.size_per_thread = {1, 2};
  b.threads_per_warp = {8, 4};
  b.warps_per_block = mma_warps_along_m(m, n, num_warps) ? std::vector<int>{num_warps, 1} : std::vector<int>{1, num_warps};
  return Layout{b, {0, 1}};
}

int wgmma_groups_along_n(int64_t m, int64_t n, int num_warps) {
  if (m % (16 * num_warps) == 0) return 1;
  const int g = num_warps / 4;
  internal_assert(std::has_single_bit(unsigned(g)) && m % 64 == 0 && n % (8 * g) == 0,
                  "the warpgroups split a wgmma dot along N");
  return g;
}

bool wgmma_fits(int64_t m, int64_t n, int64_t k, int num_warps) {
  if (num_warps <= 0 || num_warps % 4 != 0 || k % 16 != 0 || m <= 0) return false;
  if (m % (16 * num_warps) == 0) return n % 8 == 0 && n >= 8 && n <= 256;
  // Warpgroups along N: each a whole slice of N, all of M (a power of two of them: the warp
  // bits split between M and N).
  const int g = num_warps / 4;
  return std::has_single_bit(unsigned(g)) && m % 64 == 0 && n % (8 * g) == 0 && n / g <= 256;
}

bool wgmma_operand_fits(bool kmajor, int64_t mn, int64_t k, int elem_bytes) {
  const int64_t bytes = (kmajor ? k : mn) * elem_bytes;
  return (kmajor || elem_bytes == 2) && (bytes == 32 || bytes == 64 || bytes % 128 == 0);
}

bool wgmma_b_slices_fit(int64_t m, int64_t n, bool b_kmajor, int elem_bytes, int num_warps) {
  const int64_t g = wgmma_groups_along_n(m, n, num_warps);
  return b_kmajor || g == 1 || n / g * elem_bytes % wgmma_swizzle(n * elem_bytes) == 0;
}

int wgmma_swizzle(int64_t bytes) { return int(std::min<int64_t>(bytes, 128)); }

Layout wgmma_layout(int64_t m, int64_t n, int num_warps) {
  internal_assert(num_warps % 4 == 0 && n % 8 == 0 && (m % (16 * num_warps) == 0 || wgmma_fits(m, n, 16, num_warps)),
                  "the wgmma accumulator layout fits the tile");
  BlockedLayout b = make_base(2);
  b.order = {1, 0};
  b.size_per_thread = {1, 2};
  b.threads_per_warp = {8, 4};
  b.warps_per_block = {num_warps, 1};
  b.warp_repeat = {2, 1};
  if (const int g = wgmma_groups_along_n(m, n, num_warps); g > 1) {
    b.warps_per_block = {4, g};
    b.warp_repeat = {2, int(n / (8 * g))};
    b.warp_order = {0, 1};
  }
  return Layout{b, {0, 1}};
}

Layout canonical(Layout l) {
  for (int b = l.base.rank() - 1; b >= 0; --b) {
    bool mapped = std::find(l.dims.begin(), l.dims.end(), b) != l.dims.end();
    if (mapped) continue;
    l.base.size_per_thread[b] = 1;
    if (!l.base.warp_repeat.empty()) l.base.warp_repeat[size_t(b)] = 1; // threads along it hold the same elements
    if (l.base.threads_per_warp[b] != 1 || l.base.warps_per_block[b] != 1) continue;
    if (!l.base.warp_repeat.empty()) l.base.warp_repeat.erase(l.base.warp_repeat.begin() + b);
    if (!l.base.warp_order.empty()) {
      l.base.warp_order.erase(std::find(l.base.warp_order.begin(), l.base.warp_order.end(), b));
      for (int& o : l.base.warp_order)
        if (o > b) --o;
    }
    l.base.size_per_thread.erase(l.base.size_per_thread.begin() + b);
    l.base.threads_per_warp.erase(l.base.threads_per_warp.begin() + b);
    l.base.warps_per_block.erase(l.base.warps_per_block.begin() + b);
    l.base.order.erase(std::find(l.base.order.begin(), l.base.order.end(), b));
    for (int& o : l.base.order)
      if (o > b) --o;
    for (int& d : l.dims)
      if (d > b) --d;
  }
  if (std::all_of(l.base.warp_repeat.begin(), l.base.warp_repeat.end(), [](int r) { return r == 1; }))
    l.base.warp_repeat.clear();
  if (l.base.warp_order == l.base.order) l.base.warp_order.clear();
  return l;
}

Layout slice_layout(const Layout& l, int dim) {
  Layout r = l;
  r.dims.erase(r.dims.begin() + dim);
  return canonical(r);
}

Layout expand_layout(const Layout& l, int axis) {
  Layout r = l;
  int rb = r.base.rank();
  std::vector<int> free_dims;
  for (int b = 0; b < rb; ++b)
    if (std::find(r.dims.begin(), r.dims.end(), b) == r.dims.end()) free_dims.push_back(b);
  int lo = axis > 0 ? r.dims[axis - 1] : -1;
  int hi = axis < static_cast<int>(r.dims.size()) ? r.dims[axis] : rb;
  int pick = -1;
  for (int b : free_dims)
    if (b > lo && b < hi) {
      pick = b;
      break;
    }
  if (pick < 0 && !free_dims.empty()) pick = free_dims[0];
  if (pick < 0) {
    pick = rb;
    r.base.size_per_thread.push_back(1);
    r.base.threads_per_warp.push_back(1);
    r.base.warps_per_block.push_back(1);
    if (!r.base.warp_repeat.empty()) r.base.warp_repeat.push_back(1);
    if (!r.base.warp_order.empty()) r.base.warp_order.push_back(rb);
    r.base.order.push_back(rb);
  }
  r.dims.insert(r.dims.begin() + axis, pick);
  return canonical(r);
}

Layout permute_layout(const Layout& l, const std::vector<int64_t>& perm) {
  Layout r = l;
  for (size_t i = 0; i < perm.size(); ++i) r.dims[i] = l.dims[perm[i]];
  return r;
}

bool dot_on_wgmma_only(const ir::Op& dot) {
  ir::DType a = dot.operands[0]->type.dtype(), b = dot.operands[1]->type.dtype();
  return a == b && ir::is_fp8(a) && dot.results[0]->type.dtype() == ir::DType::f32;
}

bool dot_on_tensor_cores(const ir::Op& dot) {
  ir::DType a = dot.operands[0]->type.dtype(), b = dot.operands[1]->type.dtype();
  return a == b && (a == ir::DType::f16 || a == ir::DType::bf16) && dot.operands[0]->type.shape[1] >= 2;
}

} // namespace tilec::codegen
