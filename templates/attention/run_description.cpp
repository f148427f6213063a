// Paged attention's run description: templates/attention/run.toml, embedded at build time
// (cmake/EmbedText.cmake writes it into a generated source as tilec::embedded::paged_attention_run_toml).
// `tilec autotune --export` and `tilec compile` write it into paged_attention.kernel.toml, and
// rt::OpStore and the C ABI execute it, so it must say what run_paged_attention_fused
// (templates/attention/fused.cpp) does: tests/templates/attention/test_paged_attention_launch.cpp holds the
// two together (grids, workspace and specialization over many configs and shapes).
#include "templates/attention/run_description.h"

namespace tilec::embedded {
extern const std::string_view paged_attention_run_toml;
} // namespace tilec::embedded

namespace tilec::templates {

std::string_view paged_attention_run() { return embedded::paged_attention_run_toml; }

} // namespace tilec::templates
