#pragma once
// Small expressions over an op's problem sizes and its config: what a run description
// (runtime/op_run.h) computes grids, workspace sizes, tensor shapes and conditions with.
//
//   cdiv(head_group * sq, block_m)          batch * hq * sq * num_splits * head_dim
//   head_group == 0 ? hq / hkv : head_group kv_dtype == "same" ? dtype : kv_dtype
//
// Values are 64-bit integers or strings (a dtype's name). Operators, loosest first: `c ? a : b`,
// `||`, `&&`, `== != < <= > >=`, `+ -`, `* / %`, unary `- !`; calls `cdiv(a, b)`, `pow2(a)` (the
// least power of two >= a; 1 for a <= 1), `min(a, ...)`,
// `max(a, ...)`, `present(name)` (whether the caller gave the optional tensor or scalar `name`).
// Integers are decimal; strings are double-quoted. `/` and `%` truncate toward zero (C's);
// a division by zero or a result past 64 bits is an error naming the expression, never UB.
// Booleans are the integers 0 and 1. Only `==` and `!=` apply to strings.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "abi/error.h"
#include "abi/manifest.h"

namespace tilec::rt {

// A malformed expression (parse: names the text and the column) or one that cannot be
// evaluated (an unknown name, a division by zero, an overflow, a string where a number goes).
class ExprError : public Error {
public:
  using Error::Error;
};

// The value of a name, or nullopt when there is none. present(x) asks for "present(x)".
using ExprLookup = std::function<std::optional<SpecValue>(std::string_view name)>;

class SizeExpr {
public:
  SizeExpr() = default;
  // Throws ExprError naming `text` and the column of what is wrong.
  static SizeExpr parse(std::string_view text);

  SpecValue eval(const ExprLookup& lookup) const;
  std::int64_t eval_int(const ExprLookup& lookup) const; // ExprError on a string value
  // The expression is one name (`batch`): a tensor dimension a caller's shape can supply.
  std::optional<std::string> as_name() const;
  const std::string& text() const { return text_; }
  bool empty() const { return !node_; }
  // Expressions are equal when their texts are.
  bool operator==(const SizeExpr& o) const { return text_ == o.text_; }

  struct Node;

private:
  std::string text_;
  std::shared_ptr<const Node> node_;
};

// "f32", 5: how a value prints in messages.
std::string format_value(const SpecValue& v);

} // namespace tilec::rt
