#pragma once
// tilec's version: what `tilec --version` prints and every manifest records. CMake reads the
// project version from this line.
#define TILEC_VERSION "0.1.0"
