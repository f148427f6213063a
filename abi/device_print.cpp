#include "abi/device_print.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <mutex>

namespace tilec {

namespace {

std::mutex& sink_mutex() {
  static std::mutex m;
  return m;
}

DevicePrintSink& sink() {
  static DevicePrintSink s;
  return s;
}

} // namespace

void set_device_print_sink(DevicePrintSink s) {
  std::lock_guard lock(sink_mutex());
  sink() = std::move(s);
}

void device_print_emit(const std::string& line) {
  std::lock_guard lock(sink_mutex());
  if (sink())
    sink()(line);
  else
    std::fputs((line + "\n").c_str(), stdout);
}

std::string device_print_line(const std::uint32_t pid[3], const std::vector<std::int64_t>& shape,
                              std::int64_t linear, std::string_view prefix, PrintedValue kind, std::int64_t i,
                              float f) {
  std::vector<std::int64_t> idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? linear % shape[d] : 0;
    linear = shape[d] ? linear / shape[d] : 0;
  }
  return fmt::format("pid ({}, {}, {}) idx ({}) {}: {}", pid[0], pid[1], pid[2], fmt::join(idx, ", "), prefix,
                     kind == PrintedValue::float_         ? fmt::format("{}", f)
                     : kind == PrintedValue::unsigned_int ? fmt::format("{}", static_cast<std::uint64_t>(i))
                                                          : fmt::format("{}", i));
}

} // namespace tilec
