// fmt 9's compiled part, once, for a build that takes fmt from TILEC_DEPS_INCLUDE (no package:
// the Python wheel's libtilec.so, a GPU machine's runtime-only build). Every other source
// includes fmt without FMT_HEADER_ONLY and compiles only declarations and templates, instead
// of format-inl.h's functions again. CMakeLists.txt uses this file for fmt 9.x only (other
// versions stay header-only): what fmt declares extern differs between major versions.
#include <fmt/format-inl.h>

#include <locale>

FMT_BEGIN_NAMESPACE
namespace detail {
// The templates format.h declares `extern template` (defined in format-inl.h).
template FMT_API auto thousands_sep_impl<char>(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto thousands_sep_impl<wchar_t>(locale_ref) -> thousands_sep_result<wchar_t>;
template FMT_API auto decimal_point_impl(locale_ref) -> char;
template FMT_API auto decimal_point_impl(locale_ref) -> wchar_t;
// locale_ref's members are templates declared in core.h and defined in format-inl.h.
template FMT_API locale_ref::locale_ref(const std::locale& loc);
template FMT_API auto locale_ref::get<std::locale>() const -> std::locale;
} // namespace detail
FMT_END_NAMESPACE
