#include "templates/prim_recipe.h"

#include <fmt/format.h>

#include <algorithm>

namespace tilec::templates::prim {

using ir::DType;
using ir::Shape;

std::string_view prim_op_name(PrimOp op) {
  static constexpr std::string_view names[] = {
#define TILEC_X(E) #E,
      TILEC_PRIM_OPS(TILEC_X)
#undef TILEC_X
  };
  static_assert(std::size(names) == static_cast<size_t>(PrimOp::Narrow) + 1,
                "one name per primitive op");
  return names[static_cast<size_t>(op)];
}

namespace {

[[noreturn]] void reject(PrimOp op, const std::string& msg) {
  throw UserError(fmt::format("recipe: {}: {}", prim_op_name(op), msg));
}

RecipeNode make_node(PrimOp op, std::vector<int> inputs, Shape shape, DType dtype) {
  RecipeNode n;
  n.op = op;
  n.inputs = std::move(inputs);
  n.shape = std::move(shape);
  n.dtype = dtype;
  return n;
}

Shape common_shape(PrimOp op, const Shape& a, const Shape& b) {
  return broadcast_shapes(a, b, fmt::format("recipe: {}", prim_op_name(op)));
}

} // namespace

int Recipe::push(RecipeNode n) {
  for (int i : n.inputs)
    if (i < 0 || i >= static_cast<int>(nodes.size()))
      reject(n.op, fmt::format("operand %{} is not an earlier node", i));
  nodes.push_back(std::move(n));
  return static_cast<int>(nodes.size()) - 1;
}

int Recipe::input(int bind, std::string name, Shape shape, DType dtype) {
  RecipeNode n = make_node(PrimOp::Input, {}, std::move(shape), dtype);
  n.bind = bind;
  n.name = std::move(name);
  return push(std::move(n));
}

int Recipe::index_select(int x, int index, int64_t axis) {
  const RecipeNode &src = node(x), &idx = node(index);
  if (axis != 0) reject(PrimOp::IndexSelect, fmt::format("only dim 0 is supported, got {}", axis));
  if (src.shape.empty() || idx.shape.size() != 1 || !ir::is_int(idx.dtype) ||
      idx.dtype == DType::i1)
    reject(PrimOp::IndexSelect,
           fmt::format("source {} with index {} of {}", ir::shape_str(src.shape),
                       ir::shape_str(idx.shape), ir::dtype_name(idx.dtype)));
  Shape s = src.shape;
  s[0] = idx.shape[0];
  RecipeNode n = make_node(PrimOp::IndexSelect, {x, index}, s, src.dtype);
  n.axis = axis;
  return push(std::move(n));
}

int Recipe::reshape(int x, Shape shape) {
  if (ir::num_elements(shape) != ir::num_elements(node(x).shape))
    reject(PrimOp::Reshape, fmt::format("{} and {} differ in element count",
                                        ir::shape_str(node(x).shape), ir::shape_str(shape)));
  return push(make_node(PrimOp::Reshape, {x}, std::move(shape), node(x).dtype));
}

int Recipe::permute(int x, std::vector<int64_t> perm) {
  const Shape& from = node(x).shape;
  Shape s;
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i)
    if (sorted[i] != static_cast<int64_t>(i) || perm.size() != from.size())
      reject(PrimOp::Permute, fmt::format("[{}] is not a permutation of the dims of {}",
                                          fmt::join(perm, ", "), ir::shape_str(from)));
  for (int64_t p : perm)
    s.push_back(from[p]);
  RecipeNode n = make_node(PrimOp::Permute, {x}, s, node(x).dtype);
  n.perm = std::move(perm);
  return push(std::move(n));
}

int Recipe::broadcast_to(int x, Shape shape) {
  if (!broadcasts_to(node(x).shape, shape))
    reject(PrimOp::BroadcastTo, fmt::format("cannot broadcast {} to {}",
                                            ir::shape_str(node(x).shape), ir::shape_str(shape)));
  return push(make_node(PrimOp::BroadcastTo, {x}, std::move(shape), node(x).dtype));
}

int Recipe::matmul(int a, int b) {
  const RecipeNode &na = node(a), &nb = node(b);
  size_t ra = na.shape.size(), rb = nb.shape.size();
  if (ra < 2 || rb < 2 || na.shape[ra - 1] != nb.shape[rb - 2] || na.dtype != nb.dtype)
    reject(PrimOp::MatMul,
           fmt::format("{} {} and {} {} are not [..., M, K] and [..., K, N] of one dtype",
                       ir::shape_str(na.shape), ir::dtype_name(na.dtype), ir::shape_str(nb.shape),
                       ir::dtype_name(nb.dtype)));
  Shape s = common_shape(PrimOp::MatMul, Shape(na.shape.begin(), na.shape.end() - 2),
                         Shape(nb.shape.begin(), nb.shape.end() - 2));
  s.push_back(na.shape[ra - 2]);
  s.push_back(nb.shape[rb - 1]);
  return push(make_node(PrimOp::MatMul, {a, b}, s, na.dtype));
}

int Recipe::mul_scalar(int x, double v) {
  RecipeNode n = make_node(PrimOp::MulScalar, {x}, node(x).shape, node(x).dtype);
  n.scalar = v;
  return push(std::move(n));
}

int Recipe::tanh(int x) {
  if (!ir::is_float(node(x).dtype)) reject(PrimOp::Tanh, "needs float data");
  return push(make_node(PrimOp::Tanh, {x}, node(x).shape, node(x).dtype));
}

int Recipe::elementwise(PrimOp op, int a, int b, DType result) {
  if (node(a).dtype != node(b).dtype)
    reject(op, fmt::format("operands of {} and {}", ir::dtype_name(node(a).dtype),
                           ir::dtype_name(node(b).dtype)));
  return push(make_node(op, {a, b}, common_shape(op, node(a).shape, node(b).shape), result));
}

int Recipe::add(int a, int b) {
  return elementwise(PrimOp::Add, a, b, node(a).dtype);
}
int Recipe::sub(int a, int b) {
  return elementwise(PrimOp::Sub, a, b, node(a).dtype);
}
int Recipe::mul(int a, int b) {
  return elementwise(PrimOp::Mul, a, b, node(a).dtype);
}
int Recipe::ge(int a, int b) {
  return elementwise(PrimOp::Ge, a, b, DType::i1);
}

int Recipe::iota(int64_t n, DType dtype) {
  return push(make_node(PrimOp::Iota, {}, {n}, dtype));
}

int Recipe::cast(int x, DType dtype) {
  return push(make_node(PrimOp::Cast, {x}, node(x).shape, dtype));
}

int Recipe::masked_fill(int x, int mask, double value) {
  if (node(mask).dtype != DType::i1 || !broadcasts_to(node(mask).shape, node(x).shape))
    reject(PrimOp::MaskedFill,
           fmt::format("mask {} of {} does not fit {}", ir::shape_str(node(mask).shape),
                       ir::dtype_name(node(mask).dtype), ir::shape_str(node(x).shape)));
  RecipeNode n = make_node(PrimOp::MaskedFill, {x, mask}, node(x).shape, node(x).dtype);
  n.scalar = value;
  return push(std::move(n));
}

int Recipe::softmax_last_dim(int x) {
  if (node(x).shape.empty() || !ir::is_float(node(x).dtype))
    reject(PrimOp::SoftmaxLastDim, "needs a float tensor of rank >= 1");
  return push(make_node(PrimOp::SoftmaxLastDim, {x}, node(x).shape, node(x).dtype));
}

int Recipe::concat(int a, int b, int64_t axis) {
  const RecipeNode &na = node(a), &nb = node(b);
  bool fits = na.shape.size() == nb.shape.size() && axis >= 0 && axis < int64_t(na.shape.size()) && na.dtype == nb.dtype;
  for (size_t d = 0; fits && d < na.shape.size(); ++d) fits = int64_t(d) == axis || na.shape[d] == nb.shape[d];
  if (!fits)
    reject(PrimOp::Concat, fmt::format("{} of {} and {} of {} do not join along dim {}", ir::shape_str(na.shape),
                                       ir::dtype_name(na.dtype), ir::shape_str(nb.shape), ir::dtype_name(nb.dtype), axis));
  Shape s = na.shape;
  s[size_t(axis)] += nb.shape[size_t(axis)];
  RecipeNode n = make_node(PrimOp::Concat, {a, b}, s, na.dtype);
  n.axis = axis;
  return push(std::move(n));
}

int Recipe::narrow(int x, int64_t axis, int64_t start, int64_t length) {
  const Shape& from = node(x).shape;
  if (axis < 0 || axis >= int64_t(from.size()) || start < 0 || length < 0 || start + length > from[size_t(axis)])
    reject(PrimOp::Narrow, fmt::format("elements [{}, {}) of dim {} are not within {}", start, start + length, axis,
                                       ir::shape_str(from)));
  Shape s = from;
  s[size_t(axis)] = length;
  RecipeNode n = make_node(PrimOp::Narrow, {x}, s, node(x).dtype);
  n.axis = axis;
  n.start = start;
  return push(std::move(n));
}

int Recipe::count(PrimOp op) const {
  return static_cast<int>(
      std::count_if(nodes.begin(), nodes.end(), [&](const RecipeNode& n) { return n.op == op; }));
}

std::string Recipe::str() const {
  std::string out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const RecipeNode& n = nodes[i];
    std::vector<std::string> ins;
    for (int k : n.inputs)
      ins.push_back(fmt::format("%{}", k));
    std::string attrs;
    switch (n.op) {
    case PrimOp::Input:
      attrs = fmt::format(" bind={} {}", n.bind, n.name);
      break;
    case PrimOp::IndexSelect:
    case PrimOp::Concat:
      attrs = fmt::format(" dim={}", n.axis);
      break;
    case PrimOp::Narrow:
      attrs = fmt::format(" dim={} start={}", n.axis, n.start);
      break;
    case PrimOp::Permute:
      attrs = fmt::format(" perm=[{}]", fmt::join(n.perm, ", "));
      break;
    case PrimOp::MulScalar:
    case PrimOp::MaskedFill:
      attrs = fmt::format(" scalar={}", n.scalar);
      break;
    default:
      break;
    }
    out += fmt::format("%{} = {}({}){} {} {}{}\n", i, prim_op_name(n.op), fmt::join(ins, ", "),
                       attrs, ir::shape_str(n.shape), ir::dtype_name(n.dtype),
                       i == static_cast<size_t>(output) ? "  <- output" : "");
  }
  return out;
}

Tensor execute(const Recipe& recipe, const std::vector<Tensor>& binds, launch::Launcher& l) {
  const size_t n = recipe.nodes.size();
  if (recipe.output < 0 || recipe.output >= static_cast<int>(n))
    throw UserError("recipe: no output node");
  std::vector<int> uses(n, 0);
  for (const RecipeNode& nd : recipe.nodes)
    for (int i : nd.inputs)
      ++uses[i];
  ++uses[recipe.output];

  std::vector<Tensor> vals(n);
  for (size_t i = 0; i < n; ++i) {
    const RecipeNode& nd = recipe.nodes[i];
    auto arg = [&](size_t k) -> const Tensor& { return vals[nd.inputs[k]]; };
    Tensor t;
    switch (nd.op) {
    case PrimOp::Input:
      if (nd.bind < 0 || nd.bind >= static_cast<int>(binds.size()))
        throw UserError(fmt::format("recipe: input '{}' (bind {}) was not given; {} operands were",
                                    nd.name, nd.bind, binds.size()));
      t = binds[nd.bind];
      if (t.shape != nd.shape || t.dtype() != nd.dtype)
        throw UserError(fmt::format("recipe: input '{}' is {} of {}, the recipe expects {} of {}",
                                    nd.name, ir::shape_str(t.shape), ir::dtype_name(t.dtype()),
                                    ir::shape_str(nd.shape), ir::dtype_name(nd.dtype)));
      break;
    case PrimOp::IndexSelect:
      t = index_select(l, arg(0), arg(1), nd.axis);
      break;
    case PrimOp::Reshape:
      t = reshape(l, arg(0), nd.shape);
      break;
    case PrimOp::Permute:
      t = permute(arg(0), nd.perm);
      break;
    case PrimOp::BroadcastTo:
      t = broadcast_to(arg(0), nd.shape);
      break;
    case PrimOp::MatMul:
      t = matmul(l, arg(0), arg(1));
      break;
    case PrimOp::MulScalar:
      t = mul_scalar(l, arg(0), nd.scalar);
      break;
    case PrimOp::Tanh:
      t = tanh(l, arg(0));
      break;
    case PrimOp::Add:
      t = add(l, arg(0), arg(1));
      break;
    case PrimOp::Sub:
      t = sub(l, arg(0), arg(1));
      break;
    case PrimOp::Mul:
      t = mul(l, arg(0), arg(1));
      break;
    case PrimOp::Iota:
      t = iota(l, nd.dtype, nd.shape);
      break;
    case PrimOp::Cast:
      t = cast(l, arg(0), nd.dtype);
      break;
    case PrimOp::Ge:
      t = ge(l, arg(0), arg(1));
      break;
    case PrimOp::MaskedFill:
      t = masked_fill(l, arg(0), arg(1), nd.scalar);
      break;
    case PrimOp::SoftmaxLastDim:
      t = softmax_last_dim(l, arg(0));
      break;
    case PrimOp::Concat:
      t = concat(l, arg(0), arg(1), nd.axis);
      break;
    case PrimOp::Narrow:
      t = narrow(arg(0), nd.axis, nd.start, nd.shape[size_t(nd.axis)]);
      break;
    }
    if (t.shape != nd.shape || t.dtype() != nd.dtype)
      internal_fail(fmt::format("recipe node %{} ({}) computed {} of {}, its node says {} of {}", i,
                                prim_op_name(nd.op), ir::shape_str(t.shape),
                                ir::dtype_name(t.dtype()), ir::shape_str(nd.shape),
                                ir::dtype_name(nd.dtype)));
    bool fresh =
        nd.op != PrimOp::Input && std::none_of(nd.inputs.begin(), nd.inputs.end(),
                                               [&](int k) { return vals[k].buffer == t.buffer; });
    if (fresh) t.buffer->name = fmt::format("n{}_{}", i, prim_op_name(nd.op));
    vals[i] = std::move(t);
    for (int k : nd.inputs)
      if (--uses[k] == 0) vals[k] = Tensor{};
  }
  return vals[recipe.output];
}

} // namespace tilec::templates::prim
