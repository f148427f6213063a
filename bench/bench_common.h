#pragma once
// Median-of-N timing for the benchmarks.
#include <algorithm>
#include <chrono>
#include <vector>

namespace tilec::bench {

struct Timing {
  double median_ms, min_ms, max_ms;
};

template <class F> Timing time_repeated(int repeats, F&& f) {
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front(), ms.back()};
}

} // namespace tilec::bench
