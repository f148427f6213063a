#pragma once
// device_print's output, one definition for every backend that prints (the interpreter and
// the emulator): the line format and where lines go.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace tilec {

// Receives each printed line (without the newline). Empty: lines go to stdout.
using DevicePrintSink = std::function<void(const std::string& line)>;
void set_device_print_sink(DevicePrintSink sink);
void device_print_emit(const std::string& line);

// What a printed element is: which of `i` (an integer extended to 64 bits, as signed or
// as unsigned) or `f` holds it. Also the emulator's tilec_emu_print `kind` argument.
enum class PrintedValue : std::int32_t { signed_int = 0, float_ = 1, unsigned_int = 2 };

// "pid (x, y, z) idx (i, j) prefix: value" for element `linear` (row-major) of a tile of
// `shape` ("idx ()" for a scalar); floats in their shortest form, integers in decimal.
std::string device_print_line(const std::uint32_t pid[3], const std::vector<std::int64_t>& shape,
                              std::int64_t linear, std::string_view prefix, PrintedValue kind, std::int64_t i,
                              float f);

} // namespace tilec
