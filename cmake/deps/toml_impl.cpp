// toml++'s implementation, compiled once, for a build that takes toml++ from TILEC_DEPS_INCLUDE
// (no package: the Python wheel's libtilec.so, a GPU machine's runtime-only build). Every other
// source includes <toml++/toml.h> with TOML_HEADER_ONLY=0 and compiles only its declarations,
// instead of the whole parser again.
#define TOML_IMPLEMENTATION
#include <toml++/toml.h>
