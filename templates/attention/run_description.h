#pragma once
// Paged attention's run as data (runtime/op_run.h): what its kernel card carries so that a
// host in any language runs it through the C ABI (runtime/tilec.h) without code of its own.
#include <string_view>

namespace tilec::templates {

// The [run] table of paged attention's kernel card, as TOML text.
std::string_view paged_attention_run();

} // namespace tilec::templates
