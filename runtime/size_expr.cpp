#include "runtime/size_expr.h"

#include <fmt/format.h>

#include <cctype>
#include <vector>

namespace tilec::rt {

struct SizeExpr::Node {
  enum class Kind { integer, string, name, unary, binary, select, call } kind;
  std::int64_t i = 0;
  std::string text; // a string literal, a name, an operator or a function
  std::vector<std::shared_ptr<const Node>> kids;
};

namespace {

using NodePtr = std::shared_ptr<const SizeExpr::Node>;
using Kind = SizeExpr::Node::Kind;

class Parser {
public:
  explicit Parser(std::string_view text) : s_(text) {}

  NodePtr parse() {
    NodePtr n = select();
    skip();
    if (pos_ != s_.size()) fail(fmt::format("unexpected '{}'", s_.substr(pos_, 1)));
    return n;
  }

private:
  [[noreturn]] void fail(const std::string& what) const {
    throw ExprError(fmt::format("expression '{}', column {}: {}", s_, pos_ + 1, what));
  }
  void skip() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool eat(std::string_view op) {
    skip();
    if (s_.substr(pos_, op.size()) != op) return false;
    // "<" must not take the first character of "<=", nor "!" that of "!=", nor "=" alone.
    if (op.size() == 1 && pos_ + 1 < s_.size() && s_[pos_ + 1] == '=' && std::string_view("<>!=").find(op[0]) != std::string_view::npos)
      return false;
    pos_ += op.size();
    return true;
  }
  static NodePtr make(Kind k, std::string text, std::vector<NodePtr> kids) {
    auto n = std::make_shared<SizeExpr::Node>();
    n->kind = k;
    n->text = std::move(text);
    n->kids = std::move(kids);
    return n;
  }

  NodePtr select() {
    NodePtr c = binary(0);
    if (!eat("?")) return c;
    NodePtr a = select();
    if (!eat(":")) fail("expected ':' of 'c ? a : b'");
    NodePtr b = select();
    return make(Kind::select, "?", {c, a, b});
  }

  // Binary levels, loosest first.
  NodePtr binary(int level) {
    static const std::vector<std::vector<std::string_view>> levels = {
        {"||"}, {"&&"}, {"==", "!=", "<=", ">=", "<", ">"}, {"+", "-"}, {"*", "/", "%"}};
    if (level == int(levels.size())) return unary();
    NodePtr lhs = binary(level + 1);
    for (;;) {
      std::string_view op;
      for (std::string_view o : levels[size_t(level)])
        if (eat(o)) {
          op = o;
          break;
        }
      if (op.empty()) return lhs;
      NodePtr rhs = binary(level + 1);
      lhs = make(Kind::binary, std::string(op), {lhs, rhs});
    }
  }

  NodePtr unary() {
    if (eat("-")) return make(Kind::unary, "-", {unary()});
    if (eat("!")) return make(Kind::unary, "!", {unary()});
    return primary();
  }

  NodePtr primary() {
    skip();
    if (pos_ >= s_.size()) fail("expected a value, found the end");
    char c = s_[pos_];
    if (eat("(")) {
      NodePtr n = select();
      if (!eat(")")) fail("expected ')'");
      return n;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      std::int64_t v = 0;
      while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, s_[pos_] - '0', &v))
          fail("integer past 64 bits");
        ++pos_;
      }
      auto n = make(Kind::integer, "", {});
      const_cast<SizeExpr::Node&>(*n).i = v;
      return n;
    }
    if (c == '"') {
      size_t end = s_.find('"', pos_ + 1);
      if (end == std::string_view::npos) fail("unterminated string");
      std::string text(s_.substr(pos_ + 1, end - pos_ - 1));
      pos_ = end + 1;
      return make(Kind::string, text, {});
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t start = pos_;
      while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_')) ++pos_;
      std::string name(s_.substr(start, pos_ - start));
      if (!eat("(")) return make(Kind::name, name, {});
      std::vector<NodePtr> args;
      if (!eat(")")) {
        do args.push_back(select());
        while (eat(","));
        if (!eat(")")) fail(fmt::format("expected ')' closing {}(", name));
      }
      if (name == "cdiv" && args.size() != 2) fail("cdiv takes two arguments");
      if (name == "pow2" && args.size() != 1) fail("pow2 takes one argument");
      if ((name == "min" || name == "max") && args.empty()) fail(name + " takes at least one argument");
      if (name == "present" && (args.size() != 1 || args[0]->kind != Kind::name))
        fail("present takes one name: present(alibi_slopes)");
      if (name != "cdiv" && name != "pow2" && name != "min" && name != "max" && name != "present")
        fail(fmt::format("no function '{}' (cdiv, pow2, min, max, present)", name));
      return make(Kind::call, name, std::move(args));
    }
    fail(fmt::format("unexpected '{}'", c));
  }

  std::string_view s_;
  size_t pos_ = 0;
};

class Evaluator {
public:
  Evaluator(const std::string& text, const ExprLookup& lookup) : text_(text), lookup_(lookup) {}

  SpecValue eval(const SizeExpr::Node& n) const {
    switch (n.kind) {
    case Kind::integer: return n.i;
    case Kind::string: return n.text;
    case Kind::name: {
      std::optional<SpecValue> v = lookup_(n.text);
      if (!v) fail(fmt::format("no value named '{}'", n.text));
      return *v;
    }
    case Kind::unary: {
      std::int64_t v = integer(*n.kids[0], n.text);
      if (n.text == "!") return std::int64_t(v == 0);
      if (v == INT64_MIN) fail("negation past 64 bits");
      return -v;
    }
    case Kind::select: return integer(*n.kids[0], "?") != 0 ? eval(*n.kids[1]) : eval(*n.kids[2]);
    case Kind::call: return call(n);
    case Kind::binary: return binary(n);
    }
    fail("unknown node");
  }

private:
  [[noreturn]] void fail(const std::string& what) const {
    throw ExprError(fmt::format("expression '{}': {}", text_, what));
  }

  std::int64_t integer(const SizeExpr::Node& n, std::string_view op) const {
    SpecValue v = eval(n);
    if (auto* i = std::get_if<std::int64_t>(&v)) return *i;
    fail(fmt::format("'{}' takes integers, got the string \"{}\"", op, std::get<std::string>(v)));
  }

  SpecValue call(const SizeExpr::Node& n) const {
    if (n.text == "present") return lookup_("present(" + n.kids[0]->text + ")").value_or(std::int64_t(0));
    if (n.text == "cdiv") {
      std::int64_t a = integer(*n.kids[0], "cdiv"), b = integer(*n.kids[1], "cdiv");
      if (b <= 0) fail(fmt::format("cdiv({}, {}): the divisor must be positive", a, b));
      if (a < 0) fail(fmt::format("cdiv({}, {}): the dividend must not be negative", a, b));
      return a / b + (a % b != 0);
    }
    if (n.text == "pow2") {
      std::int64_t a = integer(*n.kids[0], "pow2");
      if (a > (std::int64_t(1) << 62)) fail(fmt::format("pow2({}): past 64 bits", a));
      std::int64_t p = 1;
      while (p < a) p *= 2;
      return p;
    }
    std::int64_t best = integer(*n.kids[0], n.text);
    for (size_t k = 1; k < n.kids.size(); ++k) {
      std::int64_t v = integer(*n.kids[k], n.text);
      best = n.text == "min" ? std::min(best, v) : std::max(best, v);
    }
    return best;
  }

  SpecValue binary(const SizeExpr::Node& n) const {
    const std::string& op = n.text;
    if (op == "||" || op == "&&") {
      bool a = integer(*n.kids[0], op) != 0;
      if (op == "||" ? a : !a) return std::int64_t(a);
      return std::int64_t(integer(*n.kids[1], op) != 0);
    }
    SpecValue av = eval(*n.kids[0]), bv = eval(*n.kids[1]);
    if (op == "==" || op == "!=") {
      if (av.index() != bv.index())
        fail(fmt::format("'{}' compares {} with {}: a string and a number", op, format_value(av), format_value(bv)));
      return std::int64_t((av == bv) == (op == "=="));
    }
    auto* ap = std::get_if<std::int64_t>(&av);
    auto* bp = std::get_if<std::int64_t>(&bv);
    if (!ap || !bp) fail(fmt::format("'{}' takes integers, got {} and {}", op, format_value(av), format_value(bv)));
    std::int64_t a = *ap, b = *bp, r = 0;
    if (op == "<") return std::int64_t(a < b);
    if (op == "<=") return std::int64_t(a <= b);
    if (op == ">") return std::int64_t(a > b);
    if (op == ">=") return std::int64_t(a >= b);
    bool overflow = false;
    if (op == "+") overflow = __builtin_add_overflow(a, b, &r);
    else if (op == "-") overflow = __builtin_sub_overflow(a, b, &r);
    else if (op == "*") overflow = __builtin_mul_overflow(a, b, &r);
    else {
      if (b == 0) fail(fmt::format("{} {} 0: division by zero", a, op));
      if (a == INT64_MIN && b == -1) fail("division past 64 bits");
      r = op == "/" ? a / b : a % b;
    }
    if (overflow) fail(fmt::format("{} {} {} is past 64 bits", a, op, b));
    return r;
  }

  const std::string& text_;
  const ExprLookup& lookup_;
};

} // namespace

SizeExpr SizeExpr::parse(std::string_view text) {
  SizeExpr e;
  e.text_ = std::string(text);
  e.node_ = Parser(e.text_).parse();
  return e;
}

SpecValue SizeExpr::eval(const ExprLookup& lookup) const {
  if (!node_) throw ExprError("an empty expression has no value");
  return Evaluator(text_, lookup).eval(*node_);
}

std::int64_t SizeExpr::eval_int(const ExprLookup& lookup) const {
  SpecValue v = eval(lookup);
  if (auto* i = std::get_if<std::int64_t>(&v)) return *i;
  throw ExprError(fmt::format("expression '{}' is the string \"{}\", not an integer", text_, std::get<std::string>(v)));
}

std::optional<std::string> SizeExpr::as_name() const {
  if (node_ && node_->kind == Node::Kind::name) return node_->text;
  return std::nullopt;
}

std::string format_value(const SpecValue& v) {
  if (auto* i = std::get_if<std::int64_t>(&v)) return std::to_string(*i);
  return "\"" + std::get<std::string>(v) + "\"";
}

} // namespace tilec::rt
