#pragma once
// What the paged-attention tests share: the template, and one path of a problem run on the
// emulator with what the launcher counted.
#include <catch2/catch.hpp>

#include <string>

#include "backends/launchers.h"
#include "templates/attention/paged_attention.h"
#include "templates/registry.h"

namespace tilec::templates::test {

inline const KernelTemplate& paged_attention() {
  const KernelTemplate* t = find_template("paged_attention");
  REQUIRE(t);
  return *t;
}

struct Run {
  Problem p;
  launch::LaunchStats stats;
};

// Path `path` of the problem `request` with config `params` on the emulator (the lowering of
// TILEC_EMU_LOWERING).
inline Run run_emulated(const std::string& path, const ParamMap& params, const ProblemRequest& request) {
  const KernelTemplate& t = paged_attention();
  Run r{make_problem(t, request), {}};
  auto launcher = backends::make_emulate_launcher();
  run_problem(t, path, params, r.p, *launcher);
  r.stats = launcher->stats();
  return r;
}

inline const launch::Buffer& output(const Problem& p) { return p.buffers.at(size_t(p.outputs.at(0))); }

} // namespace tilec::templates::test
