#pragma once
// A fuzz program: a kernel plus everything needed to run it the same way twice (the values of
// its parameters, the grid, the warp count and the seed its inputs come from), and its text
// form, which regression files under tests/fuzz/regressions hold:
//
//   // tilec fuzz program
//   // seed 42
//   // grid 2 1 1
//   // num_warps 4
//   // param x 300        (a buffer parameter: its element count)
//   // param n 257        (a scalar parameter: its value)
//   kernel @fuzz_42(%x: ptr<f32>, %n: i32) { ... }
//
// The header lines are `//` comments, so the whole file is also plain tile IR.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "launch/args.h"
#include "ir/ir.h"

namespace tilec::fuzz {

// The value of one kernel parameter: a buffer's element count, or a scalar.
struct ParamValue {
  int64_t count = 0; // buffers
  double scalar = 0; // scalars (integers are exact: every generated one fits in a double)
};

struct Program {
  ir::Kernel kernel;
  std::vector<ParamValue> params; // one per kernel parameter
  launch::Grid grid{1, 1, 1};
  int num_warps = 4;
  uint64_t seed = 0; // the generator's seed; the inputs derive from it
};

std::string to_text(const Program& p);
// Reads to_text's form; UserError naming `source_name:line` on a malformed header, and the
// parser's error on malformed IR.
Program from_text(std::string_view text, std::string_view source_name = "<input>");

// The initial contents of every buffer parameter (deterministic in the seed): random values
// of the buffer's dtype with edge cases mixed in (extremes, zeros of both signs, infinities,
// NaN, subnormals). One per parameter; scalar parameters get an empty placeholder.
std::vector<launch::Buffer> make_buffers(const Program& p);
// The kernel arguments over `buffers` (from make_buffers or a copy of it).
std::vector<launch::Arg> make_args(const Program& p, std::vector<launch::Buffer>& buffers);

// A deterministic 64-bit generator (splitmix64), the same on every platform.
class Rng {
public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  int64_t range(int64_t lo, int64_t hi) { // inclusive
    return lo + static_cast<int64_t>(next() % static_cast<uint64_t>(hi - lo + 1));
  }
  bool chance(double p) { return static_cast<double>(next() >> 11) * 0x1p-53 < p; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * static_cast<double>(next() >> 11) * 0x1p-53; }
  template <class T> const T& pick(const std::vector<T>& v) { return v[next() % v.size()]; }

private:
  uint64_t s_;
};

} // namespace tilec::fuzz
