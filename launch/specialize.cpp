#include "launch/specialize.h"

#include <fmt/format.h>

#include "runtime/launch.h"

namespace tilec::launch {

std::string Specialization::str() const {
  std::string s;
  for (const auto& [name, d] : divisibility) s += fmt::format(" {}%{}", name, d);
  for (const auto& [name, v] : values) s += fmt::format(" {}={}", name, v);
  for (const std::string& name : large_buffers) s += fmt::format(" {}:i64", name);
  return s.empty() ? "none" : s.substr(1);
}

Specialization specialize(const ir::Function& fn, const std::vector<Arg>& args) {
  Specialization s;
  for (size_t i = 0; i < fn.params.size() && i < args.size(); ++i) {
    const ir::Type& t = fn.params[i]->type;
    const std::string& name = fn.params[i]->name;
    const Arg& a = args[i];
    if (t.is_ptr()) {
      if (a.buffer && a.buffer->count() > rt::kMaxElements32) s.large_buffers.insert(name);
      continue;
    }
    if (!is_int(t.dtype()) || t.dtype() == DType::i1 || a.buffer) continue;
    if (a.i % 16 == 0) s.divisibility[name] = 16;
    if (a.i == 1) s.values[name] = 1;
  }
  return s;
}

} // namespace tilec::launch
