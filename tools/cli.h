#pragma once
// The tilec command line as a function, so a program that registers its own kernels
// (TILEC_REGISTER_KERNEL in templates/registry.h) gets the whole CLI over them: tilec's own
// main() is tools/main.cpp, and CMake's tilec_add_kernels links the same one.

namespace tilec::cli {

// Parses argv, runs the command, prints errors; returns the exit code (0 ok, 1 wrong result
// or failure, 2 bad usage or input, 3 backend unavailable).
int run_cli(int argc, char** argv);

} // namespace tilec::cli
