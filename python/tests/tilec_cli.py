"""The tilec CLI the tests that compile or export their own modules run: $TILEC_BINARY, else
tools/tilec in the build folder that holds $TILEC_LIBRARY or $TILEC_DEPLOY (scripts/test_hosts.sh's
layout), else `tilec` on the PATH."""
import os
import shutil


def tilec_binary():
    candidates = [os.environ.get("TILEC_BINARY")]
    for var in ("TILEC_LIBRARY", "TILEC_DEPLOY"):
        if os.environ.get(var):
            candidates.append(os.path.join(os.path.dirname(os.path.abspath(os.environ[var])), "tools", "tilec"))
    candidates.append(shutil.which("tilec"))
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    raise RuntimeError("no tilec to compile the modules with: set TILEC_BINARY, or TILEC_LIBRARY to build/libtilec.so, "
                       "or TILEC_DEPLOY to a folder beside build/tools/tilec")
