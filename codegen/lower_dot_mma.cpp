// dot on the tensor cores (mma.sync.m16n8k16): the operands staged in shared memory (or
// copied there asynchronously, lower_pipeline.cpp), fragment loads by ldmatrix or plain
// loads, the K loop of MMAs, and the accumulator in registers or through shared memory.
#include "codegen/lowering.h"

namespace tilec::codegen::detail {

namespace {

using Builder = llvm::IRBuilder<>;

// The byte `row` * `stride` + `col_bytes` from `base` (offsets never wrap).
llvm::Value* at(Builder& b, llvm::Value* base, int64_t stride, llvm::Value* row, llvm::Value* col_bytes) {
  llvm::Value* byte =
      b.CreateAdd(b.CreateMul(row, b.getInt32(uint32_t(stride)), "", true, true), col_bytes, "", true, true);
  return b.CreateGEP(b.getInt8Ty(), base, byte);
}

llvm::Value* bytes(Builder& b, llvm::Value* v, int eb) {
  return b.CreateMul(v, b.getInt32(uint32_t(eb)), "", true, true);
}

// A row, B row (n) or k index `v` past `limit`: clamped to 0 for the address, and the value
// replaced by zero (null when the padding cannot reach it).
// `always`: the index is past the limit in every lane (rows g + 8 when M <= 8, k pairs
// 2t + 8 when K <= 8): the constant true, and those fragments never touch memory.
llvm::Value* past(Builder& b, llvm::Value* v, int64_t limit, int64_t padded, bool always = false) {
  if (always) return b.getTrue();
  return padded > limit ? b.CreateICmpUGE(v, b.getInt32(uint32_t(limit))) : nullptr;
}

bool is_true(llvm::Value* p) {
  auto* c = llvm::dyn_cast_or_null<llvm::ConstantInt>(p);
  return c && c->isOne();
}

llvm::Value* clamp(Builder& b, llvm::Value* v, llvm::Value* out) {
  return out ? b.CreateSelect(out, b.getInt32(0), v) : v;
}

llvm::Value* either(Builder& b, llvm::Value* x, llvm::Value* y) { return x && y ? b.CreateOr(x, y) : x ? x : y; }

llvm::Value* zero_if(Builder& b, llvm::Value* v, llvm::Value* out) {
  return out ? b.CreateSelect(out, llvm::Constant::getNullValue(v->getType()), v) : v;
}

} // namespace

// One tensor-core dot as its fragment loads and its accumulator code see it.
struct MmaDot {
  int64_t M, N, K;
  int64_t Mp, Np, Kp; // padded to whole tiles: M to 16, N to 8, K to 16
  DType dt;
  // How each operand is staged (emit_dot_mma): k-major, and the row strides in bytes of A, B,
  // the accumulator and the padded result area; where A, B and the accumulator start.
  bool a_kmajor, b_kmajor;
  int64_t sa, sb, sc, scp;
  llvm::Value *base_a, *base_b, *base_c;
  bool direct;   // the result and the accumulator in the MMA accumulator's own layout
  bool zero_acc; // the accumulator is +0: not staged, the fragments start at zero
  int64_t off_z; // 16 zero bytes in shared memory, for the rows past M or N ldmatrix addresses
  // Rows of A between tile rows g and g + 8 of a 16-row MMA tile: 8, or 8 W when the result's
  // layout lays warps along M (mma_layout: warp w's tiles pair rows r and r + 8W).
  int64_t half = 8;
  // Set after the operands are staged:
  bool a_ldm = false, b_ldm = false; // fragments through ldmatrix
  llvm::Value* g = nullptr;          // lane / 4
  llvm::Value* t2 = nullptr;         // 2 (lane % 4)
  llvm::Value* mi = nullptr;         // lane / 8: the matrix whose row this lane addresses for ldmatrix
  llvm::Value* mr = nullptr;         // lane % 8: and the row
  // A's fragments held in registers (set when A is in them already, or was loaded before the
  // loop): [row tile * Kp / 16 + k step], each the 4 registers of mma_frag_a. Null: A is read
  // from shared memory.
  const std::vector<std::array<llvm::Value*, 4>>* a_frags = nullptr;

  // Element (m, k) of A and (k, n) of B in shared memory.
  llvm::Value* a_at(Builder& b, llvm::Value* m, llvm::Value* k) const {
    return a_kmajor ? at(b, base_a, sa, m, bytes(b, k, 2)) : at(b, base_a, sa, k, bytes(b, m, 2));
  }
  llvm::Value* b_at(Builder& b, llvm::Value* k, llvm::Value* n) const {
    return b_kmajor ? at(b, base_b, sb, n, bytes(b, k, 2)) : at(b, base_b, sb, k, bytes(b, n, 2));
  }
};

// dot on the tensor cores, mma.sync.m16n8k16 with f32 accumulators. The operands are staged
// in shared memory, A row-major [M][K] and B column-major [N][K], so each lane's fragment
// registers are 32-bit loads of two consecutive k; the accumulator goes through shared
// memory too, [M][N] f32. Warp w computes the 16x8 output tiles w, w + W, ... of the
// operands padded to whole tiles (M to 16, N to 8, K to 16): it loads its accumulator
// fragments, runs the K loop of MMAs, and writes them back; after a barrier every thread
// reads its elements of the result in the dot's blocked layout. Padding never touches
// memory: a fragment register past M, N or K is zero (its address clamped into the tile, its
// value replaced), and results past M or N are not stored. Rows are padded by 16 bytes (8
// halves, 4 floats) so the eight rows one fragment load touches fall in different banks.
// Fragment ownership (PTX ISA, m16n8k16, g = lane / 4, t = lane % 4):
//   A: reg 0 (g, 2t..2t+1), reg 1 (g+8, 2t..), reg 2 (g, 2t+8..), reg 3 (g+8, 2t+8..)
//   B: reg 0 (k 2t..2t+1, n g), reg 1 (k 2t+8.., n g)
//   C, D: 0, 1 (g, 2t, 2t+1), 2, 3 (g+8, 2t, 2t+1)
void Lowering::emit_dot_mma(const Op& op) {
  if (plan_.is_wgmma(&op)) return emit_dot_wgmma(op);
  const Value* a = op.operands[0];
  const Value* bv = op.operands[1];
  const Value* res = op.results[0];
  std::vector<LayoutId> ls = plan_.op_layouts(&op);
  const int64_t M = a->type.shape[0], K = a->type.shape[1], N = bv->type.shape[1];
  const int64_t Mp = std::max<int64_t>(M, 16), Np = std::max<int64_t>(N, 8), Kp = std::max<int64_t>(K, 16);
  const DType dt = a->type.dtype();
  // Each operand is staged along the dimension its layout holds contiguously in a thread
  // (mma_operand_staging), or is already in shared memory: copied ahead by its loop's
  // pipeline (read from this iteration's buffer), or staged once before the loop
  // (stage_resident). The rest goes to this dot's scratch region.
  const AsyncOperand* async_a = pipes_.async_operand(&op, 0);
  const AsyncOperand* async_b = pipes_.async_operand(&op, 1);
  const MmaStaging st_a = mma_operand_staging(op, 0), st_b = mma_operand_staging(op, 1);
  const bool a_kmajor = st_a.kmajor, b_kmajor = st_b.kmajor;
  const int64_t sa = st_a.row_bytes, sb = st_b.row_bytes, sc = (N + 4) * 4; // row strides
  const bool pipe_a = async_a && async_a->pipeline >= 0, pipe_b = async_b && async_b->pipeline >= 0;
  const auto res_a = resident_.find({&op, 0}), res_b = resident_.find({&op, 1});
  const bool keep_a = res_a != resident_.end(), keep_b = res_b != resident_.end();
  // The plan put the result (and the accumulator) in the MMA accumulator's own layout: the
  // fragments are the elements, so neither goes through shared memory.
  const bool direct = plan_.is_mma(ls[2]);
  // A in an MMA accumulator's own layout, its rows where the result's are (attention's P, the
  // first product's result rounded, as the second product's A): its fragment registers are
  // its elements, paired, and it skips shared memory. A loop-invariant A may have had its
  // fragments loaded before the loop (stage_resident).
  const auto held_a = a_frags_.find(&op);
  const bool a_regs = held_a != a_frags_.end() || (direct && a_in_registers(op, ls[0]));
  const bool stage_a = !pipe_a && !keep_a && !a_regs, stage_b = !pipe_b && !keep_b;
  // A zero accumulator (dot(a, b)) is not staged: the fragments start at zero. The result
  // area has the padded rows and columns too, so every lane stores its fragments without a
  // branch (the padding is never read).
  const bool zero_acc = is_positive_zero(op.operands[2]);
  const int64_t scp = (Np + 4) * 4;
  // Operands whose stored rows hold at least 8 elements (16 bytes) load their fragments with
  // ldmatrix, one instruction for up to four 8x8 matrices (.trans for the operands stored
  // along M or N); the others with 32-bit loads (k-major) or pairs of 16-bit loads.
  const bool a_ldm = a_kmajor ? K >= 8 : M >= 8 && K >= 8;
  const bool b_ldm = b_kmajor ? K >= 8 : N >= 8 && K >= 8;
  // 16 zero bytes: the row a k-major ldmatrix lane addresses for a row of A past M or of B
  // past N, so the padding reads as zeros without a select per register (a direct result's
  // rows of A past M repeat rows mod M instead).
  const bool zero_row = (a_ldm && a_kmajor && M < 8 && !direct) || (b_ldm && b_kmajor && N < 8);
  const int64_t off_a = 0, off_b = stage_a ? st_a.bytes() : 0, off_c = off_b + (stage_b ? st_b.bytes() : 0);
  const int64_t off_z = off_c + (direct ? 0 : (std::max(M * sc, Mp * scp) + 15) / 16 * 16);
  const bool writes = stage_a || stage_b || zero_row || (!zero_acc && !direct);
  const bool uses_scratch = writes || !direct;
  if (uses_scratch) scratch_begin(off_z + (zero_row ? 16 : 0));
  llvm::Value* base_a = pipe_a   ? pipe_read_buffer(*async_a)
                        : keep_a ? smem_at(b_.getInt8Ty(), b_.getInt32(0), res_a->second)
                                 : smem(b_.getInt8Ty(), b_.getInt32(0), off_a);
  llvm::Value* base_b = pipe_b   ? pipe_read_buffer(*async_b)
                        : keep_b ? smem_at(b_.getInt8Ty(), b_.getInt32(0), res_b->second)
                                 : smem(b_.getInt8Ty(), b_.getInt32(0), off_b);
  llvm::Value* base_c = smem(b_.getInt8Ty(), b_.getInt32(0), off_c);
  MmaDot dot{M, N, K, Mp, Np, Kp, dt, a_kmajor, b_kmajor, sa, sb, sc, scp, base_a, base_b, base_c, direct, zero_acc,
             off_z};
  // An operand loaded from global memory for this dot alone goes there directly, as 16-byte
  // cp.async copies.
  if (async_a && !pipe_a) issue_copies(*async_a, base_a, "dot (mma) operand A, asynchronous copy");
  else if (stage_a) stage_mma_operand(op, 0, st_a, base_a);
  if (async_b && !pipe_b) issue_copies(*async_b, base_b, "dot (mma) operand B, asynchronous copy");
  else if (stage_b) stage_mma_operand(op, 1, st_b, base_b);
  if (zero_row) // every thread writes the same zeros: no branch, and no race
    smem_store(llvm::Constant::getNullValue(llvm::FixedVectorType::get(b_.getInt32Ty(), 4)),
               smem(b_.getInt8Ty(), b_.getInt32(0), off_z), "dot (mma) zero row", DType::i32);
  if (!zero_acc && !direct)
    store_runs(get(op.operands[2], ls[2]), ls[2], res->type.shape, 1, 4, DType::f32, [&](size_t j) {
      auto c = coord_of(ls[2], res->type.shape, j);
      return at(b_, base_c, sc, c[0], bytes(b_, c[1], 4));
    }, "dot (mma) accumulator write");
  if ((async_a && !pipe_a) || (async_b && !pipe_b)) { // one group, waited for at once: the copies land before the barrier
    hooks_.cp_async_commit(b_);
    cp_async_wait(0);
  }
  // A late pipeline slot's copies (issued at the end of the previous trip) are the group
  // before this trip's early one.
  for (const AsyncOperand* x : {pipe_a ? async_a : nullptr, pipe_b ? async_b : nullptr})
    if (x && pipes_.pipelines()[size_t(x->pipeline)].late[size_t(x->slot)]) {
      cp_async_wait(1);
      pipe_landed_unfenced_ = true;
    }
  // The fragment reads wait for this dot's writes, and for a pipeline's copies waited for
  // since the last barrier (other threads issued them).
  if (writes || ((pipe_a || pipe_b) && pipe_landed_unfenced_)) barrier();
  const int64_t tiles_n = Np / 8, W = opts_.num_warps;
  dot.g = b_.CreateLShr(lane_, 2);
  dot.t2 = b_.CreateShl(b_.CreateAnd(lane_, 3), 1); // 2t
  dot.a_ldm = a_ldm;
  dot.b_ldm = b_ldm;
  dot.mi = b_.CreateLShr(lane_, 3);
  dot.mr = b_.CreateAnd(lane_, 7);
  if (direct) {
    if (mma_warps_along_m(M, N, int(opts_.num_warps))) dot.half = 8 * opts_.num_warps;
    std::vector<std::array<llvm::Value*, 4>> own;
    if (held_a != a_frags_.end()) dot.a_frags = &held_a->second;
    else if (a_regs) dot.a_frags = &(own = pair_fragments(get(a, ls[0]), ls[0], a->type, 16 * W, 8 * W));
    Elems out = mma_direct(op, dot, ls[2]);
    if (pipe_a || pipe_b) pipe_read_unfenced_ = true; // no barrier of its own follows the reads
    if (uses_scratch) scratch_end();
    define(res, ls[2], std::move(out));
    return;
  }
  // Which tiles a warp computes. With at least as many 8-column tiles as warps, warp w takes
  // columns [w cpw, (w + 1) cpw) of every row tile, two adjacent ones at a time (one B
  // ldmatrix serves both); otherwise W / tiles_n warps share a column and take every
  // (W / tiles_n)-th row tile.
  struct Group {
    llvm::Value *m0, *n0;
    int ntiles;
    llvm::Value* active; // null: every warp has this group
  };
  std::vector<Group> groups;
  const int64_t tiles_m = Mp / 16;
  if (tiles_n >= W) {
    const int64_t cpw = tiles_n / W;
    llvm::Value* nb = b_.CreateMul(warp_, b_.getInt32(uint32_t(cpw * 8)));
    for (int64_t tm = 0; tm < tiles_m; ++tm)
      for (int64_t j = 0; j < cpw; j += 2)
        groups.push_back({b_.getInt32(uint32_t(tm * 16)), b_.CreateAdd(nb, b_.getInt32(uint32_t(j * 8))),
                          int(std::min<int64_t>(2, cpw - j)), nullptr});
  } else {
    const int64_t w2 = W / tiles_n;
    llvm::Value* n0 = b_.CreateMul(b_.CreateURem(warp_, b_.getInt32(uint32_t(tiles_n))), b_.getInt32(8));
    llvm::Value* mb = b_.CreateUDiv(warp_, b_.getInt32(uint32_t(tiles_n)));
    for (int64_t i = 0; i * w2 < tiles_m; ++i) {
      llvm::Value* tm = b_.CreateAdd(mb, b_.getInt32(uint32_t(i * w2)));
      llvm::Value* active = (i + 1) * w2 <= tiles_m ? nullptr : b_.CreateICmpULT(tm, b_.getInt32(uint32_t(tiles_m)));
      groups.push_back({b_.CreateMul(tm, b_.getInt32(16)), n0, 1, active});
    }
  }
  for (const Group& gr : groups) {
    auto body = [&]() -> llvm::Value* {
      mma_tile_group(dot, gr.m0, gr.n0, gr.ntiles);
      return nullptr;
    };
    if (gr.active) guarded(b_, gr.active, body); // warp-uniform
    else body();
  }
  if (pipe_a || pipe_b) pipe_read_unfenced_ = true; // until the barrier: the buffer may not be refilled
  barrier();
  Elems out = load_runs(b_.getFloatTy(), ls[2], res->type.shape, 1, 4, [&](size_t j) {
    auto c = coord_of(ls[2], res->type.shape, j);
    return at(b_, base_c, zero_acc ? scp : sc, c[0], bytes(b_, c[1], 4));
  }, "dot (mma) result read");
  scratch_end();
  define(res, ls[2], std::move(out));
}

bool Lowering::a_in_registers(const Op& op, LayoutId la) {
  const ir::Shape& a = op.operands[0]->type.shape;
  const int64_t M = a[0], K = a[1], N = op.operands[1]->type.shape[1];
  const int W = int(opts_.num_warps);
  return K % 16 == 0 && mma_warps_along_m(M, N, W) && mma_warps_along_m(M, K, W) &&
         plan_.layout(la) == mma_layout(M, K, W);
}

// A [M, K] tile's elements as MMA A fragments (m16k16 per warp, its 16 rows in two halves of
// 8): row tile tm, k step ks takes the elements at offsets (tile_rows tm + half_rows h, 16 ks +
// 8 q + e) from the thread's first, register 2 q + h of the quad holding the pair e = 0, 1 (the
// low half first), rounded as a pair. mma_layout with warps along M: tile_rows 16 W, half_rows
// 8 W; wgmma_layout (a pass of the warpgroups): 16 W and 8.
std::vector<std::array<llvm::Value*, 4>> Lowering::pair_fragments(const Elems& vals, LayoutId l, const ir::Type& t,
                                                                  int64_t tile_rows, int64_t half_rows) {
  const int64_t M = t.shape[0], K = t.shape[1];
  const ThreadElems& te = elems_of(l, t.shape);
  std::map<std::pair<int64_t, int64_t>, size_t> elem; // (row, column) offset -> element
  for (size_t j = 0; j < size_t(te.count); ++j) elem[{te.offset[j][0], te.offset[j][1]}] = j;
  internal_assert(int64_t(elem.size()) == te.count, "the MMA layout's elements map to fragments");
  std::vector<std::array<llvm::Value*, 4>> out;
  for (int64_t tm = 0; tm < M / tile_rows; ++tm)
    for (int64_t ks = 0; ks < K / 16; ++ks) {
      std::array<llvm::Value*, 4> quad;
      for (int r = 0; r < 4; ++r) {
        Elems x(2);
        for (int e = 0; e < 2; ++e)
          x[size_t(e)] = vals.at(elem.at({tile_rows * tm + half_rows * (r % 2), 16 * ks + 8 * (r / 2) + e}));
        quad[size_t(r)] = b_.CreateBitCast(vector_of(x, 0, 2), b_.getInt32Ty()); // rounded as a pair
      }
      out.push_back(quad);
    }
  return out;
}

bool Lowering::a_fragments_fit(const Op& op) {
  if (!mma_eligible(op) || plan_.is_wgmma(&op) || !plan_.is_mma(plan_.op_layouts(&op)[2])) return false;
  const ir::Shape& a = op.operands[0]->type.shape;
  const int64_t M = a[0], K = a[1], N = op.operands[1]->type.shape[1], W = opts_.num_warps;
  return K % 16 == 0 && mma_warps_along_m(M, N, int(W)) && M / (16 * W) * (K / 16) * 4 <= kHeldFragmentRegisters;
}

// Stages A in scratch, and every thread loads its warp's fragments of it by ldmatrix, once.
void Lowering::hold_a_fragments(const Op& op) {
  const Value* a = op.operands[0];
  const int64_t M = a->type.shape[0], K = a->type.shape[1], N = op.operands[1]->type.shape[1];
  const int64_t W = opts_.num_warps;
  const MmaStaging st = mma_operand_staging(op, 0);
  scratch_begin(st.bytes());
  llvm::Value* base = smem(b_.getInt8Ty(), b_.getInt32(0), 0);
  stage_mma_operand(op, 0, st, base);
  barrier();
  MmaDot dot{M, N, K, M, std::max<int64_t>(N, 8), K, a->type.dtype(), st.kmajor, true, st.row_bytes, 0, 0, 0,
             base, nullptr, nullptr, true, true, 0};
  dot.half = 8 * W;
  dot.a_ldm = st.kmajor ? K >= 8 : M >= 8 && K >= 8;
  dot.g = b_.CreateLShr(lane_, 2);
  dot.t2 = b_.CreateShl(b_.CreateAnd(lane_, 3), 1);
  dot.mi = b_.CreateLShr(lane_, 3);
  dot.mr = b_.CreateAnd(lane_, 7);
  llvm::Value* m_base = b_.CreateMul(warp_, b_.getInt32(8));
  std::vector<std::array<llvm::Value*, 4>>& frags = a_frags_[&op];
  for (int64_t tm = 0; tm < M / (16 * W); ++tm)
    for (int64_t ks = 0; ks < K / 16; ++ks)
      frags.push_back(mma_frag_a(dot, b_.CreateAdd(m_base, b_.getInt32(uint32_t(tm * 16 * W))),
                                 b_.getInt32(uint32_t(16 * ks))));
  scratch_end();
}

MmaStaging Lowering::mma_operand_staging(const Op& op, int idx) {
  // An operand the pipeline plan copies by cp.async is staged along its load's contiguous
  // dim; the others along the dim their layout holds contiguously in a thread, so the stores
  // vectorize: A as [M][K] (k-major) or [K][M], B as [N][K] (k-major) or [K][N]. A k-major
  // operand's fragment register is one 32-bit load of two consecutive k; the other kind
  // takes two 16-bit loads.
  if (plan_.is_wgmma(&op)) return wgmma_staging(op, idx, plan_.wgmma_kmajor(&op, idx));
  if (const AsyncOperand* x = pipes_.async_operand(&op, idx)) return mma_staging(op, idx, x->staging.kmajor);
  const Value* v = op.operands[size_t(idx)];
  const LayoutId l = plan_.op_layouts(&op)[size_t(idx)];
  return mma_staging(op, idx, elems_of(l, v->type.shape).run_dim != (idx == 0 ? 0 : 1));
}

// A thread's runs of elements contiguous in shared memory go as one vector store each (the
// row strides and offsets are multiples of 16 bytes, the runs aligned to their size).
void Lowering::stage_mma_operand(const Op& op, int idx, const MmaStaging& st, llvm::Value* base) {
  const Value* v = op.operands[size_t(idx)];
  const LayoutId l = plan_.op_layouts(&op)[size_t(idx)];
  const ir::Shape& sh = v->type.shape;
  // Element (m, k) of A, (k, n) of B: along the stored rows when k-major.
  const int contig_dim = idx == 0 ? (st.kmajor ? 1 : 0) : (st.kmajor ? 0 : 1);
  // A swizzled staging keeps 16-byte chunks whole: runs of at most 16 bytes stay contiguous.
  const int eb = ir::dtype_bytes(v->type.dtype());
  store_runs(get(v, l), l, sh, contig_dim, eb, v->type.dtype(), [&](size_t j) {
    auto c = coord_of(l, sh, j);
    llvm::Value* mn = idx == 0 ? c[0] : c[1];
    llvm::Value* k = idx == 0 ? c[1] : c[0];
    if (st.swizzle)
      return b_.CreateGEP(b_.getInt8Ty(), base, st.kmajor ? staged_byte(st, mn, bytes(b_, k, eb)) : staged_byte(st, k, bytes(b_, mn, eb)));
    return st.kmajor ? at(b_, base, st.row_bytes, mn, bytes(b_, k, 2)) : at(b_, base, st.row_bytes, k, bytes(b_, mn, 2));
  }, idx == 0 ? "dot (mma) operand A write" : "dot (mma) operand B write");
}

llvm::Value* Lowering::staged_byte(const MmaStaging& st, llvm::Value* row, llvm::Value* col_byte) {
  auto c = [&](int64_t v) { return b_.getInt32(uint32_t(v)); };
  if (!st.swizzle)
    return b_.CreateAdd(b_.CreateMul(row, c(st.row_bytes), "", true, true), col_byte, "", true, true);
  const int64_t s = st.swizzle;
  llvm::Value* panel = b_.CreateLShr(col_byte, uint64_t(log2i(s)));
  llvm::Value* logical = b_.CreateAdd(
      b_.CreateAdd(b_.CreateMul(panel, c(st.rows * s), "", true, true), b_.CreateMul(row, c(s), "", true, true), "",
                   true, true),
      b_.CreateAnd(col_byte, c(s - 1)), "", true, true);
  llvm::Value* bits = b_.CreateShl(b_.CreateAnd(b_.CreateLShr(logical, 7), c(s / 16 - 1)), 4);
  return b_.CreateXor(logical, bits);
}

llvm::Value* Lowering::mma_frag_word(const MmaDot& dot, bool kmajor,
                                     const std::function<llvm::Value*(llvm::Value*)>& ptr, llvm::Value* k,
                                     llvm::Value* out, const char* what) {
  if (is_true(out)) return b_.getInt32(0);
  llvm::Value* v;
  if (kmajor) {
    v = smem_load(b_.getInt32Ty(), ptr(k), what);
  } else {
    llvm::Type* h = hooks_.half_type(c_, dot.dt);
    llvm::Value* lo = b_.CreateBitCast(smem_load(h, ptr(k), what), b_.getInt16Ty());
    llvm::Value* hi = b_.CreateBitCast(smem_load(h, ptr(b_.CreateAdd(k, b_.getInt32(1))), what), b_.getInt16Ty());
    v = b_.CreateOr(b_.CreateZExt(lo, b_.getInt32Ty()), b_.CreateShl(b_.CreateZExt(hi, b_.getInt32Ty()), 16));
  }
  return zero_if(b_, v, out);
}

std::vector<llvm::Value*> Lowering::mma_ldmatrix(const MmaDot& dot,
                                                 const std::vector<std::pair<int64_t, int64_t>>& mats, bool kmajor,
                                                 llvm::Value* mn0, llvm::Value* k0, int64_t mn_limit,
                                                 const std::function<llvm::Value*(llvm::Value*, llvm::Value*)>& addr,
                                                 const char* what, int64_t row_bytes, bool wrap_rows) {
  int count = mats.size() == 3 ? 4 : int(mats.size());
  llvm::Value* q = count > 1 ? b_.CreateAnd(dot.mi, uint64_t(count - 1)) : b_.getInt32(0);
  llvm::Value* dmn = b_.getInt32(uint32_t(mats[0].first)), *dk = b_.getInt32(uint32_t(mats[0].second));
  for (size_t i = 1; i < mats.size(); ++i) {
    llvm::Value* is = b_.CreateICmpUGE(q, b_.getInt32(uint32_t(i)));
    dmn = b_.CreateSelect(is, b_.getInt32(uint32_t(mats[i].first)), dmn);
    dk = b_.CreateSelect(is, b_.getInt32(uint32_t(mats[i].second)), dk);
  }
  // A constant k0 (unrolled k steps) and a constant mn0 (a warp's column tiles) go last, as
  // constant offsets from the lane's address at (0, 0), which is then computed once for all.
  int64_t k_const = 0, mn_const = 0;
  if (auto* c = llvm::dyn_cast<llvm::ConstantInt>(k0); c && !(kmajor && mn_limit < 8)) {
    k_const = c->getSExtValue();
    k0 = b_.getInt32(0);
  }
  if (auto* c = llvm::dyn_cast<llvm::ConstantInt>(mn0); c && !(kmajor && mn_limit <= 8)) {
    mn_const = c->getSExtValue();
    mn0 = b_.getInt32(0);
  }
  llvm::Value* p;
  if (kmajor) { // stored rows are m (or n): this lane's row, or the zero row past the tile
    llvm::Value* row = b_.CreateAdd(b_.CreateAdd(mn0, dmn), dot.mr);
    p = addr(row, b_.CreateAdd(k0, dk));
    if (mn_limit <= 8 && wrap_rows) // rows past M repeat rows mod M (the result's replicas)
      p = addr(b_.CreateAnd(row, b_.getInt32(uint32_t(mn_limit - 1))), b_.CreateAdd(k0, dk));
    else if (mn_limit < 8)
      p = b_.CreateSelect(b_.CreateICmpUGE(row, b_.getInt32(uint32_t(mn_limit))),
                          smem(b_.getInt8Ty(), b_.getInt32(0), dot.off_z), p);
  } else { // stored rows are k
    p = addr(b_.CreateAdd(mn0, dmn), b_.CreateAdd(b_.CreateAdd(k0, dk), dot.mr));
  }
  // A stored row is one m (or n) k-major, else one k.
  if (k_const || mn_const)
    p = b_.CreateGEP(b_.getInt8Ty(), p,
                     b_.getInt32(uint32_t(kmajor ? mn_const * row_bytes + k_const * 2 : k_const * row_bytes + mn_const * 2)));
  std::vector<llvm::Value*> regs = hooks_.ldmatrix(b_, p, count, !kmajor, site(what));
  regs.resize(mats.size());
  return regs;
}

std::array<llvm::Value*, 4> Lowering::mma_frag_a(const MmaDot& dot, llvm::Value* m0, llvm::Value* kk) {
  const int64_t M = dot.M, K = dot.K;
  std::array<llvm::Value*, 4> r;
  std::vector<int> need;
  // Rows g + 8 past M (M <= 8) are zeros, except that a direct result's ldmatrix fills them
  // with replicas of rows mod M: one 4-matrix load then gives the MMA its register quad as
  // is, where zeros would be moved into place around a 2-matrix load's registers every step.
  const bool replicate_rows = dot.a_ldm && dot.direct && dot.a_kmajor;
  for (int i = 0; i < 4; ++i) {
    r[size_t(i)] = b_.getInt32(0);
    if (!((i & 1) && M <= 8 && !replicate_rows) && !((i & 2) && K <= 8)) need.push_back(i);
  }
  auto a_at = [&](llvm::Value* m, llvm::Value* k) { return dot.a_at(b_, m, k); };
  if (dot.a_ldm) {
    std::vector<std::pair<int64_t, int64_t>> mats;
    for (int i : need) mats.push_back({(i & 1) * dot.half, (i >> 1) * 8});
    // Rows past M read zeros, or (direct) repeat rows mod M.
    auto v = mma_ldmatrix(dot, mats, dot.a_kmajor, m0, kk, M, a_at, "dot (mma) operand A read",
                          dot.sa, dot.direct);
    for (size_t j = 0; j < need.size(); ++j) r[size_t(need[j])] = v[j];
    return r;
  }
  // Rows g >= M.
  llvm::Value* row_out = M < 8 && !dot.direct ? b_.CreateICmpUGE(dot.g, b_.getInt32(uint32_t(M))) : nullptr;
  for (int i : need) {
    llvm::Value* row = b_.CreateAdd(b_.CreateAdd(m0, dot.g), b_.getInt32(uint32_t((i & 1) * dot.half)));
    if (dot.direct && M < 8) row = b_.CreateAnd(row, b_.getInt32(uint32_t(M - 1))); // replicas of rows mod M
    llvm::Value* k = b_.CreateAdd(b_.CreateAdd(kk, dot.t2), b_.getInt32(uint32_t((i >> 1) * 8)));
    llvm::Value* k_out = K < 16 ? b_.CreateICmpUGE(k, b_.getInt32(uint32_t(K))) : nullptr;
    r[size_t(i)] = mma_frag_word(dot, dot.a_kmajor, [&](llvm::Value* kx) { return a_at(clamp(b_, row, row_out), kx); },
                                 clamp(b_, k, k_out), either(b_, row_out, k_out), "dot (mma) operand A read");
  }
  return r;
}

std::vector<llvm::Value*> Lowering::mma_frag_b(const MmaDot& dot, llvm::Value* n0, llvm::Value* kk, int ntiles,
                                               int64_t tile_stride, int64_t k_stride) {
  const int64_t N = dot.N, K = dot.K;
  std::vector<llvm::Value*> r(size_t(2 * ntiles), b_.getInt32(0));
  std::vector<int> need; // 2 q + h: tile q, k half h
  for (int i = 0; i < 2 * ntiles; ++i)
    if (!((i & 1) && K <= 8)) need.push_back(i);
  auto b_at = [&](llvm::Value* k, llvm::Value* n) { return dot.b_at(b_, k, n); };
  if (dot.b_ldm) {
    std::vector<std::pair<int64_t, int64_t>> mats;
    for (int i : need) mats.push_back({(i >> 1) * tile_stride, (i & 1) * 8 + (i >> 1) * k_stride});
    auto v = mma_ldmatrix(dot, mats, dot.b_kmajor, n0, kk, N,
                          [&](llvm::Value* n, llvm::Value* k) { return b_at(k, n); }, "dot (mma) operand B read",
                          dot.sb);
    for (size_t j = 0; j < need.size(); ++j) r[size_t(need[j])] = v[j]; // columns past N read zeros
    return r;
  }
  llvm::Value* n_out = N < 8 ? b_.CreateICmpUGE(dot.g, b_.getInt32(uint32_t(N))) : nullptr; // columns g >= N
  for (int i : need) {
    llvm::Value* n = b_.CreateAdd(b_.CreateAdd(n0, dot.g), b_.getInt32(uint32_t((i >> 1) * tile_stride)));
    llvm::Value* k = b_.CreateAdd(b_.CreateAdd(kk, dot.t2), b_.getInt32(uint32_t((i & 1) * 8 + (i >> 1) * k_stride)));
    llvm::Value* k_out = K < 16 ? b_.CreateICmpUGE(k, b_.getInt32(uint32_t(K))) : nullptr;
    r[size_t(i)] = mma_frag_word(dot, dot.b_kmajor, [&](llvm::Value* kx) { return b_at(kx, clamp(b_, n, n_out)); },
                                 clamp(b_, k, k_out), either(b_, n_out, k_out), "dot (mma) operand B read");
  }
  return r;
}

Elems Lowering::mma_step(const MmaDot& dot, const std::array<llvm::Value*, 4>& af, const std::vector<llvm::Value*>& bfs,
                         int ntiles, const Elems& acc) {
  Elems next;
  for (int q = 0; q < ntiles; ++q) {
    std::array<llvm::Value*, 4> cin;
    for (int r = 0; r < 4; ++r) cin[size_t(r)] = acc[size_t(4 * q + r)];
    auto dq = hooks_.mma_m16n8k16(b_, dot.dt, af, {bfs[size_t(2 * q)], bfs[size_t(2 * q + 1)]}, cin);
    next.insert(next.end(), dq.begin(), dq.end());
  }
  return next;
}

// Each warp computes exactly the elements mma_layout gives its lanes. Warps along N: warp w
// computes the 8-column tiles w, w + W, ... of every row tile, two at a time (one B ldmatrix
// serves both); a thread's element at offset (8 pm, 8 W pn + e) from its base is row tile
// pm / 2, fragment register 2 (pm % 2) + e of its pn-th column tile (below 16 rows only pm = 0
// exists). Warps along M: warp w computes every column tile of its row tiles, whose rows are
// 8w + 16W tm + (g | g + 8W); its element at offset (8W pm, 8 pn + e) is row tile pm / 2,
// register 2 (pm % 2) + e of column tile pn.
Elems Lowering::mma_direct(const Op& op, const MmaDot& dot, LayoutId l) {
  const Value* res = op.results[0];
  const int64_t tiles_n = dot.Np / 8, W = opts_.num_warps;
  const bool along_m = dot.half != 8;
  const ThreadElems& te = elems_of(l, res->type.shape);
  std::map<std::array<int64_t, 3>, size_t> elem; // (8-row group, column tile, e) -> element
  for (size_t j = 0; j < size_t(te.count); ++j) {
    const int64_t row = te.offset[j][0], col = te.offset[j][1];
    elem[{along_m ? row / (8 * W) : row / 8, along_m ? col / 8 : col / (8 * W), col % 2}] = j;
  }
  internal_assert(int64_t(elem.size()) == te.count, "the MMA layout's elements map to fragments");
  const Elems* acc = dot.zero_acc ? nullptr : &get(op.operands[2], l);
  Elems out(size_t(te.count), nullptr);
  // Row tiles and column tiles per warp, where a warp's first row and column start, and the
  // distance between its consecutive row tiles and column tiles.
  const int64_t row_tiles = along_m ? dot.Mp / (16 * W) : dot.Mp / 16, tpw = along_m ? tiles_n : tiles_n / W;
  const int64_t row_step = along_m ? 16 * W : 16, col_step = along_m ? 8 : 8 * W;
  llvm::Value* w8 = b_.CreateMul(warp_, b_.getInt32(8));
  llvm::Value* m_base = along_m ? w8 : b_.getInt32(0);
  llvm::Value* n_base = along_m ? b_.getInt32(0) : w8;
  for (int64_t tm = 0; tm < row_tiles; ++tm)
    for (int64_t j = 0; j < tpw; j += 2) {
      const int nt = int(std::min<int64_t>(2, tpw - j));
      llvm::Value* m0 = b_.CreateAdd(m_base, b_.getInt32(uint32_t(tm * row_step)));
      llvm::Value* n0 = b_.CreateAdd(n_base, b_.getInt32(uint32_t(j * col_step)));
      auto slot = [&](int q, int r) -> const size_t* {
        auto it = elem.find({tm * 2 + r / 2, j + q, r % 2});
        return it == elem.end() ? nullptr : &it->second;
      };
      Elems c;
      for (int q = 0; q < nt; ++q)
        for (int r = 0; r < 4; ++r) {
          const size_t* s = slot(q, r);
          c.push_back(acc && s ? (*acc)[*s] : llvm::ConstantFP::get(b_.getFloatTy(), 0.0));
        }
      // A single column tile (an 8-column product) takes B for two k steps from one 4-matrix
      // ldmatrix, where each step alone would load two matrices.
      const bool pair_k = nt == 1 && dot.b_ldm && dot.K % 32 == 0;
      Elems d = dot.a_frags ? c : Elems();
      if (dot.a_frags) // A's registers are picked per k step: the steps are unrolled here
        for (int64_t ks = 0; ks < dot.Kp / 16; ++ks)
          d = mma_step(dot, (*dot.a_frags)[size_t(tm * (dot.Kp / 16) + ks)],
                       mma_frag_b(dot, n0, b_.getInt32(uint32_t(16 * ks)), nt, col_step), nt, d);
      else d = k_loop("mma", dot.Kp, pair_k ? 32 : 16, c, [&](llvm::Value* kk, const Elems& cur) {
        if (!pair_k)
          return mma_step(dot, mma_frag_a(dot, m0, kk), mma_frag_b(dot, n0, kk, nt, col_step), nt, cur);
        std::vector<llvm::Value*> bfs = mma_frag_b(dot, n0, kk, 2, 0, 16);
        llvm::Value* kk16 = b_.CreateAdd(kk, b_.getInt32(16));
        Elems mid = mma_step(dot, mma_frag_a(dot, m0, kk), {bfs[0], bfs[1]}, 1, cur);
        return mma_step(dot, mma_frag_a(dot, m0, kk16), {bfs[2], bfs[3]}, 1, mid);
      });
      for (int q = 0; q < nt; ++q)
        for (int r = 0; r < 4; ++r)
          if (const size_t* s = slot(q, r)) out[*s] = d[size_t(4 * q + r)];
    }
  for (llvm::Value* v : out) internal_assert(v != nullptr, "every element of the MMA layout is computed");
  return out;
}

void Lowering::mma_tile_group(const MmaDot& dot, llvm::Value* m0, llvm::Value* n0, int ntiles) {
  const int64_t M = dot.M, N = dot.N, sc = dot.sc;
  llvm::Value* g = dot.g;
  llvm::Value* t2 = dot.t2;
  llvm::Value* base_c = dot.base_c;
  llvm::Value* row0 = b_.CreateAdd(m0, g);
  llvm::Value* row1 = b_.CreateAdd(row0, b_.getInt32(8));
  llvm::Value* out_r0 = past(b_, row0, M, dot.Mp);
  llvm::Value* out_r1 = past(b_, row1, M, dot.Mp, M <= 8);
  llvm::Value* r0 = clamp(b_, row0, out_r0);
  llvm::Value* r1 = clamp(b_, row1, out_r1);
  // Per tile: this lane's accumulator elements, (row0 | row1) x (2t, 2t + 1).
  std::vector<std::array<llvm::Value*, 4>> cptr(static_cast<size_t>(ntiles)), c_out(static_cast<size_t>(ntiles));
  std::vector<llvm::Value*> c;
  for (int q = 0; q < ntiles; ++q) {
    llvm::Value* ccol = b_.CreateAdd(b_.CreateAdd(n0, b_.getInt32(uint32_t(8 * q))), t2);
    llvm::Value* out_c = past(b_, ccol, N, dot.Np);
    llvm::Value* cb = bytes(b_, clamp(b_, ccol, out_c), 4);
    cptr[size_t(q)] = {at(b_, base_c, sc, r0, cb), at(b_, base_c, sc, r0, b_.CreateAdd(cb, b_.getInt32(4))),
                       at(b_, base_c, sc, r1, cb), at(b_, base_c, sc, r1, b_.CreateAdd(cb, b_.getInt32(4)))};
    // Element (row, 2t) is past N exactly when out_c; (row, 2t + 1) too unless N == 1.
    llvm::Value* out_c1 = N == 1 ? b_.getTrue() : out_c;
    c_out[size_t(q)] = {either(b_, out_r0, out_c), either(b_, out_r0, out_c1), either(b_, out_r1, out_c),
                        either(b_, out_r1, out_c1)};
    // A lane's accumulator elements past M or N are zero and never touch memory: clamped
    // to an element another lane writes back after the MMA, a read would race with it.
    for (int r = 0; r < 4; ++r) {
      if (dot.zero_acc || is_true(c_out[size_t(q)][size_t(r)])) {
        c.push_back(llvm::ConstantFP::get(b_.getFloatTy(), 0.0));
        continue;
      }
      llvm::Value* keep = c_out[size_t(q)][size_t(r)] ? b_.CreateNot(c_out[size_t(q)][size_t(r)]) : nullptr;
      c.push_back(guarded(b_, keep, [&]() -> llvm::Value* {
        return smem_load(b_.getFloatTy(), cptr[size_t(q)][size_t(r)], "dot (mma) accumulator read");
      }));
    }
  }
  Elems d = k_loop("mma", dot.Kp, 16, c, [&](llvm::Value* kk, const Elems& acc) {
    std::array<llvm::Value*, 4> af = mma_frag_a(dot, m0, kk);
    std::vector<llvm::Value*> bfs = mma_frag_b(dot, n0, kk, ntiles);
    return mma_step(dot, af, bfs, ntiles, acc);
  });
  for (int q = 0; q < ntiles; ++q) {
    if (dot.zero_acc) { // the padded result area: (row0 | row1) x (2t, 2t + 1), a pair at a time
      llvm::Value* col = bytes(b_, b_.CreateAdd(b_.CreateAdd(n0, b_.getInt32(uint32_t(8 * q))), t2), 4);
      auto* v2 = llvm::FixedVectorType::get(b_.getFloatTy(), 2);
      for (int h = 0; h < 2; ++h) {
        if (h == 1 && M <= 8) continue; // rows g + 8: padding no one reads
        llvm::Value* v = llvm::PoisonValue::get(v2);
        v = b_.CreateInsertElement(v, d[size_t(4 * q + 2 * h)], uint64_t(0));
        v = b_.CreateInsertElement(v, d[size_t(4 * q + 2 * h + 1)], uint64_t(1));
        smem_store(v, at(b_, base_c, dot.scp, h ? row1 : row0, col), "dot (mma) result write", DType::f32);
      }
      continue;
    }
    for (int r = 0; r < 4; ++r) {
      llvm::Value* out = c_out[size_t(q)][size_t(r)];
      if (is_true(out)) continue;
      guarded(b_, out ? b_.CreateNot(out) : nullptr, [&]() -> llvm::Value* {
        smem_store(d[size_t(4 * q + r)], cptr[size_t(q)][size_t(r)], "dot (mma) result write", DType::f32);
        return nullptr;
      });
    }
  }
}

} // namespace tilec::codegen::detail
