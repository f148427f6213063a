#pragma once
// What every input fuzz target shares (fuzz/targets/*.cpp, one per reader): a reader
// may accept the bytes or reject them with its own documented error, whose message
// names the input; anything else (another exception type, an empty or anonymous
// message, a round trip that does not hold) is a finding, reported by aborting so
// libFuzzer saves the input. Crashes, undefined behaviour, leaks and hangs are the
// sanitizers' and libFuzzer's to report.
#include <cxxabi.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <typeinfo>

namespace tilec::fuzz_targets {

// The name each target gives its reader for the input; rejections must start with it.
inline constexpr std::string_view kSource = "fuzz-input";

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

[[noreturn]] inline void finding(std::string_view what, std::string_view detail = {}) {
  std::fprintf(stderr, "\n==== input fuzzing finding: %.*s\n", int(what.size()), what.data());
  if (!detail.empty()) std::fprintf(stderr, "%.*s\n", int(detail.size()), detail.data());
  std::fflush(stderr);
  std::abort();
}

inline void require(bool ok, std::string_view what, std::string_view detail = {}) {
  if (!ok) finding(what, detail);
}

inline std::string type_name(const std::type_info& t) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(t.name(), nullptr, nullptr, &status),
                                              std::free);
  return status == 0 && name ? name.get() : t.name();
}

// Turns whatever `step` throws into a finding: for steps that must not fail, such as
// reading back what a writer produced from an accepted input.
template <class Step>
auto must(std::string_view what, Step&& step) -> decltype(step()) {
  try {
    return step();
  } catch (const std::exception& e) {
    finding(what, type_name(typeid(e)) + ": " + e.what());
  } catch (...) {
    finding(what, "threw something that is not a std::exception");
  }
}

// Runs a reader: its result when it accepts the input, nullopt when it rejects it with
// `Error` and a message that starts with `source` and says more. Anything else is a
// finding.
template <class Error, class Read>
auto read_or_reject(std::string_view source, Read&& read) -> std::optional<decltype(read())> {
  try {
    return read();
  } catch (const Error& e) {
    std::string_view msg = e.what();
    require(msg.starts_with(source) && msg.size() > source.size() + 2,
            "a rejection does not name the input and what is wrong", msg);
    return std::nullopt;
  } catch (const std::exception& e) {
    finding(std::string("the reader threw ") + type_name(typeid(e)) + " instead of " +
                type_name(typeid(Error)),
            e.what());
  } catch (...) {
    finding("the reader threw something that is not a std::exception");
  }
}

// Like read_or_reject for a step whose rejections need not name the input (an error
// about an accepted input's content, e.g. from the IR verifier): true when it passed.
template <class Error, class Step>
bool passes_or_rejects(std::string_view what, Step&& step) {
  try {
    step();
    return true;
  } catch (const Error& e) {
    require(std::string_view(e.what()).size() > 0, what, "the error has an empty message");
    return false;
  } catch (const std::exception& e) {
    finding(what, type_name(typeid(e)) + " instead of " + type_name(typeid(Error)) + ": " + e.what());
  } catch (...) {
    finding(what, "threw something that is not a std::exception");
  }
}

} // namespace tilec::fuzz_targets
