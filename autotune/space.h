#pragma once
// Autotuning search spaces (configs/<kernel>.toml): the candidate values of each
// tunable parameter and the constraints a candidate must satisfy, written as small
// integer expressions over the parameters and the problem shape. The file format is
// documented in configs/paged_attention.toml.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tilec::autotune {

using Values = std::map<std::string, int64_t>;

// A parsed constraint expression (integers; comparisons and logic give 0 or 1).
struct Expr;

struct Constraint {
  std::string name;  // its key in [constraints]
  std::string text;  // the expression as written
  std::string where; // file:line:column of the expression
  std::shared_ptr<const Expr> expr;
};

struct SearchSpace {
  std::string source; // file name, for messages
  std::string kernel;
  std::vector<std::pair<std::string, std::vector<int64_t>>> params; // by name
  std::vector<Constraint> constraints;
  int warmup = 2;  // untimed runs before timing (after the correctness check)
  int repeats = 5; // timed runs per candidate

  size_t size() const; // candidates before constraints
};

// What parse_space may refer to: the kernel's tunable parameters and its shape names.
struct SpaceNames {
  std::string kernel;
  std::vector<std::string> params;
  std::vector<std::string> shape;
  std::vector<std::string> derived; // values the kernel derives per candidate (Derive)
};

// The values a kernel derives from one candidate (the space's parameters) and the problem
// shape, for constraints to use (paged attention's tile_m: the query rows a program holds).
using Derive = std::function<Values(const Values& candidate, const Values& shape)>;

// Parses a search space. A malformed or inconsistent file (bad TOML, unknown key or
// name, empty or repeated values, a syntax error in a constraint) is a UserError
// "file:line:column: what is wrong".
SearchSpace parse_space(std::string_view text, const std::string& source, const SpaceNames& names);
SearchSpace load_space(const std::string& path, const SpaceNames& names);

// Parses one constraint expression; errors name `where` and the column within `text`.
std::shared_ptr<const Expr> parse_expr(std::string_view text, const std::string& file, int line, int column);
// Evaluates an expression; `vars` must hold every name it uses. Division by zero is
// a UserError naming `what`.
int64_t eval(const Expr& e, const Values& vars, const std::string& what);

struct Rejection {
  Values params;
  std::string reason;
};

struct Enumeration {
  std::vector<Values> candidates; // the cross product (by parameter name), constraints satisfied
  std::vector<Rejection> rejected;
};

// The candidates of `space` for one problem `shape`; `derive`, when given, adds its values to
// what each candidate's constraints see.
Enumeration enumerate(const SearchSpace& space, const Values& shape, const Derive& derive = {});

// "block_n=32 head_group=4" (map order).
std::string format_values(const Values& v);

} // namespace tilec::autotune
