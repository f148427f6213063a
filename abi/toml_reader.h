#pragma once
// One reader for tilec's TOML files (module manifests, kernel cards, tuning databases,
// measurement plans, search spaces): the parse and the typed fields, every failure naming the
// file, the line and column of the offending node (or of the table missing a key) and the
// key's path. `Error` is the exception a file's readers throw (rt::ManifestError,
// rt::TuningDbError, measure::PlanError, UserError), constructed from the message.
#include <fmt/format.h>
#include <toml++/toml.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tilec {

// "a string", "an integer", ...: what a node is, for messages.
inline std::string_view toml_kind(const toml::node& n) {
  switch (n.type()) {
  case toml::node_type::table: return "a table";
  case toml::node_type::array: return "an array";
  case toml::node_type::string: return "a string";
  case toml::node_type::integer: return "an integer";
  case toml::node_type::floating_point: return "a float";
  case toml::node_type::boolean: return "a boolean";
  default: return "a date or time";
  }
}

// Parses `text`; a syntax error is an Error "source:line:column: what".
template <class Error> toml::table parse_toml(std::string_view text, const std::string& source) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    throw Error(fmt::format("{}:{}:{}: {}", source, b.line, b.column, e.description()));
  }
}

template <class Error> class TomlReader {
public:
  explicit TomlReader(std::string source) : source_(std::move(source)) {}
  const std::string& source() const { return source_; }

  // "source:line:column: msg" (just "source: msg" for a node without a position).
  [[noreturn]] void fail(const toml::node* at, const std::string& msg) const {
    std::string where = source_;
    if (at && at->source().begin) where += fmt::format(":{}:{}", at->source().begin.line, at->source().begin.column);
    throw Error(where + ": " + msg);
  }
  [[noreturn]] void fail(const toml::node& at, const std::string& msg) const { fail(&at, msg); }

  // The node at `key` of `t`, or nullptr when it is absent and not required; a missing
  // required key is reported at `where` (the document itself when nullptr). `path` is the
  // key's full name in messages ("params[2].type").
  const toml::node* find(const toml::table& t, std::string_view key, const std::string& path, const toml::node* where,
                         bool required) const {
    const toml::node* n = t.get(key);
    if (!n && required) fail(where, fmt::format("missing key '{}'", path));
    return n;
  }
  const toml::node& need(const toml::table& t, std::string_view key) const {
    return *find(t, key, std::string(key), &t, true);
  }

  // A string; required ones must not be empty. Absent and not required: "".
  std::string string(const toml::table& t, std::string_view key, const std::string& path, const toml::node* where,
                     bool required = true) const {
    const toml::node* n = find(t, key, path, where, required);
    if (!n) return {};
    if (!n->is_string()) fail(n, fmt::format("key '{}' must be a string, got {}", path, toml_kind(*n)));
    std::string s = n->as_string()->get();
    if (required && s.empty()) fail(n, fmt::format("key '{}' must not be empty", path));
    return s;
  }
  // A string that must be there (it may be empty).
  std::string string(const toml::table& t, std::string_view key) const {
    const toml::node& n = need(t, key);
    if (!n.is_string()) fail(n, fmt::format("key '{}' must be a string, got {}", key, toml_kind(n)));
    return n.as_string()->get();
  }
  // A string, "" when absent.
  std::string optional_string(const toml::table& t, std::string_view key) const {
    return t.get(key) ? string(t, key) : std::string();
  }

  // An integer in [min, max].
  std::int64_t integer(const toml::table& t, std::string_view key, const std::string& path, const toml::node* where,
                       std::int64_t min, std::int64_t max) const {
    const toml::node* n = find(t, key, path, where, true);
    if (!n->is_integer()) fail(n, fmt::format("key '{}' must be an integer, got {}", path, toml_kind(*n)));
    std::int64_t v = n->as_integer()->get();
    if (v < min && max == std::numeric_limits<std::int64_t>::max())
      fail(n, fmt::format("key '{}' must be at least {}, got {}", path, min, v));
    if (v < min || v > max) fail(n, fmt::format("key '{}' is {}, must be in [{}, {}]", path, v, min, max));
    return v;
  }
  std::int64_t integer(const toml::table& t, std::string_view key,
                       std::int64_t min = std::numeric_limits<std::int64_t>::min(),
                       std::int64_t max = std::numeric_limits<std::int64_t>::max()) const {
    return integer(t, key, std::string(key), &t, min, max);
  }
  std::optional<std::int64_t> optional_integer(const toml::table& t, std::string_view key) const {
    if (!t.get(key)) return std::nullopt;
    return integer(t, key);
  }

  // A number (an integer or a float).
  double number(const toml::table& t, std::string_view key) const {
    const toml::node& n = need(t, key);
    if (n.is_integer()) return double(n.as_integer()->get());
    if (n.is_floating_point()) return n.as_floating_point()->get();
    fail(n, fmt::format("key '{}' must be a number, got {}", key, toml_kind(n)));
  }
  std::optional<double> optional_number(const toml::table& t, std::string_view key) const {
    if (!t.get(key)) return std::nullopt;
    return number(t, key);
  }

  const toml::table& table(const toml::node& n, const std::string& path) const {
    if (!n.is_table()) fail(n, fmt::format("key '{}' must be a table, got {}", path, toml_kind(n)));
    return *n.as_table();
  }
  const toml::table& table(const toml::table& t, std::string_view key) const {
    return table(need(t, key), std::string(key));
  }
  // The tables of an array of tables ([[key]]); none when absent.
  std::vector<const toml::table*> tables(const toml::table& t, std::string_view key) const {
    std::vector<const toml::table*> out;
    const toml::node* n = t.get(key);
    if (!n) return out;
    if (!n->is_array_of_tables()) fail(n, fmt::format("key '{}' must be an array of tables ([[{}]])", key, key));
    for (const toml::node& e : *n->as_array()) out.push_back(e.as_table());
    return out;
  }

private:
  std::string source_;
};

} // namespace tilec
