#include "abi/arg_errors.h"

#include <fmt/format.h>

#include <vector>

namespace tilec::rt {

namespace {

// "a", "a and b", "a, b and c".
std::string listed(const std::vector<std::string>& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i)
    out += (i == 0 ? "" : i + 1 == items.size() ? " and " : ", ") + items[i];
  return out;
}

// The parameters `given` arguments leave out (given < params): see argument_count_mismatch.
std::vector<std::size_t> missing_params(std::size_t params, std::size_t given,
                                        const std::function<bool(std::size_t, std::size_t)>& fits) {
  std::vector<std::size_t> missing;
  if (fits) {
    std::size_t arg = 0;
    for (std::size_t i = 0; i < params; ++i) {
      if (arg < given && fits(i, arg)) ++arg;
      else if (missing.size() < params - given) missing.push_back(i);
      else break;
    }
    if (arg == given && missing.size() == params - given) return missing;
    missing.clear();
  }
  for (std::size_t i = given; i < params; ++i) missing.push_back(i);
  return missing;
}

} // namespace

std::string param_phrase(std::string_view name, std::string_view type) {
  return fmt::format("parameter '{}' ({})", name, type);
}

std::string param_given(std::string_view name, std::string_view type, std::string_view given) {
  return fmt::format("{} was given {}", param_phrase(name, type), given);
}

std::string buffer_of(std::string_view buffer_name, std::string_view element) {
  if (buffer_name.empty()) return fmt::format("a buffer of {}", element);
  return fmt::format("buffer '{}' of {}", buffer_name, element);
}

std::string argument_count_mismatch(std::span<const ParamName> params, std::size_t given,
                                    std::span<const std::string> extra,
                                    const std::function<bool(std::size_t, std::size_t)>& fits) {
  std::string head = fmt::format("expects {} argument{}, got {}", params.size(), params.size() == 1 ? "" : "s", given);
  std::vector<std::string> items;
  if (given < params.size()) {
    for (std::size_t i : missing_params(params.size(), given, fits))
      items.push_back(fmt::format("'{}' ({})", params[i].name, params[i].type));
    return fmt::format("{}: missing parameter{} {}", head, items.size() == 1 ? "" : "s", listed(items));
  }
  if (given == params.size()) return head;
  for (std::size_t i = params.size(); i < given; ++i) {
    std::size_t k = i - params.size();
    items.push_back(k < extra.size() ? fmt::format("{} ({})", i + 1, extra[k]) : std::to_string(i + 1));
  }
  return fmt::format("{}: extra argument{} {}", head, items.size() == 1 ? "" : "s", listed(items));
}

} // namespace tilec::rt
