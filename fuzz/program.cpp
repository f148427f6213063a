#include "fuzz/program.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "ir/parser.h"
#include "ir/printer.h"

namespace tilec::fuzz {

std::string to_text(const Program& p) {
  const ir::Function& fn = *p.kernel;
  std::string s = "// tilec fuzz program\n";
  s += fmt::format("// seed {}\n// grid {} {} {}\n// num_warps {}\n", p.seed, p.grid[0], p.grid[1], p.grid[2],
                   p.num_warps);
  for (size_t i = 0; i < fn.params.size(); ++i) {
    const ir::Value* v = fn.params[i];
    if (v->type.is_ptr()) s += fmt::format("// param {} {}\n", v->name, p.params.at(i).count);
    else s += fmt::format("// param {} {}\n", v->name, p.params.at(i).scalar);
  }
  return s + ir::print(fn);
}

Program from_text(std::string_view text, std::string_view source_name) {
  Program p;
  std::vector<std::pair<std::string, std::string>> params;
  bool has_seed = false, has_grid = false;
  std::istringstream in{std::string(text)};
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.rfind("// ", 0) != 0) continue;
    std::istringstream words(line.substr(3));
    std::string key;
    words >> key;
    auto bad = [&](const std::string& what) {
      return UserError(fmt::format("{}:{}: {} in '{}'", source_name, line_no, what, line));
    };
    if (key == "seed") {
      if (!(words >> p.seed)) throw bad("expected '// seed N'");
      has_seed = true;
    } else if (key == "grid") {
      if (!(words >> p.grid[0] >> p.grid[1] >> p.grid[2])) throw bad("expected '// grid X Y Z'");
      has_grid = true;
    } else if (key == "num_warps") {
      if (!(words >> p.num_warps)) throw bad("expected '// num_warps N'");
    } else if (key == "param") {
      std::string name, value;
      if (!(words >> name >> value)) throw bad("expected '// param NAME VALUE'");
      params.emplace_back(name, value);
    }
  }
  if (!has_seed || !has_grid)
    throw UserError(fmt::format("{}: not a fuzz program: the '// seed N' and '// grid X Y Z' lines are missing",
                                source_name));
  p.kernel = ir::parse(text, source_name);
  const ir::Function& fn = *p.kernel;
  for (const ir::Value* v : fn.params) {
    auto it = std::find_if(params.begin(), params.end(), [&](const auto& kv) { return kv.first == v->name; });
    if (it == params.end())
      throw UserError(fmt::format("{}: parameter '{}' has no '// param {} VALUE' line", source_name, v->name, v->name));
    ParamValue pv;
    char* end = nullptr;
    double x = std::strtod(it->second.c_str(), &end);
    if (*end) throw UserError(fmt::format("{}: parameter '{}': '{}' is not a number", source_name, v->name, it->second));
    if (v->type.is_ptr()) {
      if (x < 0 || x != std::floor(x))
        throw UserError(fmt::format("{}: buffer '{}' needs an element count, got {}", source_name, v->name, it->second));
      pv.count = static_cast<int64_t>(x);
    } else {
      pv.scalar = x;
    }
    p.params.push_back(pv);
  }
  return p;
}

namespace {

double random_float(Rng& r, ir::DType t) {
  double big = t == ir::DType::f16 ? 65504.0 : 3.0e38;
  switch (r.range(0, 19)) {
  case 0: return r.pick(std::vector<double>{0.0, -0.0, INFINITY, -INFINITY, NAN});
  case 1: return r.pick(std::vector<double>{big, -big, 1e-40, -1e-45, 6e-8, -3e-5, 1e30, -1e20});
  case 2:
  case 3: return r.uniform(-100.0, 100.0);
  case 4:
  case 5:
  case 6:
  case 7: return static_cast<double>(r.range(-32, 32)) / 8.0; // exact in every float dtype
  default: return r.uniform(-4.0, 4.0);
  }
}

int64_t random_int(Rng& r, ir::DType t) {
  if (t == ir::DType::i1) return r.range(0, 1);
  int bits = ir::dtype_bits(t);
  int64_t lo = bits == 64 ? std::numeric_limits<int64_t>::min() : -(int64_t(1) << (bits - 1));
  int64_t hi = bits == 64 ? std::numeric_limits<int64_t>::max() : (int64_t(1) << (bits - 1)) - 1;
  switch (r.range(0, 9)) {
  case 0: return r.pick(std::vector<int64_t>{lo, hi, -1, 0, 1, lo + 1});
  case 1: return static_cast<int64_t>(r.next()); // wraps to the dtype's width when stored
  case 2:
  case 3: return r.range(-1000, 1000);
  default: return r.range(-20, 20);
  }
}

} // namespace

std::vector<launch::Buffer> make_buffers(const Program& p) {
  const ir::Function& fn = *p.kernel;
  std::vector<launch::Buffer> bufs(fn.params.size());
  for (size_t i = 0; i < fn.params.size(); ++i) {
    const ir::Value* v = fn.params[i];
    if (!v->type.is_ptr()) continue;
    ir::DType t = v->type.dtype();
    launch::Buffer b(v->name, t, static_cast<size_t>(p.params.at(i).count));
    Rng r(p.seed * 0x100000001b3ull + i + 1);
    for (size_t k = 0; k < b.count(); ++k) {
      if (ir::is_float(t)) b.set(k, random_float(r, t));
      else b.set_int(k, random_int(r, t));
    }
    bufs[i] = std::move(b);
  }
  return bufs;
}

std::vector<launch::Arg> make_args(const Program& p, std::vector<launch::Buffer>& buffers) {
  const ir::Function& fn = *p.kernel;
  std::vector<launch::Arg> args;
  for (size_t i = 0; i < fn.params.size(); ++i) {
    const ir::Type& t = fn.params[i]->type;
    if (t.is_ptr()) args.push_back(launch::Arg::of(buffers.at(i)));
    else if (ir::is_float(t.dtype())) args.push_back(launch::Arg::of_float(p.params.at(i).scalar));
    else args.push_back(launch::Arg::of_int(static_cast<int64_t>(p.params.at(i).scalar)));
  }
  return args;
}

} // namespace tilec::fuzz
