# tilec_embed_text(TARGET FILE SYMBOL): compiles the text of FILE (relative to the source root)
# into TARGET as `const std::string_view tilec::embedded::SYMBOL`, constant-initialized (so it is
# safe to read during static initialization). The text is read at configure time and editing
# FILE reconfigures; a file holding the raw string's delimiter is refused.
function(tilec_embed_text target file symbol)
  set(path ${PROJECT_SOURCE_DIR}/${file})
  file(READ ${path} text)
  set(delimiter "tilec_embed")
  string(FIND "${text}" ")${delimiter}\"" found)
  if(NOT found EQUAL -1)
    message(FATAL_ERROR "${file} holds ')${delimiter}\"', which would end its embedded string early")
  endif()
  set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${path})
  set(out ${PROJECT_BINARY_DIR}/embedded/${symbol}.cpp)
  file(CONFIGURE OUTPUT ${out} @ONLY CONTENT
"// Generated from ${file} by cmake/EmbedText.cmake at configure time; edit that file instead.
#include <string_view>

namespace tilec::embedded {
extern const std::string_view ${symbol};
const std::string_view ${symbol} = R\"${delimiter}(@text@)${delimiter}\";
} // namespace tilec::embedded
")
  target_sources(${target} PRIVATE ${out})
endfunction()
