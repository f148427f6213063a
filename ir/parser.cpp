#include "ir/parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <unordered_map>

#include "ir/builder.h"
#include "ir/printer.h"

namespace tilec::ir {
namespace {

// Bounds that keep hostile input from exhausting the stack or overflowing
// shape arithmetic; real kernels stay far below them.
constexpr int kMaxRegionDepth = 64;
constexpr size_t kMaxRank = 16;
constexpr int64_t kMaxTileElements = int64_t{1} << 32;

enum class Tok { eof, ident, value, symbol, integer, hex, floating, string, arrow, punct, bad };

struct Token {
  Tok kind = Tok::eof;
  size_t pos = 0;        // byte offset of its first character
  std::string_view text; // as written
  std::string str;       // decoded: the name of a %value or @symbol, a string's contents
};

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex_digit(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_ident_char(char c) { return is_ident_start(c) || is_digit(c); }
bool is_all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), is_digit);
}

// A token as an error message shows it: quoted, shortened, control bytes escaped.
std::string describe(const Token& t) {
  if (t.kind == Tok::eof) return "end of input";
  constexpr size_t kMax = 32;
  std::string s = "'";
  for (char c : t.text.substr(0, kMax)) {
    auto u = static_cast<unsigned char>(c);
    s += u < 0x20 || u >= 0x7f ? fmt::format("\\x{:02x}", u) : std::string(1, c);
  }
  return s + (t.text.size() > kMax ? "...'" : "'");
}

class Parser {
public:
  Parser(std::string_view text, std::string_view source) : text_(text), source_(source) {}

  Kernel run() {
    expect_keyword("kernel", "at the start of the input");
    Token name = next();
    if (name.kind != Tok::symbol) fail_expected(name, "'@name' after 'kernel'");
    fn_ = std::make_shared<Function>(name.str);
    builder_.emplace(*fn_);
    expect_punct('(', "'(' after the kernel name");
    if (!accept_punct(')')) {
      for (;;) {
        Token p = expect_value("a parameter name");
        expect_punct(':', "':' after the parameter name");
        Type t = parse_type();
        // A numbered parameter had no usable name; the printer numbers it again.
        Value* param = fn_->add_param(is_all_digits(p.str) ? "" : p.str, std::move(t));
        if (accept_keyword("multiple_of")) param->multiple_of = parse_int("a power of two after 'multiple_of'");
        define(p, param);
        if (accept_punct(',')) continue;
        expect_punct(')', "',' or ')' after a parameter");
        break;
      }
    }
    if (accept_keyword("min_blocks_per_sm")) {
      const Token at = peek();
      const int64_t n = parse_int("a block count after 'min_blocks_per_sm'");
      if (n < 1 || n > 32) fail(at, fmt::format("min_blocks_per_sm {} must be from 1 to 32", n));
      fn_->min_blocks_per_sm = int(n);
    }
    if (accept_keyword("max_registers")) {
      const Token at = peek();
      const int64_t n = parse_int("a register count after 'max_registers'");
      if (std::string why = ir::Function::max_registers_error(n); !why.empty()) fail(at, why);
      fn_->max_registers = int(n);
    }
    parse_region(fn_->body, 0);
    if (peek().kind != Tok::eof) fail_expected(peek(), "end of input after the kernel");
    fn_->renumber();
    return fn_;
  }

private:
  // "source:line:column" of a byte offset; columns count bytes from 1.
  std::string position(size_t pos) const {
    int line = 1;
    size_t line_start = 0;
    for (size_t i = 0; i < pos && i < text_.size(); ++i)
      if (text_[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    return fmt::format("{}:{}:{}", source_, line, pos - line_start + 1);
  }
  [[noreturn]] void fail_at(size_t pos, const std::string& msg) const {
    throw UserError(fmt::format("{}: {}", position(pos), msg));
  }
  [[noreturn]] void fail(const Token& t, const std::string& msg) const { fail_at(t.pos, msg); }
  [[noreturn]] void fail_expected(const Token& t, std::string_view what) const {
    fail(t, fmt::format("expected {}, found {}", what, describe(t)));
  }

  char at(size_t i) const { return i < text_.size() ? text_[i] : '\0'; }

  void skip_trivia() {
    while (pos_ < text_.size()) {
      char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else if (c == '/' && at(pos_ + 1) == '/') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else {
        break;
      }
    }
  }

  // A double-quoted string starting at pos_; returns its decoded contents.
  std::string lex_string() {
    size_t start = pos_++;
    std::string s;
    for (;;) {
      if (pos_ >= text_.size() || text_[pos_] == '\n') fail_at(start, "unterminated string");
      char c = text_[pos_++];
      if (c == '"') return s;
      if (c != '\\') {
        s += c;
        continue;
      }
      char e = at(pos_);
      if (e == '"' || e == '\\') {
        s += e;
        ++pos_;
      } else if (e == 'x' && is_hex_digit(at(pos_ + 1)) && is_hex_digit(at(pos_ + 2))) {
        unsigned v = 0;
        std::from_chars(text_.data() + pos_ + 1, text_.data() + pos_ + 3, v, 16);
        s += static_cast<char>(v);
        pos_ += 3;
      } else {
        fail_at(pos_ - 1, "unknown escape in string (use \\\\, \\\" or \\xHH)");
      }
    }
  }

  Token lex() {
    skip_trivia();
    Token t;
    t.pos = pos_;
    if (pos_ >= text_.size()) return t;
    char c = text_[pos_];
    auto finish = [&](Tok kind) {
      t.kind = kind;
      t.text = text_.substr(t.pos, pos_ - t.pos);
      return t;
    };
    if (is_ident_start(c)) {
      while (is_ident_char(at(pos_))) ++pos_;
      return finish(Tok::ident);
    }
    if (c == '%' || c == '@') {
      ++pos_;
      if (at(pos_) == '"') {
        t.str = lex_string();
      } else {
        size_t start = pos_;
        while (pos_ < text_.size() && is_name_char(text_[pos_])) ++pos_;
        if (pos_ == start) fail_at(t.pos, fmt::format("expected a name after '{}'", c));
        t.str = std::string(text_.substr(start, pos_ - start));
      }
      return finish(c == '%' ? Tok::value : Tok::symbol);
    }
    if (c == '"') {
      t.str = lex_string();
      return finish(Tok::string);
    }
    if (c == '0' && at(pos_ + 1) == 'x' && is_hex_digit(at(pos_ + 2))) {
      pos_ += 2;
      while (is_hex_digit(at(pos_))) ++pos_;
      return finish(Tok::hex);
    }
    if (is_digit(c) || (c == '-' && is_digit(at(pos_ + 1)))) {
      ++pos_;
      while (is_digit(at(pos_))) ++pos_;
      bool is_float = false;
      if (at(pos_) == '.' && is_digit(at(pos_ + 1))) {
        is_float = true;
        for (++pos_; is_digit(at(pos_));) ++pos_;
      }
      if (at(pos_) == 'e' || at(pos_) == 'E') {
        size_t digits = pos_ + 1 + (at(pos_ + 1) == '+' || at(pos_ + 1) == '-');
        if (is_digit(at(digits))) {
          is_float = true;
          for (pos_ = digits; is_digit(at(pos_));) ++pos_;
        }
      }
      return finish(is_float ? Tok::floating : Tok::integer);
    }
    if (c == '-' && at(pos_ + 1) == '>') {
      pos_ += 2;
      return finish(Tok::arrow);
    }
    ++pos_;
    return finish(std::string_view("(){}[]<>,:=-").find(c) != std::string_view::npos ? Tok::punct
                                                                                      : Tok::bad);
  }

  const Token& peek() {
    if (!has_tok_) {
      tok_ = lex();
      has_tok_ = true;
    }
    return tok_;
  }
  Token next() {
    peek();
    has_tok_ = false;
    return std::move(tok_);
  }

  static bool is_punct(const Token& t, char c) {
    return t.kind == Tok::punct && t.text.size() == 1 && t.text[0] == c;
  }
  bool accept_punct(char c) {
    if (!is_punct(peek(), c)) return false;
    next();
    return true;
  }
  Token expect_punct(char c, std::string_view what) {
    Token t = next();
    if (!is_punct(t, c)) fail_expected(t, what);
    return t;
  }
  static bool is_keyword(const Token& t, std::string_view kw) {
    return t.kind == Tok::ident && t.text == kw;
  }
  bool accept_keyword(std::string_view kw) {
    if (!is_keyword(peek(), kw)) return false;
    next();
    return true;
  }
  void expect_keyword(std::string_view kw, std::string_view where) {
    Token t = next();
    if (!is_keyword(t, kw)) fail_expected(t, fmt::format("'{}' {}", kw, where));
  }
  Token expect_value(std::string_view what) {
    Token t = next();
    if (t.kind != Tok::value) fail_expected(t, what);
    return t;
  }

  // True when the tokens ahead read `%a, %b =`: the next op's results, not operands.
  bool at_definition() {
    size_t saved_pos = pos_;
    Token saved_tok = peek();
    bool def = false;
    while (peek().kind == Tok::value) {
      next();
      if (accept_punct('=')) {
        def = true;
        break;
      }
      if (!accept_punct(',')) break;
    }
    pos_ = saved_pos;
    tok_ = std::move(saved_tok);
    has_tok_ = true;
    return def;
  }

  int64_t parse_int(std::string_view what) {
    Token t = next();
    if (t.kind != Tok::integer) fail_expected(t, what);
    return to_int(t);
  }

  int64_t to_int(const Token& t) const {
    int64_t v = 0;
    auto [end, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
    if (ec != std::errc() || end != t.text.data() + t.text.size())
      fail(t, fmt::format("integer {} is out of range", t.text));
    return v;
  }

  int parse_int32(std::string_view what) {
    Token t = peek();
    int64_t v = parse_int(what);
    if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
      fail(t, fmt::format("{} is out of range", t.text));
    return static_cast<int>(v);
  }

  ConstValue parse_const() {
    Token t = next();
    bool negative = is_punct(t, '-');
    if (negative) {
      t = next();
      if (!is_keyword(t, "inf") && !is_keyword(t, "nan")) fail_expected(t, "'inf' or 'nan' after '-'");
    }
    if (t.kind == Tok::integer) {
      return ConstValue::of_int(to_int(t));
    }
    double f = 0;
    if (t.kind == Tok::floating) {
      auto [end, ec] = std::from_chars(t.text.data(), t.text.data() + t.text.size(), f);
      if (ec != std::errc() || end != t.text.data() + t.text.size())
        fail(t, fmt::format("float {} is out of range of f64", t.text));
    } else if (is_keyword(t, "inf")) {
      f = std::numeric_limits<double>::infinity();
    } else if (is_keyword(t, "nan")) {
      f = std::numeric_limits<double>::quiet_NaN();
      if (accept_punct('(')) {
        Token bits = next();
        uint64_t u = 0;
        if (bits.kind != Tok::hex) fail_expected(bits, "the bits of a nan as 0x...");
        auto [end, ec] = std::from_chars(bits.text.data() + 2, bits.text.data() + bits.text.size(), u, 16);
        if (ec != std::errc() || end != bits.text.data() + bits.text.size())
          fail(bits, fmt::format("{} does not fit 64 bits", bits.text));
        f = std::bit_cast<double>(u);
        if (!std::isnan(f)) fail(bits, fmt::format("{} is not the bits of a nan", bits.text));
        expect_punct(')', "')' after the bits of a nan");
      }
    } else {
      fail_expected(t, "a constant (an integer, a float, inf or nan)");
    }
    return ConstValue::of_float(negative ? -f : f);
  }

  DType parse_dtype_token() {
    Token t = next();
    if (t.kind == Tok::ident)
      if (auto d = ir::parse_dtype(t.text)) return *d;
    fail_expected(t, "an element type (i1, i8, i16, i32, i64, f16, bf16, f32, f8e4m3, f8e5m2)");
  }

  ElemType parse_elem(const Token& t) {
    if (is_keyword(t, "ptr")) {
      expect_punct('<', "'<' after 'ptr'");
      DType d = parse_dtype_token();
      expect_punct('>', "'>' after the pointee type");
      return {d, true};
    }
    if (t.kind == Tok::ident)
      if (auto d = ir::parse_dtype(t.text)) return {*d, false};
    fail_expected(t, "a type (f32, ptr<f32>, tile<4x8xf32>, ...)");
  }

  // `f32`, `ptr<f16>`, `tile<4x8xf32>`, `tile<16xptr<i32>>`. Tile dims are read
  // character by character since `4x8xf32` is no run of ordinary tokens.
  Type parse_type() {
    Token t = next();
    if (!is_keyword(t, "tile")) return {parse_elem(t), {}};
    expect_punct('<', "'<' after 'tile'");
    Shape shape;
    int64_t elements = 1;
    for (;;) {
      skip_trivia();
      size_t start = pos_;
      while (is_digit(at(pos_))) ++pos_;
      if (pos_ == start) break;
      int64_t d = 0;
      auto [end, ec] = std::from_chars(text_.data() + start, text_.data() + pos_, d);
      (void)end;
      if (ec != std::errc() || !is_pow2(d))
        fail_at(start, fmt::format("tile dimension {} is not a power of two",
                                   text_.substr(start, pos_ - start)));
      if (shape.size() == kMaxRank) fail_at(start, fmt::format("tile has more than {} dimensions", kMaxRank));
      if (d > kMaxTileElements / elements)
        fail_at(start, fmt::format("tile has more than {} elements", kMaxTileElements));
      elements *= d;
      shape.push_back(d);
      skip_trivia();
      if (at(pos_) != 'x') {
        Token found = peek();
        fail_expected(found, "'x' after a tile dimension");
      }
      ++pos_;
    }
    if (shape.empty()) fail_expected(peek(), "a tile dimension");
    ElemType elem = parse_elem(next());
    expect_punct('>', "'>' to close the tile type");
    return {elem, std::move(shape)};
  }

  // `loc("file":line:col)`, `loc(unknown)` or nothing.
  SourceLoc parse_loc() {
    if (!accept_keyword("loc")) return {};
    expect_punct('(', "'(' after 'loc'");
    if (accept_keyword("unknown")) {
      expect_punct(')', "')' after 'unknown'");
      return {};
    }
    Token file = next();
    if (file.kind != Tok::string) fail_expected(file, "a quoted file name or 'unknown' in loc(...)");
    SourceLoc loc;
    loc.file = std::move(file.str);
    expect_punct(':', "':' after the file name");
    loc.line = parse_int32("a line number");
    if (accept_punct(':')) loc.column = parse_int32("a column number");
    expect_punct(')', "')' to close loc(...)");
    return loc;
  }

  void define(const Token& name, Value* v) {
    auto [it, fresh] = values_.emplace(name.str, v);
    if (!fresh) fail(name, fmt::format("redefinition of {}", name.text));
    id_text_[v->id] = std::string(name.text);
  }

  // A value is visible in its own block and in the regions nested in it.
  bool visible(const Value* v) const {
    const Block* home = v->def ? v->def->parent : v->owner;
    for (const Block* b = builder_->block(); b; b = b->parent ? b->parent->parent : nullptr)
      if (b == home) return true;
    return false;
  }

  Value* parse_operand(std::string_view what) {
    Token t = expect_value(what);
    auto it = values_.find(t.str);
    if (it == values_.end()) fail(t, fmt::format("undefined value {}", t.text));
    if (!visible(it->second))
      fail(t, fmt::format("{} is defined inside a region that does not enclose this use", t.text));
    return it->second;
  }

  std::vector<Value*> parse_operands() {
    std::vector<Value*> ops;
    if (peek().kind != Tok::value || at_definition()) return ops;
    do ops.push_back(parse_operand("an operand after ','"));
    while (accept_punct(','));
    return ops;
  }

  // `-> (t1, t2)`, or nothing for no results.
  std::vector<Type> parse_result_types() {
    std::vector<Type> types;
    if (peek().kind != Tok::arrow) return types;
    next();
    expect_punct('(', "'(' after '->'");
    if (accept_punct(')')) return types;
    do types.push_back(parse_type());
    while (accept_punct(','));
    expect_punct(')', "',' or ')' after a result type");
    return types;
  }

  // Builder messages name values by internal id ("%7 (f32)"); show the
  // names the text used instead, and drop the op-location prefix since the
  // error is placed at the op in the text.
  std::string rewrite(std::string msg) const {
    std::string prefix = builder_->loc.known() ? builder_->loc.str() + ": " : "";
    if (!prefix.empty() && msg.starts_with(prefix)) msg.erase(0, prefix.size());
    std::string out;
    for (size_t i = 0; i < msg.size();) {
      size_t j = i + 1;
      while (msg[i] == '%' && j < msg.size() && is_digit(msg[j])) ++j;
      if (j > i + 1 && msg.compare(j, 2, " (") == 0) {
        int id = -1;
        std::from_chars(msg.data() + i + 1, msg.data() + j, id);
        if (auto n = id_text_.find(id); n != id_text_.end()) {
          out += n->second;
          i = j;
          continue;
        }
      }
      out += msg[i++];
    }
    return out;
  }

  Op* create(const Token& at, OpKind kind, std::vector<Value*> operands, std::vector<Type> types,
             Attrs attrs, int regions, const std::vector<Token>& results) {
    // Result values get the next ids; name them in case the typing rule fails.
    for (size_t i = 0; i < results.size(); ++i)
      id_text_[fn_->num_values() + static_cast<int>(i)] = std::string(results[i].text);
    try {
      return builder_->create(kind, std::move(operands), std::move(types), std::move(attrs), regions);
    } catch (const UserError& e) {
      fail(at, rewrite(e.what()));
    }
  }

  void check(const Token& at, const Op& op) {
    try {
      builder_->check(op);
    } catch (const UserError& e) {
      fail(at, rewrite(e.what()));
    }
  }

  void check_result_count(const Token& at, const std::vector<Token>& results, size_t want) {
    if (results.size() == want) return;
    fail(results.empty() ? at : results[0],
         fmt::format("'{}' has {} result{}, but {} name{} given", at.text, want, want == 1 ? "" : "s",
                     results.size(), results.size() == 1 ? " is" : "s are"));
  }

  void parse_region(Block& block, int depth) {
    if (depth > kMaxRegionDepth)
      fail(peek(), fmt::format("regions are nested more than {} deep", kMaxRegionDepth));
    Token open = expect_punct('{', "'{' to open a region");
    Block* saved = builder_->block();
    builder_->set_block(&block);
    while (!is_punct(peek(), '}')) {
      if (peek().kind == Tok::eof) {
        Token eof = peek();
        fail_at(eof.pos, fmt::format("expected '}}' to close the region opened at {}, found end of input",
                                     position(open.pos)));
      }
      parse_op(depth);
    }
    next();
    builder_->set_block(saved);
  }

  void parse_op(int depth) {
    std::vector<Token> results;
    if (peek().kind == Tok::value) {
      do results.push_back(expect_value("a result name after ','"));
      while (accept_punct(','));
      expect_punct('=', "',' or '=' after a result name");
    }
    Token at = next();
    OpKind kind;
    if (at.kind != Tok::ident) fail_expected(at, results.empty() ? "an op or '}'" : "an op name");
    if (!parse_op_name(at.text, kind)) fail(at, fmt::format("unknown op '{}'", at.text));
    if (kind == OpKind::For) return parse_for(at, results, depth);
    if (kind == OpKind::If) return parse_if(at, results, depth);

    bool has_result =
        kind != OpKind::Store && kind != OpKind::DescStore && kind != OpKind::Yield && kind != OpKind::Return && kind != OpKind::Assert &&
        kind != OpKind::Print;
    check_result_count(at, results, has_result ? 1 : 0);
    Attrs attrs;
    std::vector<Value*> operands;
    std::string_view after = "',' or ':' after an operand";
    std::vector<Token> combine_args; // reduce/scan combine (%a, %b)
    switch (kind) {
    case OpKind::ProgramId:
    case OpKind::NumPrograms:
      attrs.axis = parse_int("an axis (0, 1 or 2)");
      after = "':' after the axis";
      break;
    case OpKind::Arange:
      attrs.start = parse_int("the start of the range");
      after = "':' after the start";
      break;
    case OpKind::Constant:
      attrs.value = parse_const();
      after = "':' after the constant";
      break;
    case OpKind::ExpandDims:
      operands = parse_operands();
      expect_keyword("axis", "after the operand");
      attrs.axis = parse_int("an axis");
      after = "':' after the axis";
      break;
    case OpKind::Assert:
    case OpKind::Print: {
      operands = parse_operands();
      Token m = next();
      if (m.kind != Tok::string)
        fail_expected(m, kind == OpKind::Assert ? "a quoted message after the condition" : "a quoted prefix after the value");
      attrs.message = std::move(m.str);
      break;
    }
    case OpKind::Reduce:
    case OpKind::Scan: {
      Token k = next();
      if (k.kind != Tok::ident || !parse_reduce_kind(k.text, attrs.reduce))
        fail_expected(k, "a reduction (sum, max, min, prod or combine)");
      operands = parse_operands();
      expect_keyword("axis", "after the operand");
      attrs.axis = parse_int("an axis");
      after = "':' after the axis";
      if (attrs.reduce == ReduceKind::combine) {
        expect_punct('(', "'(' and the combine function's two argument names after the axis");
        combine_args.push_back(expect_value("the combine function's first argument name"));
        expect_punct(',', "',' between the combine function's argument names");
        combine_args.push_back(expect_value("the combine function's second argument name"));
        expect_punct(')', "')' after the combine function's argument names");
        after = "':' after the combine function's arguments";
      }
      break;
    }
    case OpKind::Permute:
      operands = parse_operands();
      expect_punct('[', "'[' and a permutation after the operand");
      if (!accept_punct(']')) {
        do attrs.perm.push_back(parse_int("a dimension"));
        while (accept_punct(','));
        expect_punct(']', "',' or ']' in the permutation");
      }
      after = "':' after the permutation";
      break;
    case OpKind::DescLoad: // %r = desc_load %base, ... boxes 4 : type (a gather of 4 boxes)
      operands = parse_operands();
      if (accept_keyword("boxes")) {
        attrs.boxes = parse_int("a box count after 'boxes'");
        after = "':' after the box count";
      }
      break;
    case OpKind::Return: break; // takes no operands; see the typing rule
    default: operands = parse_operands(); break;
    }
    if (operands.empty() && after.starts_with("','")) after = "an operand or ':'";
    std::vector<Type> types;
    if (has_result) {
      expect_punct(':', after);
      types.push_back(parse_type());
    }
    if (!combine_args.empty()) {
      // %r = reduce combine %x axis 1 (%a, %b) : type { ... yield %c } loc(...)
      if (operands.size() != 1) fail(at, fmt::format("'{}' takes one operand", at.text));
      builder_->loc = {};
      Op* op = create(at, kind, std::move(operands), std::move(types), std::move(attrs), 1, results);
      Block& body = op->region(0);
      for (const Token& a : combine_args) {
        body.args.push_back(fn_->new_value(scalar_type(op->operands[0]->type.dtype()), nullptr, &body));
        define(a, body.args.back());
      }
      parse_region(body, depth + 1);
      return finish_region_op(at, *op, results);
    }
    builder_->loc = parse_loc();
    Op* op = create(at, kind, std::move(operands), std::move(types), std::move(attrs), 0, results);
    for (size_t i = 0; i < results.size(); ++i) define(results[i], op->results[i]);
  }

  // for %iv = %lb to %ub step %s iter_args(%a = %init, ...) -> (types) { ... } loc(...)
  void parse_for(const Token& at, const std::vector<Token>& results, int depth) {
    Token iv = expect_value("the induction variable after 'for'");
    expect_punct('=', "'=' after the induction variable");
    std::vector<Value*> operands{parse_operand("the lower bound")};
    expect_keyword("to", "after the lower bound");
    operands.push_back(parse_operand("the upper bound"));
    expect_keyword("step", "after the upper bound");
    operands.push_back(parse_operand("the step"));
    Attrs attrs;
    if (accept_keyword("stages")) attrs.num_stages = parse_int("a stage count after 'stages'");
    if (accept_keyword("warp_specialize")) attrs.warp_specialize = true;
    std::vector<Token> carried;
    if (accept_keyword("iter_args")) {
      expect_punct('(', "'(' after 'iter_args'");
      if (!accept_punct(')')) {
        do {
          carried.push_back(expect_value("a loop-carried value name"));
          expect_punct('=', "'=' after a loop-carried value name");
          operands.push_back(parse_operand("an initial value"));
        } while (accept_punct(','));
        expect_punct(')', "',' or ')' after an initial value");
      }
    }
    std::vector<Type> types = parse_result_types();
    check_result_count(at, results, types.size());
    builder_->loc = {};
    Op* op = create(at, OpKind::For, operands, std::move(types), std::move(attrs), 1, results);
    Block& body = op->region(0);
    body.args.push_back(fn_->new_value(operands[0]->type, nullptr, &body));
    define(iv, body.args.back());
    for (size_t i = 0; i < carried.size(); ++i) {
      body.args.push_back(fn_->new_value(operands[3 + i]->type, nullptr, &body));
      define(carried[i], body.args.back());
    }
    parse_region(body, depth + 1);
    finish_region_op(at, *op, results);
  }

  // if %c -> (types) { ... } else { ... } loc(...)
  void parse_if(const Token& at, const std::vector<Token>& results, int depth) {
    Value* cond = parse_operand("a condition after 'if'");
    std::vector<Type> types = parse_result_types();
    check_result_count(at, results, types.size());
    builder_->loc = {};
    Op* op = create(at, OpKind::If, {cond}, std::move(types), {}, 2, results);
    parse_region(op->region(0), depth + 1);
    expect_keyword("else", "after the then region");
    parse_region(op->region(1), depth + 1);
    finish_region_op(at, *op, results);
  }

  void finish_region_op(const Token& at, Op& op, const std::vector<Token>& results) {
    op.loc = builder_->loc = parse_loc();
    for (size_t i = 0; i < results.size(); ++i) define(results[i], op.results[i]);
    check(at, op);
  }

  std::string_view text_;
  std::string_view source_;
  size_t pos_ = 0;
  Token tok_;
  bool has_tok_ = false;

  Kernel fn_;
  std::optional<Builder> builder_;
  std::unordered_map<std::string, Value*> values_;
  std::unordered_map<int, std::string> id_text_;
};

} // namespace

Kernel parse(std::string_view text, std::string_view source_name) {
  return Parser(text, source_name).run();
}

} // namespace tilec::ir
