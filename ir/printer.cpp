#include "ir/printer.h"
#include "abi/hash.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <regex>
#include <set>
#include <unordered_map>

namespace tilec::ir {

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7f) {
      out += fmt::format("\\x{:02x}", u);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

namespace {

bool is_bare_name(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), is_name_char);
}

bool is_all_digits(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Floats always show a '.', an exponent, inf or nan, so they never read back
// as integers; fmt's shortest form reads back as the identical double.
std::string format_float(double f) {
  if (std::isnan(f)) {
    auto bits = std::bit_cast<uint64_t>(f);
    if (bits == std::bit_cast<uint64_t>(std::numeric_limits<double>::quiet_NaN())) return "nan";
    return fmt::format("nan(0x{:016x})", bits);
  }
  std::string s = fmt::format("{}", f);
  if (s.find_first_of(".ein") == std::string::npos) s += ".0";
  return s;
}

std::string format_const(const ConstValue& v) {
  return v.is_float ? format_float(v.f) : fmt::format("{}", v.i);
}

std::string format_loc(const SourceLoc& loc) {
  if (!loc.known()) return "";
  return fmt::format(" loc({}:{}:{})", quote(loc.file), loc.line, loc.column);
}

class Printer {
public:
  Printer(const Function& fn, const PrintHooks& hooks) : fn_(fn), hooks_(hooks) {
    number_values();
    ref_ = [this](const Value* v) { return ref(v); };
  }

  std::string run() {
    std::string name = is_bare_name(fn_.name) ? fn_.name : quote(fn_.name);
    out_ = fmt::format("kernel @{}(", name);
    for (size_t i = 0; i < fn_.params.size(); ++i) {
      if (i) out_ += ", ";
      out_ += fmt::format("{}: {}", ref(fn_.params[i]), type_str(fn_.params[i]));
      if (fn_.params[i]->multiple_of) out_ += fmt::format(" multiple_of {}", fn_.params[i]->multiple_of);
    }
    out_ += ")";
    if (fn_.min_blocks_per_sm) out_ += fmt::format(" min_blocks_per_sm {}", fn_.min_blocks_per_sm);
    if (fn_.max_registers) out_ += fmt::format(" max_registers {}", fn_.max_registers);
    out_ += " {\n";
    print_ops(fn_.body, 1);
    out_ += "}\n";
    return std::move(out_);
  }

private:
  // The same order as Function::renumber: params, then each op's results
  // before its regions' arguments, in pre-order.
  void number_values() {
    int next = 0;
    std::set<std::string> seen;
    for (const Value* p : fn_.params) {
      int id = next++;
      ids_[p] = id;
      if (!p->name.empty() && !is_all_digits(p->name) && seen.insert(p->name).second)
        names_[p] = is_bare_name(p->name) ? p->name : quote(p->name);
    }
    number_block(fn_.body, next);
  }

  void number_block(const Block& b, int& next) {
    for (const auto& op : b.ops) {
      for (const Value* r : op->results) ids_.emplace(r, next++);
      for (const auto& region : op->regions) {
        for (const Value* a : region->args) ids_.emplace(a, next++);
        number_block(*region, next);
      }
    }
  }

  // Broken IR (a dangling or null operand) still prints, marked, so that a
  // pass's output can be inspected; the parser rejects it.
  std::string ref(const Value* v) const {
    if (!v) return "%<<null>>";
    if (auto n = names_.find(v); n != names_.end()) return "%" + n->second;
    if (auto i = ids_.find(v); i != ids_.end()) return fmt::format("%{}", i->second);
    return fmt::format("%<<undefined:{}>>", v->id);
  }

  static std::string type_str(const Value* v) { return v ? v->type.str() : "<<null>>"; }

  std::string refs(const std::vector<Value*>& vs, size_t from = 0) const {
    std::string s;
    for (size_t i = from; i < vs.size(); ++i) s += (i > from ? ", " : "") + ref(vs[i]);
    return s;
  }

  std::string operand(const Op& op, size_t i) const {
    return i < op.operands.size() ? ref(op.operands[i]) : "%<<missing>>";
  }

  std::string result_types(const Op& op) const {
    std::string s;
    for (size_t i = 0; i < op.results.size(); ++i) s += (i ? ", " : "") + type_str(op.results[i]);
    return s;
  }

  void indent(int depth) { out_.append(static_cast<size_t>(depth) * 2, ' '); }

  void print_ops(const Block& b, int depth) {
    for (const auto& op : b.ops) print_op(*op, depth);
  }

  void print_region(const Op& op, size_t i, int depth) {
    out_ += "{";
    if (i == 0 && hooks_.suffix) out_ += hooks_.suffix(op, ref_);
    out_ += "\n";
    if (hooks_.region_start) print_lines(hooks_.region_start(op, i, ref_), depth + 1);
    if (i < op.regions.size()) print_ops(*op.regions[i], depth + 1);
    indent(depth);
    out_ += "}";
  }

  void print_op(const Op& op, int depth) {
    indent(depth);
    if (!op.results.empty()) out_ += refs(op.results) + " = ";
    out_ += op_name(op.kind);
    const Attrs& a = op.attrs;
    bool typed = !op.results.empty(); // for/if print their types themselves
    switch (op.kind) {
    case OpKind::ProgramId:
    case OpKind::NumPrograms: out_ += fmt::format(" {}", a.axis); break;
    case OpKind::Arange: out_ += fmt::format(" {}", a.start); break;
    case OpKind::Constant: out_ += " " + format_const(a.value); break;
    case OpKind::ExpandDims: out_ += fmt::format(" {} axis {}", refs(op.operands), a.axis); break;
    case OpKind::Assert:
    case OpKind::Print: out_ += fmt::format(" {} {}", refs(op.operands), quote(a.message)); break;
    case OpKind::Reduce:
    case OpKind::Scan:
      out_ += fmt::format(" {} {} axis {}", reduce_kind_name(a.reduce), refs(op.operands), a.axis);
      if (!op.regions.empty()) // combine: (a, b) name the region's args
        out_ += fmt::format(" ({})", refs(op.regions[0]->args));
      break;
    case OpKind::Permute: out_ += fmt::format(" {} [{}]", refs(op.operands), fmt::join(a.perm, ", ")); break;
    case OpKind::DescLoad:
      out_ += " " + refs(op.operands);
      if (a.boxes != 1) out_ += fmt::format(" boxes {}", a.boxes);
      break;
    case OpKind::For: print_for(op, depth); typed = false; break;
    case OpKind::If: print_if(op, depth); typed = false; break;
    default:
      if (!op.operands.empty()) out_ += " " + refs(op.operands);
      break;
    }
    if (typed) out_ += " : " + result_types(op);
    if (typed && !op.regions.empty()) { // reduce/scan combine: the function after the type
      out_ += " ";
      print_region(op, 0, depth);
    }
    if (op.regions.empty() && hooks_.suffix) out_ += hooks_.suffix(op, ref_);
    out_ += format_loc(op.loc);
    out_ += "\n";
    if (hooks_.after) print_lines(hooks_.after(op, ref_), depth);
  }

  void print_lines(const std::vector<std::string>& lines, int depth) {
    for (const std::string& l : lines) {
      indent(depth);
      out_ += l + "\n";
    }
  }

  void print_arrow(const Op& op) {
    if (!op.results.empty()) out_ += " -> (" + result_types(op) + ")";
  }

  // for %iv = %lb to %ub step %s iter_args(%a = %init, ...) -> (types) { body }
  void print_for(const Op& op, int depth) {
    const Block* body = op.regions.empty() ? nullptr : op.regions[0].get();
    auto arg = [&](size_t i) {
      return body && i < body->args.size() ? ref(body->args[i]) : "%<<missing>>";
    };
    out_ += fmt::format(" {} = {} to {} step {}", arg(0), operand(op, 0), operand(op, 1),
                        operand(op, 2));
    if (op.attrs.num_stages != 1) out_ += fmt::format(" stages {}", op.attrs.num_stages);
    if (op.attrs.warp_specialize) out_ += " warp_specialize";
    if (op.operands.size() > 3) {
      out_ += " iter_args(";
      for (size_t i = 3; i < op.operands.size(); ++i)
        out_ += fmt::format("{}{} = {}", i > 3 ? ", " : "", arg(i - 2), ref(op.operands[i]));
      out_ += ")";
    }
    print_arrow(op);
    out_ += " ";
    print_region(op, 0, depth);
  }

  // if %c -> (types) { then } else { else }
  void print_if(const Op& op, int depth) {
    out_ += " " + refs(op.operands);
    print_arrow(op);
    out_ += " ";
    print_region(op, 0, depth);
    out_ += " else ";
    print_region(op, 1, depth);
  }

  const Function& fn_;
  const PrintHooks& hooks_;
  PrintHooks::Ref ref_;
  std::unordered_map<const Value*, int> ids_;
  std::unordered_map<const Value*, std::string> names_;
  std::string out_;
};

} // namespace

std::string print(const Function& fn) { return Printer(fn, PrintHooks{}).run(); }

std::string print(const Function& fn, const PrintHooks& hooks) { return Printer(fn, hooks).run(); }

std::string content_hash(const Function& fn) {
  static const std::regex loc(R"( loc\("(?:[^"\\]|\\.)*":[0-9]+:[0-9]+\))");
  std::string text = std::regex_replace(print(fn), loc, "");
  return fmt::format("{:016x}", fnv1a64(text));
}

} // namespace tilec::ir
