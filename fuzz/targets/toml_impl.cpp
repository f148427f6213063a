// toml++'s implementation, compiled once for every fuzz program (the build defines
// TOML_HEADER_ONLY=0 elsewhere): instrumented like the readers that parse with it, without
// compiling the whole parser again in each source that includes <toml++/toml.h>.
#define TOML_IMPLEMENTATION
#include <toml++/toml.h>
