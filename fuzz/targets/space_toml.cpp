// Input fuzzing of the autotuning search-space reader (autotune/space.h) with the
// paged-attention kernel's names: any bytes either parse or raise UserError naming
// `fuzz-input:line:column`. A small parsed space is also enumerated over a few problem
// shapes (the default one, and ones with zero and extreme values), where evaluating a
// constraint may only fail with a UserError (division by zero, overflow).
#include "fuzz/targets/fuzz_target.h"

#include <limits>

#include "autotune/space.h"
#include "ir/error.h"

using namespace tilec;
using namespace tilec::fuzz_targets;

namespace {

const autotune::SpaceNames& names() {
  static const autotune::SpaceNames n{
      "paged_attention",
      {"block_n", "head_group", "num_warps", "num_splits"},
      {"batch", "hq", "hkv", "sq", "head_dim", "block_size", "max_blocks", "num_blocks", "ctx", "dtype",
       "alibi"},
      {}};
  return n;
}

autotune::Values shape_of(int64_t fill) {
  autotune::Values v;
  for (const std::string& name : names().shape) v[name] = fill;
  return v;
}

const std::vector<autotune::Values>& shapes() {
  static const std::vector<autotune::Values> s = [] {
    autotune::Values defaults{{"batch", 2},      {"hq", 8},         {"hkv", 2},         {"sq", 1},
                              {"head_dim", 64},  {"block_size", 16}, {"max_blocks", 16}, {"num_blocks", 32},
                              {"ctx", -1},       {"dtype", 0},      {"alibi", 0}};
    return std::vector<autotune::Values>{defaults, shape_of(0), shape_of(std::numeric_limits<int64_t>::max()),
                                         shape_of(std::numeric_limits<int64_t>::min())};
  }();
  return s;
}

// Enumerating is a cross product: only spaces small enough to keep each input quick.
bool small(const autotune::SearchSpace& space) {
  size_t n = 1;
  for (const auto& [name, values] : space.params) {
    n *= values.size();
    if (n > 256) return false;
  }
  return true;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto space = read_or_reject<UserError>(
      kSource, [&] { return autotune::parse_space(as_text(data, size), std::string(kSource), names()); });
  if (!space || !small(*space)) return 0;
  for (const autotune::Values& shape : shapes()) {
    passes_or_rejects<UserError>("enumerate(parsed space)", [&] {
      autotune::Enumeration e = autotune::enumerate(*space, shape);
      require(e.candidates.size() + e.rejected.size() == space->size(),
              "enumeration lost candidates");
    });
  }
  return 0;
}
