// The tilec executable: the CLI over tilec's kernels and any registered with it.
#include "tools/cli.h"

int main(int argc, char** argv) { return tilec::cli::run_cli(argc, argv); }
