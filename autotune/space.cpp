#include "autotune/space.h"

#include "abi/toml_reader.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

#include "abi/error.h"

namespace tilec::autotune {

struct Expr {
  enum Kind { number, name, unary, binary, call } kind = number;
  int64_t value = 0;
  std::string ident; // name; the operator of unary and binary; the function of a call (its argument: lhs)
  std::shared_ptr<const Expr> lhs, rhs;
  int column = 0; // within the expression text, 0-based
};

namespace {

// Bounds that keep a hostile expression from exhausting the stack (parsing, evaluating
// and freeing all recurse over the tree); real constraints stay far below them.
constexpr int kMaxExprNesting = 64;
constexpr int kMaxExprTerms = 1000;

// A Pratt parser over the expression grammar documented in configs/paged_attention.toml.
class ExprParser {
public:
  ExprParser(std::string_view text, std::string file, int line, int column)
      : text_(text), file_(std::move(file)), line_(line), column_(column) {}

  std::shared_ptr<const Expr> parse() {
    auto e = binary(0);
    skip_space();
    if (pos_ < text_.size()) fail(pos_, fmt::format("unexpected '{}' after the expression", text_[pos_]));
    return e;
  }

private:
  [[noreturn]] void fail(size_t at, const std::string& msg) const {
    throw UserError(fmt::format("{}:{}:{}: {} in \"{}\"", file_, line_, column_ + int(at), msg, text_));
  }

  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }

  // The binary operator at the cursor and its precedence (higher binds tighter), or 0.
  std::pair<std::string, int> peek_op() {
    skip_space();
    static const std::pair<const char*, int> ops[] = {
        {"||", 1}, {"&&", 2}, {"==", 3}, {"!=", 3}, {"<=", 4}, {">=", 4}, {"<", 4},
        {">", 4},  {"+", 5},  {"-", 5},  {"*", 6},  {"/", 6},  {"%", 6}};
    for (auto [op, prec] : ops)
      if (text_.substr(pos_).starts_with(op)) return {op, prec};
    return {"", 0};
  }

  std::shared_ptr<const Expr> binary(int min_prec) {
    auto lhs = unary();
    for (;;) {
      auto [op, prec] = peek_op();
      if (prec == 0 || prec <= min_prec) return lhs;
      size_t at = pos_;
      pos_ += op.size();
      auto rhs = binary(prec);
      auto e = std::make_shared<Expr>();
      e->kind = Expr::binary;
      e->ident = op;
      e->lhs = lhs;
      e->rhs = rhs;
      e->column = int(at);
      lhs = e;
    }
  }

  std::shared_ptr<const Expr> unary() {
    skip_space();
    if (pos_ >= text_.size()) fail(pos_, "expected a number, a name or '(' but the expression ends");
    char c = text_[pos_];
    size_t at = pos_;
    if (++terms_ > kMaxExprTerms) fail(at, fmt::format("expression has more than {} terms", kMaxExprTerms));
    struct Nest {
      int& depth;
      ~Nest() { --depth; }
    } nest{++depth_};
    if (depth_ > kMaxExprNesting)
      fail(at, fmt::format("expression nests '(', '-' and '!' more than {} deep", kMaxExprNesting));
    if (c == '-' || c == '!') {
      ++pos_;
      auto e = std::make_shared<Expr>();
      e->kind = Expr::unary;
      e->ident = std::string(1, c);
      e->lhs = unary();
      e->column = int(at);
      return e;
    }
    if (c == '(') {
      ++pos_;
      auto e = binary(0);
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != ')') fail(pos_, fmt::format("expected ')' to close the '(' at column {}", column_ + int(at)));
      ++pos_;
      return e;
    }
    auto e = std::make_shared<Expr>();
    e->column = int(at);
    if (std::isdigit(static_cast<unsigned char>(c))) {
      int64_t v = 0;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        if (v > (INT64_MAX - 9) / 10) fail(at, "number too large");
        v = v * 10 + (text_[pos_++] - '0');
      }
      e->kind = Expr::number;
      e->value = v;
      return e;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      while (pos_ < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) ++pos_;
      e->kind = Expr::name;
      e->ident = std::string(text_.substr(at, pos_ - at));
      skip_space();
      if (pos_ < text_.size() && text_[pos_] == '(') {
        if (e->ident != "pow2") fail(at, fmt::format("unknown function '{}' (there is pow2)", e->ident));
        size_t open = pos_++;
        e->kind = Expr::call;
        e->lhs = binary(0);
        skip_space();
        if (pos_ >= text_.size() || text_[pos_] != ')')
          fail(pos_, fmt::format("expected ')' to close the '(' at column {}", column_ + int(open)));
        ++pos_;
      }
      return e;
    }
    fail(at, fmt::format("unexpected '{}'", c));
  }

  std::string_view text_;
  std::string file_;
  int line_, column_;
  size_t pos_ = 0;
  int depth_ = 0; // unary() calls in progress
  int terms_ = 0; // unary() calls so far
};

void collect_names(const Expr& e, std::vector<const Expr*>& out) {
  if (e.kind == Expr::name) out.push_back(&e);
  if (e.lhs) collect_names(*e.lhs, out);
  if (e.rhs) collect_names(*e.rhs, out);
}

std::string where(const std::string& source, const toml::node& n, int extra_column = 0) {
  const auto& b = n.source().begin;
  return fmt::format("{}:{}:{}", source, b.line, b.column + extra_column);
}

[[noreturn]] void fail_at(const std::string& source, const toml::node& n, const std::string& msg) {
  throw UserError(where(source, n) + ": " + msg);
}

[[noreturn]] void fail_key(const std::string& source, const toml::key& k, const std::string& msg) {
  const auto& b = k.source().begin;
  throw UserError(fmt::format("{}:{}:{}: {}", source, b.line, b.column, msg));
}

std::string known_list(const std::vector<std::string>& names) { return fmt::format("{}", fmt::join(names, ", ")); }

} // namespace

std::shared_ptr<const Expr> parse_expr(std::string_view text, const std::string& file, int line, int column) {
  return ExprParser(text, file, line, column).parse();
}

int64_t eval(const Expr& e, const Values& vars, const std::string& what) {
  switch (e.kind) {
  case Expr::number: return e.value;
  case Expr::name: {
    auto it = vars.find(e.ident);
    if (it == vars.end()) throw UserError(fmt::format("{}: '{}' has no value", what, e.ident));
    return it->second;
  }
  case Expr::unary: {
    int64_t v = eval(*e.lhs, vars, what);
    if (e.ident == "!") return v == 0;
    if (v == INT64_MIN)
      throw UserError(fmt::format("{}: -({}) overflows 64-bit integers (at column {} of the expression)", what, v,
                                  e.column + 1));
    return -v;
  }
  case Expr::call: {
    // pow2(x): the smallest power of two >= x (1 for x <= 1), as a kernel pads a size to its tile.
    int64_t v = eval(*e.lhs, vars, what);
    if (v > (int64_t(1) << 62))
      throw UserError(fmt::format("{}: pow2({}) overflows 64-bit integers (at column {} of the expression)", what, v,
                                  e.column + 1));
    int64_t p = 1;
    while (p < v) p *= 2;
    return p;
  }
  case Expr::binary: break;
  }
  const std::string& op = e.ident;
  int64_t a = eval(*e.lhs, vars, what);
  if (op == "&&" && !a) return 0;
  if (op == "||" && a) return 1;
  int64_t b = eval(*e.rhs, vars, what);
  if (op == "&&" || op == "||") return b != 0;
  auto overflow = [&]() -> int64_t {
    throw UserError(fmt::format("{}: {} {} {} overflows 64-bit integers (at column {} of the expression)", what, a,
                                op, b, e.column + 1));
  };
  int64_t r = 0;
  if (op == "+") return __builtin_add_overflow(a, b, &r) ? overflow() : r;
  if (op == "-") return __builtin_sub_overflow(a, b, &r) ? overflow() : r;
  if (op == "*") return __builtin_mul_overflow(a, b, &r) ? overflow() : r;
  if (op == "/" || op == "%") {
    if (b == 0) throw UserError(fmt::format("{}: division by zero (at column {} of the expression)", what, e.column + 1));
    if (a == INT64_MIN && b == -1) return op == "/" ? overflow() : 0;
    return op == "/" ? a / b : a % b;
  }
  if (op == "==") return a == b;
  if (op == "!=") return a != b;
  if (op == "<") return a < b;
  if (op == "<=") return a <= b;
  if (op == ">") return a > b;
  if (op == ">=") return a >= b;
  throw InternalError("unknown operator " + op);
}

size_t SearchSpace::size() const {
  size_t n = 1;
  for (const auto& [name, values] : params) n *= values.size();
  return n;
}

SearchSpace parse_space(std::string_view text, const std::string& source, const SpaceNames& names) {
  toml::table doc = parse_toml<UserError>(text, source);
  SearchSpace s;
  s.source = source;
  auto is_param = [&](const std::string& n) { return std::ranges::find(names.params, n) != names.params.end(); };
  auto is_shape = [&](const std::string& n) { return std::ranges::find(names.shape, n) != names.shape.end(); };

  for (auto&& [key, node] : doc) {
    std::string k(key.str());
    if (k != "kernel" && k != "params" && k != "constraints" && k != "measure")
      fail_key(source, key, fmt::format("unknown key '{}' (expected kernel, [params], [constraints], [measure])", k));
  }

  const toml::node* kernel = doc.get("kernel");
  if (!kernel) throw UserError(fmt::format("{}:1:1: missing key 'kernel' (e.g. kernel = \"{}\")", source, names.kernel));
  if (!kernel->is_string()) fail_at(source, *kernel, "'kernel' must be a string");
  s.kernel = kernel->as_string()->get();
  if (s.kernel != names.kernel)
    fail_at(source, *kernel, fmt::format("this space is for kernel '{}', not '{}'", s.kernel, names.kernel));

  const toml::node* params = doc.get("params");
  if (!params) throw UserError(fmt::format("{}:1:1: missing table [params]", source));
  if (!params->is_table()) fail_at(source, *params, "'params' must be a table of NAME = [values]");
  for (auto&& [key, node] : *params->as_table()) {
    std::string name(key.str());
    if (!is_param(name))
      fail_key(source, key, fmt::format("unknown parameter '{}' of {} (known: {})", name, names.kernel, known_list(names.params)));
    const toml::array* arr = node.as_array();
    if (!arr) fail_at(source, node, fmt::format("params.{} must be an array of integers", name));
    if (arr->empty()) fail_at(source, node, fmt::format("params.{} is empty: give at least one value", name));
    std::vector<int64_t> values;
    for (const toml::node& v : *arr) {
      if (!v.is_integer()) fail_at(source, v, fmt::format("params.{}: values must be integers", name));
      int64_t x = v.as_integer()->get();
      if (std::ranges::find(values, x) != values.end())
        fail_at(source, v, fmt::format("params.{}: value {} is listed twice", name, x));
      values.push_back(x);
    }
    s.params.emplace_back(name, std::move(values));
  }
  std::ranges::sort(s.params, [](const auto& a, const auto& b) {
    return a.first < b.first;
  });
  if (s.params.empty()) fail_at(source, *params, "[params] declares no parameter");

  if (const toml::node* cons = doc.get("constraints")) {
    if (!cons->is_table()) fail_at(source, *cons, "'constraints' must be a table of NAME = \"expression\"");
    for (auto&& [key, node] : *cons->as_table()) {
      std::string name(key.str());
      if (!node.is_string()) fail_at(source, node, fmt::format("constraints.{} must be a string holding an expression", name));
      std::string expr = node.as_string()->get();
      const auto& b = node.source().begin;
      // The expression starts one column after its opening quote.
      Constraint c{name, expr, where(source, node, 1), parse_expr(expr, source, int(b.line), int(b.column) + 1)};
      std::vector<const Expr*> used;
      collect_names(*c.expr, used);
      for (const Expr* n : used) {
        bool declared = std::ranges::any_of(s.params, [&](const auto& p) { return p.first == n->ident; });
        if (declared) continue;
        if (is_param(n->ident))
          throw UserError(fmt::format("{}:{}:{}: constraint '{}' uses parameter '{}', which [params] does not list",
                                      source, b.line, int(b.column) + 1 + n->column, name, n->ident));
        if (!is_shape(n->ident) && std::ranges::find(names.derived, n->ident) == names.derived.end())
          throw UserError(fmt::format("{}:{}:{}: constraint '{}' uses unknown name '{}' (parameters: {}; shape: {}{}{})",
                                      source, b.line, int(b.column) + 1 + n->column, name, n->ident,
                                      known_list(names.params), known_list(names.shape),
                                      names.derived.empty() ? "" : "; derived: ", known_list(names.derived)));
      }
      s.constraints.push_back(std::move(c));
    }
  }

  if (const toml::node* m = doc.get("measure")) {
    if (!m->is_table()) fail_at(source, *m, "'measure' must be a table (warmup, repeats)");
    for (auto&& [key, node] : *m->as_table()) {
      std::string k(key.str());
      if (k != "warmup" && k != "repeats") fail_key(source, key, fmt::format("unknown key 'measure.{}' (expected warmup, repeats)", k));
      if (!node.is_integer()) fail_at(source, node, fmt::format("measure.{} must be an integer", k));
      int64_t v = node.as_integer()->get();
      int64_t lo = k == "repeats" ? 1 : 0;
      if (v < lo || v > 1000) fail_at(source, node, fmt::format("measure.{} is {}, must be in [{}, 1000]", k, v, lo));
      (k == "warmup" ? s.warmup : s.repeats) = int(v);
    }
  }
  return s;
}

SearchSpace load_space(const std::string& path, const SpaceNames& names) {
  std::ifstream f(path);
  if (!f) throw UserError(fmt::format("--space {}: cannot open the file", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return parse_space(ss.str(), path, names);
}

Enumeration enumerate(const SearchSpace& space, const Values& shape, const Derive& derive) {
  Enumeration out;
  std::vector<size_t> idx(space.params.size(), 0);
  for (;;) {
    Values cand;
    for (size_t i = 0; i < idx.size(); ++i) cand[space.params[i].first] = space.params[i].second[idx[i]];
    Values vars = shape;
    for (const auto& [k, v] : cand) vars[k] = v;
    if (derive)
      for (const auto& [k, v] : derive(cand, shape)) vars[k] = v;
    std::string why;
    for (const Constraint& c : space.constraints) {
      if (eval(*c.expr, vars, fmt::format("{}: constraint '{}'", c.where, c.name))) continue;
      why = fmt::format("constraint {} ({}) is false", c.name, c.text);
      break;
    }
    if (why.empty()) out.candidates.push_back(std::move(cand));
    else out.rejected.push_back({std::move(cand), std::move(why)});
    size_t i = idx.size();
    while (i > 0) {
      --i;
      if (++idx[i] < space.params[i].second.size()) break;
      idx[i] = 0;
      if (i == 0) return out;
    }
    if (idx.empty()) return out;
  }
}

std::string format_values(const Values& v) {
  std::string s;
  for (const auto& [k, x] : v) s += fmt::format("{}{}={}", s.empty() ? "" : " ", k, x);
  return s;
}

} // namespace tilec::autotune
