#pragma once
// A recipe: a composite op written as DATA over the primitive basis, the way
// the seed's PagedAttn `recipe` is (a list of nodes with op, shape, dtype,
// inputs and baked attributes), and the executor that runs one as a sequence
// of primitive launches on any Launcher.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/types.h"
#include "launch/launcher.h"
#include "templates/attention/paged_attention.h"
#include "templates/primitives.h"

namespace tilec::templates::prim {

// The primitive basis (plus Input, a bound operand). Executing one node is
// one launch, except Input, Permute and BroadcastTo (views) and Reshape when
// its input's strides allow a view.
#define TILEC_PRIM_OPS(X)                                                                          \
  X(Input)                                                                                         \
  X(IndexSelect)                                                                                   \
  X(Reshape)                                                                                       \
  X(Permute)                                                                                       \
  X(BroadcastTo)                                                                                   \
  X(MatMul)                                                                                        \
  X(MulScalar)                                                                                     \
  X(Tanh)                                                                                          \
  X(Add)                                                                                           \
  X(Sub)                                                                                           \
  X(Mul)                                                                                           \
  X(Iota)                                                                                          \
  X(Cast)                                                                                          \
  X(Ge)                                                                                            \
  X(MaskedFill)                                                                                    \
  X(SoftmaxLastDim)                                                                                \
  X(Concat)                                                                                        \
  X(Narrow)

enum class PrimOp : uint8_t {
#define TILEC_X(E) E,
  TILEC_PRIM_OPS(TILEC_X)
#undef TILEC_X
};
std::string_view prim_op_name(PrimOp op);

struct RecipeNode {
  PrimOp op = PrimOp::Input;
  std::vector<int> inputs; // indices of earlier nodes
  ir::Shape shape;         // of the result
  ir::DType dtype = ir::DType::f32;
  // Baked attributes; each op uses the few that apply.
  int bind = -1;             // Input: which bound operand
  std::string name;          // Input: the operand's name
  int64_t axis = 0;          // IndexSelect, Concat, Narrow
  int64_t start = 0;         // Narrow: its first element along `axis` (its length is the shape's)
  std::vector<int64_t> perm; // Permute
  double scalar = 0.0;       // MulScalar factor, MaskedFill value
};

// Nodes in execution order. The builders infer each result's shape and dtype
// and reject operands that do not fit (UserError naming the op and shapes).
class Recipe {
public:
  std::vector<RecipeNode> nodes;
  int output = -1;

  int input(int bind, std::string name, ir::Shape shape, ir::DType dtype);
  int index_select(int x, int index, int64_t axis);
  int reshape(int x, ir::Shape shape);
  int permute(int x, std::vector<int64_t> perm);
  int broadcast_to(int x, ir::Shape shape);
  int matmul(int a, int b);
  int mul_scalar(int x, double s);
  int tanh(int x);
  int add(int a, int b);
  int sub(int a, int b);
  int mul(int a, int b);
  int iota(int64_t n, ir::DType dtype);
  int cast(int x, ir::DType dtype);
  int ge(int a, int b);
  int masked_fill(int x, int mask, double value);
  int softmax_last_dim(int x);
  int concat(int a, int b, int64_t axis);
  int narrow(int x, int64_t axis, int64_t start, int64_t length);

  const RecipeNode& node(int i) const { return nodes.at(i); }
  int count(PrimOp op) const;
  // One line per node: "%7 = MatMul(%3, %6) [2, 8, 1, 16] f32".
  std::string str() const;

private:
  int push(RecipeNode n);
  int elementwise(PrimOp op, int a, int b, ir::DType result);
};

// Runs the nodes in order, `binds[i]` standing for Input i, and returns the
// output. Intermediates are released after their last use.
Tensor execute(const Recipe& recipe, const std::vector<Tensor>& binds, launch::Launcher& launcher);

// The seed's PagedAttn decomposition (gather → dense SDPA → variable-length
// mask) for one problem shape, node for node, with Cast nodes added where
// tilec computes in f32 and the seed keeps q's dtype: after each IndexSelect,
// on q, and back to q's dtype at the end (none of them when q is f32); and the
// gathered K and V slots past each context set to 0 (a Ge and two MaskedFills),
// so NaN or Inf bytes in dead slots never reach the output.
// Binds: 0 q, 1 k_cache, 2 v_cache, 3 block_table, 4 context_lens, 5 alibi_slopes.
Recipe paged_attention_recipe(const PagedAttentionShape& s);

} // namespace tilec::templates::prim
