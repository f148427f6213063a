#include "abi/types.h"

namespace tilec::rt {

std::string ParamType::str() const {
  std::string name(scalar_type_name(element));
  return is_pointer ? "ptr<" + name + ">" : name;
}

std::optional<ParamType> parse_param_type(std::string_view text) {
  bool pointer = text.starts_with("ptr<") && text.ends_with(">");
  if (pointer) text = text.substr(4, text.size() - 5);
  auto element = parse_scalar_type(text);
  if (!element) return std::nullopt;
  return ParamType{*element, pointer};
}

} // namespace tilec::rt
