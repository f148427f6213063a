#include "abi/types.h"

#include <array>
#include <utility>

namespace tilec::rt {
namespace {

constexpr std::array<std::pair<ScalarType, std::string_view>, 14> kNames = {{
    {ScalarType::i1, "i1"},
    {ScalarType::i8, "i8"},
    {ScalarType::i16, "i16"},
    {ScalarType::i32, "i32"},
    {ScalarType::i64, "i64"},
    {ScalarType::f16, "f16"},
    {ScalarType::bf16, "bf16"},
    {ScalarType::f32, "f32"},
    {ScalarType::f8e4m3, "f8e4m3"},
    {ScalarType::f8e5m2, "f8e5m2"},
    {ScalarType::u8, "u8"},
    {ScalarType::u16, "u16"},
    {ScalarType::u32, "u32"},
    {ScalarType::u64, "u64"},
}};

} // namespace

std::string_view scalar_type_name(ScalarType t) {
  for (auto [type, name] : kNames)
    if (type == t) return name;
  return "?";
}

std::optional<ScalarType> parse_scalar_type(std::string_view name) {
  for (auto [type, n] : kNames)
    if (n == name) return type;
  return std::nullopt;
}

std::size_t scalar_type_bytes(ScalarType t) {
  switch (t) {
  case ScalarType::i1:
  case ScalarType::i8:
  case ScalarType::u8:
  case ScalarType::f8e4m3:
  case ScalarType::f8e5m2:
    return 1;
  case ScalarType::i16:
  case ScalarType::u16:
  case ScalarType::f16:
  case ScalarType::bf16:
    return 2;
  case ScalarType::i32:
  case ScalarType::u32:
  case ScalarType::f32:
    return 4;
  case ScalarType::i64:
  case ScalarType::u64:
    return 8;
  }
  return 0;
}

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
