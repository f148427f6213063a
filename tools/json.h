#pragma once
// A minimal JSON object writer for the CLI's --json lines (fields keep their
// insertion order; a missing figure is written as null, never invented).
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace tilec::cli {

std::string json_escape(std::string_view s);

class JsonObject {
public:
  JsonObject& null(std::string_view key) { return raw(key, "null"); }
  JsonObject& str(std::string_view key, std::string_view v) { return raw(key, "\"" + json_escape(v) + "\""); }
  JsonObject& boolean(std::string_view key, bool v) { return raw(key, v ? "true" : "false"); }
  JsonObject& integer(std::string_view key, int64_t v) { return raw(key, std::to_string(v)); }
  JsonObject& number(std::string_view key, double v) {
    return raw(key, std::isfinite(v) ? fmt::format("{}", v) : std::string("null"));
  }
  template <class T> JsonObject& maybe(std::string_view key, const std::optional<T>& v) {
    if (!v) return null(key);
    if constexpr (std::is_floating_point_v<T>) return number(key, *v);
    else return integer(key, static_cast<int64_t>(*v));
  }
  // `json` must already be valid JSON (an array or object).
  JsonObject& raw(std::string_view key, std::string_view json) {
    body_ += fmt::format("{}\"{}\": {}", body_.empty() ? "" : ", ", json_escape(key), json);
    return *this;
  }
  std::string str() const { return "{" + body_ + "}"; }

private:
  std::string body_;
};

} // namespace tilec::cli
