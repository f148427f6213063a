#!/usr/bin/env bash
# Installs a tilec build into a fresh prefix, builds the out-of-tree example examples/rmsnorm
# against it and runs every step of its tutorial (docs/TUTORIAL.md "Write, tune and ship your own
# kernel"):
#   rmsnorm_tilec list | ir | compile (PTX, cubin when ptxas exists) | run --backend emulate |
#   autotune --export; rmsnorm_host on the exported folder (the runtime alone, no LLVM);
#   autotune --prepare, then rmsnorm_measure (tilec_add_measure: no LLVM) in two shards on the
#   emulator, db merge and run --tuned; the stock tilec-measure refusing the user's plan;
# then the example configured with LLVM hidden (rmsnorm_measure and rmsnorm_host only, and
# that rmsnorm_measure timing the same plan), a TILEC_RUNTIME_ONLY build of tilec installed
# and the example built against it (the same), a runtime-only consumer (find_package(tilec
# COMPONENTS runtime) with LLVM hidden) and the pkg-config file; then libtilec.so (the C ABI):
# its versioned file and soname, and a C program linking the installed library through
# pkg-config's tilec.pc and through the CMake target tilec::c (find_package(tilec COMPONENTS c)
# with every other package hidden); `db export` of the tuned database and the tutorial's C host
# (examples/rmsnorm/host_c.c) on it through the installed libtilec.so, the folder kept as
# BUILD_DIR/rmsnorm_deploy for the Python host. Every check fails the test; nothing is skipped.
#
#   tests/install/test_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR SOURCE_DIR" >&2
  exit 2
fi
build=$(realpath "$1")
src=$(realpath "$2")
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tilec-install-test.XXXXXX")
# Kept on failure (and with TILEC_INSTALL_TEST_KEEP=1), for a look at what went wrong.
trap 'rc=$?; if [[ $rc -eq 0 && -z ${TILEC_INSTALL_TEST_KEEP:-} ]]; then rm -rf "$tmp"; else echo "exit $rc; files kept in $tmp" >&2; fi' EXIT

start=$SECONDS
step() { echo; echo "== [$((SECONDS - start))s] $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
# The example's own build uses ccache when the machine has it, as tilec's does.
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
jobs=${TILEC_INSTALL_TEST_JOBS:-2}

step "install $build into $tmp/prefix"
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 || {
  cat "$tmp/install.log"
  fail "cmake --install $build (it installs what is built: build every target first, cmake --build $build)"
}
p=$tmp/prefix
# lib, or lib/<multiarch> when the build was configured for the prefix /usr (GNUInstallDirs).
lib=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$build/CMakeCache.txt")
[[ -n $lib && $lib != /* ]] || fail "CMAKE_INSTALL_LIBDIR in $build/CMakeCache.txt is '$lib', not a relative folder"
for f in bin/tilec bin/tilec-measure $lib/libtilec_measure.a $lib/libtilec_measure_main.a \
         $lib/cmake/tilec/tilecMeasureTargets.cmake $lib/cmake/tilec/tilecMeasure.cmake $lib/libtilec_runtime.a $lib/libtilec_abi.a $lib/libtilec_codegen.a $lib/libtilec_cli.a \
         $lib/libtilec_cli_main.a $lib/cmake/tilec/tilecConfig.cmake $lib/cmake/tilec/tilecConfigVersion.cmake \
         $lib/cmake/tilec/tilecRuntimeTargets.cmake $lib/cmake/tilec/tilecCompilerTargets.cmake \
         $lib/cmake/tilec/tilecKernels.cmake $lib/pkgconfig/tilec-runtime.pc $lib/tilec/tilec_emu.dynlist \
         $lib/libtilec.so $lib/pkgconfig/tilec.pc $lib/cmake/tilec/tilecCTargets.cmake include/tilec/runtime/tilec.h \
         include/tilec/abi/emu_abi.h include/tilec/ir/ir.h include/tilec/ir/ops.def include/tilec/dsl/dsl.h \
         include/tilec/templates/registry.h include/tilec/launch/args.h include/tilec/launch/module_launcher.h include/tilec/runtime/emulator/emulator.h include/tilec/runtime/cuda_entry_points.def \
         include/tilec/tools/cli.h; do
  [[ -e $p/$f ]] || fail "the install has no $f"
done
[[ ! -e $p/include/tilec/fuzz/corpus && ! -e $p/include/tilec/fuzz/targets ]] || fail "fuzz inputs installed as headers"
[[ ! -e $p/include/tilec/runtime/emulator/internal.h ]] || fail "the emulator's internal header installed"
[[ ! -e $p/include/tilec/dsl/internal.h ]] || fail "the DSL's internal header installed"
[[ -z $(find "$p/include" -name '*.cpp') ]] || fail "sources installed under include/"
"$p/bin/tilec" list >/dev/null || fail "the installed tilec does not run"

step "configure and build examples/rmsnorm against the installed tilec"
cmake -G Ninja -S "$src/examples/rmsnorm" -B "$tmp/example" -DCMAKE_PREFIX_PATH="$p" \
  -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" >"$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log"; fail "configure"; }
# find_package(tilec) speaks only of tilec: LLVM's search for its own optional libraries stays quiet.
if grep -q "Could NOT find" "$tmp/configure.log"; then
  cat "$tmp/configure.log"
  fail "configuring against the installed tilec printed another package's 'Could NOT find'"
fi
# It must use the fresh install, never the build tree or another tilec on the machine.
grep -qx "tilec_DIR:PATH=$p/$lib/cmake/tilec" "$tmp/example/CMakeCache.txt" ||
  fail "the example found tilec elsewhere: $(grep '^tilec_DIR' "$tmp/example/CMakeCache.txt")"
cmake --build "$tmp/example" -j "$jobs" || fail "building the example"
tilec=$tmp/example/rmsnorm_tilec
host=$tmp/example/rmsnorm_host
measure=$tmp/example/rmsnorm_measure

step "rmsnorm_tilec list"
"$tilec" list | tee "$tmp/list.txt"
grep -qw rmsnorm "$tmp/list.txt" || fail "list does not show the user's rmsnorm"
grep -qw paged_attention "$tmp/list.txt" || fail "list does not show tilec's own paged_attention"

step "rmsnorm_tilec ir rmsnorm"
"$tilec" ir rmsnorm | tee "$tmp/ir.txt"
grep -q rmsnorm "$tmp/ir.txt" || fail "ir does not print the rmsnorm kernel"
grep -q rsqrt "$tmp/ir.txt" || fail "the rmsnorm IR has no rsqrt"

step "rmsnorm_tilec compile rmsnorm --arch sm_90 -o $tmp/ptx"
"$tilec" compile rmsnorm --arch sm_90 -o "$tmp/ptx"
ls -l "$tmp/ptx"
compgen -G "$tmp/ptx/*.ptx" >/dev/null || fail "compile wrote no PTX"
grep -q '.target sm_90' "$tmp"/ptx/*.ptx || fail "the PTX is not for sm_90"
if command -v ptxas >/dev/null; then
  compgen -G "$tmp/ptx/*.cubin" >/dev/null || fail "ptxas is here but compile wrote no cubin"
fi

step "rmsnorm_tilec run rmsnorm --backend emulate"
"$tilec" run rmsnorm --backend emulate || fail "run rmsnorm on the emulator"
"$tilec" run rmsnorm --backend emulate --set block=512 --shape rows=7 cols=300 --out "$tmp/y.npy" ||
  fail "run rmsnorm on the emulator with a ragged row"

step "rmsnorm_tilec run rmsnorm --inputs (sizes from the files, no I/O code in rmsnorm.cpp)"
mkdir -p "$tmp/rms_in"
python3 - "$tmp/rms_in" <<'PY' || fail "writing rmsnorm's .npy inputs"
import struct, sys
def npy(path, shape, values):
    header = "{'descr': '<f2', 'fortran_order': False, 'shape': (%s), }" % "".join(f"{d}, " for d in shape)
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(b"".join(struct.pack("<e", v) for v in values))
npy(sys.argv[1] + "/x.npy", (5, 40), [((i * 7) % 23 - 11) / 8 for i in range(200)])
npy(sys.argv[1] + "/w.npy", (40,), [1 + (i % 5) / 10 for i in range(40)])
PY
"$tilec" run rmsnorm --backend emulate --set block=256 --inputs "$tmp/rms_in" --out "$tmp/rms_out.npy" ||
  fail "run rmsnorm --inputs"
python3 -c 'import sys; h = open(sys.argv[1], "rb").read(128); sys.exit(0 if b"(5, 40)" in h else 1)' \
  "$tmp/rms_out.npy" || fail "--out did not write rmsnorm's output as [rows, cols] = (5, 40)"

rows=32
cols=300
step "rmsnorm_tilec autotune rmsnorm --backend emulate --export $tmp/deploy"
"$tilec" autotune rmsnorm --space "$src/examples/rmsnorm/rmsnorm.toml" --shape rows=$rows cols=$cols \
  --backend emulate -o "$tmp/tuning.toml" --export "$tmp/deploy" || fail "autotune rmsnorm --export"
[[ -s $tmp/tuning.toml ]] || fail "autotune wrote no database"
[[ -s $tmp/deploy/tuning.toml ]] || fail "--export did not copy the database into the folder"
ls -l "$tmp/deploy"
compgen -G "$tmp/deploy/*host.toml" >/dev/null || fail "--export wrote no module for the emulator (arch host)"
"$tilec" run rmsnorm --tuned "$tmp/tuning.toml" --shape rows=$rows cols=$cols --backend emulate ||
  fail "run rmsnorm --tuned"

step "rmsnorm_host $tmp/deploy $rows $cols (the runtime alone)"
"$host" "$tmp/deploy" $rows $cols || fail "rmsnorm_host on the exported modules"

step "rmsnorm_host links no LLVM and no compiler"
# (Into files first: `producer | grep -q` would fail under pipefail when grep stops early.)
ldd "$host" >"$tmp/host.ldd"
cat "$tmp/host.ldd"
if grep -i llvm "$tmp/host.ldd"; then fail "rmsnorm_host links LLVM"; fi
nm -C "$host" >"$tmp/host.nm"
if grep -E ' (llvm::|tilec::(ir|dsl|interp|codegen|kernels|backends)::)' "$tmp/host.nm" >"$tmp/host.bad"; then
  head -5 "$tmp/host.bad"
  fail "rmsnorm_host contains compiler code"
fi
nm -D "$host" >"$tmp/host.dynsym"
grep -q ' T tilec_emu_' "$tmp/host.dynsym" || fail "rmsnorm_host does not export the emulator's tilec_emu_* functions"
# And the CLI does link LLVM, so the check above is not blind.
ldd "$tilec" >"$tmp/tilec.ldd"
grep -qi llvm "$tmp/tilec.ldd" || fail "rmsnorm_tilec does not link LLVM: is the ldd check blind?"

step "rmsnorm_tilec autotune rmsnorm --prepare $tmp/plan, then rmsnorm_measure in two shards"
"$tilec" autotune rmsnorm --space "$src/examples/rmsnorm/rmsnorm.toml" --shape rows=$rows cols=$cols \
  --arch sm_90 --prepare "$tmp/plan" || fail "autotune rmsnorm --prepare"
[[ -s $tmp/plan/plan.toml ]] || fail "--prepare wrote no plan.toml"
"$measure" "$tmp/plan" --backend emulate --shard 1/2 -o "$tmp/shard1.toml" || fail "rmsnorm_measure --shard 1/2"
"$measure" "$tmp/plan" --backend emulate --shard 2/2 -o "$tmp/shard2.toml" || fail "rmsnorm_measure --shard 2/2"
"$tilec" db merge "$tmp/shard1.toml" "$tmp/shard2.toml" -o "$tmp/measured.toml" || fail "db merge of the shards"
grep -q "kernel = 'rmsnorm'" "$tmp/measured.toml" || fail "the merged database has no rmsnorm entry"
"$tilec" run rmsnorm --tuned "$tmp/measured.toml" --shape rows=$rows cols=$cols --backend emulate ||
  fail "run rmsnorm --tuned with the measured database"
# The stock tilec-measure does not know rmsnorm: it says so, and how to get one that does.
set +e
"$p/bin/tilec-measure" "$tmp/plan" --backend emulate -o "$tmp/stock.toml" >"$tmp/stock.log" 2>&1
rc=$?
set -e
cat "$tmp/stock.log"
[[ $rc -eq 2 ]] || fail "the stock tilec-measure on a plan of rmsnorm exited $rc, not 2"
grep -q "tilec_add_measure" "$tmp/stock.log" || fail "the stock tilec-measure does not point to tilec_add_measure"
ldd "$measure" >"$tmp/measure.ldd"
if grep -i llvm "$tmp/measure.ldd"; then fail "rmsnorm_measure links LLVM"; fi

step "the example without LLVM: rmsnorm_measure and rmsnorm_host only"
cmake -G Ninja -S "$src/examples/rmsnorm" -B "$tmp/example_no_llvm" -DCMAKE_PREFIX_PATH="$p" \
  -DCMAKE_DISABLE_FIND_PACKAGE_LLVM=TRUE -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" >"$tmp/configure_no_llvm.log" ||
  { cat "$tmp/configure_no_llvm.log"; fail "the example does not configure without LLVM"; }
cmake --build "$tmp/example_no_llvm" -j "$jobs" || fail "building the example without LLVM"
[[ ! -e $tmp/example_no_llvm/rmsnorm_tilec ]] || fail "rmsnorm_tilec was built without LLVM"
"$tmp/example_no_llvm/rmsnorm_measure" "$tmp/plan" --backend emulate -o "$tmp/no_llvm.toml" ||
  fail "rmsnorm_measure built without LLVM on the plan"
grep -q "kernel = 'rmsnorm'" "$tmp/no_llvm.toml" || fail "rmsnorm_measure without LLVM wrote no rmsnorm entry"

step "a runtime-only tilec (TILEC_RUNTIME_ONLY=ON, as on a GPU machine without LLVM) installs runtime and measure"
# The main build's settings, so that ccache serves the objects they share; never the
# sanitizers (this checks packaging, and their -g1 makes ccache key objects by folder, so the
# sanitizer pass would compile everything again: the plain pass's objects serve it instead).
setting() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
cmake -G Ninja -S "$src" -B "$tmp/rt_build" -DTILEC_RUNTIME_ONLY=ON -DCMAKE_BUILD_TYPE="$(setting CMAKE_BUILD_TYPE)" \
  -DTILEC_WERROR="$(setting TILEC_WERROR)" -DTILEC_SANITIZE=OFF "${launcher[@]}" \
  >"$tmp/rt_configure.log" 2>&1 || { cat "$tmp/rt_configure.log"; fail "a runtime-only tilec does not configure"; }
# What the measure component installs: tilec-measure and its libraries, and the interpreter
# (LLVM-free too, though tilec-measure does not link it).
cmake --build "$tmp/rt_build" --target tilec-measure tilec_measure_main tilec_interp tilec_c -j "$jobs" >"$tmp/rt_build.log" 2>&1 ||
  { tail -30 "$tmp/rt_build.log"; fail "building the runtime-only tilec"; }
cmake --install "$tmp/rt_build" --prefix "$tmp/rt_prefix" >"$tmp/rt_install.log" 2>&1 ||
  { cat "$tmp/rt_install.log"; fail "installing the runtime-only tilec"; }
rl=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$tmp/rt_build/CMakeCache.txt")
for f in bin/tilec-measure $rl/libtilec_measure_main.a $rl/libtilec_runtime.a $rl/cmake/tilec/tilecMeasureTargets.cmake \
         $rl/libtilec.so $rl/pkgconfig/tilec.pc $rl/cmake/tilec/tilecCTargets.cmake; do
  [[ -e $tmp/rt_prefix/$f ]] || fail "the runtime-only install has no $f"
done
for f in bin/tilec $rl/libtilec_codegen.a $rl/cmake/tilec/tilecCompilerTargets.cmake; do
  [[ ! -e $tmp/rt_prefix/$f ]] || fail "the runtime-only install has $f"
done
cmake -G Ninja -S "$src/examples/rmsnorm" -B "$tmp/example_rt" -DCMAKE_PREFIX_PATH="$tmp/rt_prefix" \
  -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" >"$tmp/configure_rt.log" ||
  { cat "$tmp/configure_rt.log"; fail "the example does not configure against the runtime-only install"; }
cmake --build "$tmp/example_rt" -j "$jobs" || fail "building the example against the runtime-only install"
[[ ! -e $tmp/example_rt/rmsnorm_tilec ]] || fail "rmsnorm_tilec was built against a tilec without its compiler"
"$tmp/example_rt/rmsnorm_measure" "$tmp/plan" --backend emulate -o "$tmp/rt.toml" ||
  fail "rmsnorm_measure built against the runtime-only install, on the plan"
grep -q "kernel = 'rmsnorm'" "$tmp/rt.toml" || fail "that rmsnorm_measure wrote no rmsnorm entry"

step "find_package(tilec COMPONENTS runtime) without LLVM"
mkdir -p "$tmp/runtime_only"
cat >"$tmp/runtime_only/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.25)
project(runtime_only CXX)
find_package(tilec CONFIG REQUIRED COMPONENTS runtime)
if(TARGET tilec::compiler OR TARGET tilec::codegen OR COMMAND tilec_add_kernels)
  message(FATAL_ERROR "the compiler targets are defined although LLVM was not found")
endif()
if(NOT TARGET tilec::c)
  message(FATAL_ERROR "the runtime component defines no tilec::c")
endif()
if(NOT tilec_runtime_FOUND OR tilec_compiler_FOUND)
  message(FATAL_ERROR "components: runtime ${tilec_runtime_FOUND}, compiler ${tilec_compiler_FOUND}")
endif()
add_executable(read_db main.cpp)
target_link_libraries(read_db PRIVATE tilec::runtime)
EOF
cat >"$tmp/runtime_only/main.cpp" <<'EOF'
#include <cstdio>
#include "runtime/tuning_db.h"
int main(int argc, char** argv) {
  tilec::rt::TuningDb db = tilec::rt::read_tuning_db(argv[1]);
  std::printf("%zu entries\n", db.entries.size());
  return db.entries.empty() ? 1 : 0;
}
EOF
# CMAKE_DISABLE_FIND_PACKAGE_LLVM: find_package(LLVM) finds nothing, as on a machine without it.
cmake -G Ninja -S "$tmp/runtime_only" -B "$tmp/runtime_only/build" -DCMAKE_PREFIX_PATH="$p" \
  -DCMAKE_DISABLE_FIND_PACKAGE_LLVM=TRUE "${launcher[@]}" || fail "a runtime-only consumer does not configure"
cmake --build "$tmp/runtime_only/build" || fail "a runtime-only consumer does not build"
"$tmp/runtime_only/build/read_db" "$tmp/deploy/tuning.toml" || fail "the runtime-only consumer"
# Asking for everything (no COMPONENTS) without LLVM fails, and says why.
mkdir -p "$tmp/all_no_llvm"
printf 'cmake_minimum_required(VERSION 3.25)\nproject(all_no_llvm CXX)\nfind_package(tilec CONFIG REQUIRED)\n' \
  >"$tmp/all_no_llvm/CMakeLists.txt"
if cmake -S "$tmp/all_no_llvm" -B "$tmp/all_no_llvm/build" -DCMAKE_PREFIX_PATH="$p" \
     -DCMAKE_DISABLE_FIND_PACKAGE_LLVM=TRUE >"$tmp/all_no_llvm.log" 2>&1; then
  fail "find_package(tilec REQUIRED) configured without LLVM"
fi
grep -q "LLVM" "$tmp/all_no_llvm.log" || { cat "$tmp/all_no_llvm.log"; fail "the failure does not name LLVM"; }

step "add_subdirectory(tilec) in a parent project: the same tilec:: names, no tests (configure only)"
mkdir -p "$tmp/subdir"
cat >"$tmp/subdir/CMakeLists.txt" <<SUBDIR
cmake_minimum_required(VERSION 3.25)
project(subdir_user CXX)
add_subdirectory("$src" tilec)
foreach(t tilec::runtime tilec::c tilec::compiler tilec::cli tilec::cli_main tilec::tilec)
  if(NOT TARGET \${t})
    message(FATAL_ERROR "add_subdirectory(tilec) defines no \${t}")
  endif()
endforeach()
if(TARGET tilec_tests OR TARGET launch_module OR TARGET bench_compile)
  message(FATAL_ERROR "a subproject tilec builds its tests, examples or benchmarks by default")
endif()
tilec_add_kernels(rmsnorm_tilec SOURCES "$src/examples/rmsnorm/rmsnorm.cpp")
add_executable(rmsnorm_host "$src/examples/rmsnorm/host.cpp")
target_link_libraries(rmsnorm_host PRIVATE tilec::runtime)
SUBDIR
cmake -G Ninja -S "$tmp/subdir" -B "$tmp/subdir/build" >"$tmp/subdir.log" 2>&1 ||
  { cat "$tmp/subdir.log"; fail "a project with add_subdirectory(tilec) does not configure"; }

step "pkg-config tilec-runtime: build and run the host program without CMake"
flags=$(PKG_CONFIG_PATH="$p/$lib/pkgconfig" pkg-config --cflags --libs tilec-runtime) || fail "pkg-config tilec-runtime"
echo "$flags"
# shellcheck disable=SC2086  # the flags are words
c++ -std=c++20 -O1 -o "$tmp/rmsnorm_host_pc" "$src/examples/rmsnorm/host.cpp" $flags || fail "building with pkg-config"
"$tmp/rmsnorm_host_pc" "$tmp/deploy" $rows $cols || fail "the pkg-config build of rmsnorm_host"

# The C ABI as a C program sees it: the version, an error that reaches the library (a folder
# that does not exist, named in the message), then the exported folder opened and closed.
cat >"$tmp/c_host.c" <<'EOF'
#include "runtime/tilec.h"
#include <stdio.h>
#include <string.h>
int main(int argc, char** argv) {
  tilec_store* store = NULL;
  if (argc != 2 || tilec_abi_version() != TILEC_ABI_VERSION) return 1;
  if (tilec_store_open("no/such/folder", "emulate", &store) != TILEC_ERROR_NOT_FOUND ||
      !strstr(tilec_last_error(), "no/such/folder")) {
    fprintf(stderr, "a missing folder: '%s'\n", tilec_last_error());
    return 1;
  }
  if (tilec_store_open(argv[1], "emulate", &store) != TILEC_OK) {
    fprintf(stderr, "%s\n", tilec_last_error());
    return 1;
  }
  printf("ABI %d, %s on %s\n", tilec_abi_version(), argv[1], tilec_store_arch(store));
  tilec_store_close(store);
  return 0;
}
EOF
# check_c_host PROGRAM: it needs libtilec.so by its soname, loads the installed one, and runs.
check_c_host() {
  readelf -d "$1" >"$tmp/c_host.dyn"
  grep -q "NEEDED.*\[libtilec\.so\.$soversion\]" "$tmp/c_host.dyn" ||
    { cat "$tmp/c_host.dyn"; fail "$1 does not need libtilec.so.$soversion"; }
  ldd "$1" >"$tmp/c_host.ldd"
  grep -q "libtilec\.so\.$soversion => $2/" "$tmp/c_host.ldd" ||
    { cat "$tmp/c_host.ldd"; fail "$1 does not load the libtilec.so installed in $2"; }
  "$1" "$tmp/deploy" || fail "$1 (the C ABI through the installed libtilec.so)"
}

step "libtilec.so: the installed file, its soname, its exports"
version=$(sed -n 's/^#define TILEC_VERSION "\([0-9.]*\)"$/\1/p' "$src/abi/version.h")
[[ $version =~ ^([0-9]+)\.([0-9]+)\.[0-9]+$ ]] || fail "no version in abi/version.h: '$version'"
# 0.x: a minor version may break the ABI, so the soname carries major.minor.
soversion=${BASH_REMATCH[1]}
[[ $soversion != 0 ]] || soversion=0.${BASH_REMATCH[2]}
[[ -f $p/$lib/libtilec.so.$version && ! -L $p/$lib/libtilec.so.$version ]] || fail "the install has no file libtilec.so.$version"
[[ $(readlink "$p/$lib/libtilec.so.$soversion") == "libtilec.so.$version" ]] ||
  fail "libtilec.so.$soversion is not a link to libtilec.so.$version"
[[ $(readlink "$p/$lib/libtilec.so") == "libtilec.so.$soversion" ]] || fail "libtilec.so is not a link to libtilec.so.$soversion"
readelf -d "$p/$lib/libtilec.so.$version" >"$tmp/libtilec.dyn"
grep "SONAME\|NEEDED" "$tmp/libtilec.dyn"
grep -q "SONAME.*\[libtilec\.so\.$soversion\]" "$tmp/libtilec.dyn" || fail "libtilec.so's soname is not libtilec.so.$soversion"
if grep -qi "NEEDED.*llvm" "$tmp/libtilec.dyn"; then fail "libtilec.so links LLVM"; fi
nm -D --defined-only "$p/$lib/libtilec.so" >"$tmp/libtilec.nm"
grep -q ' T tilec_store_open$' "$tmp/libtilec.nm" || fail "libtilec.so does not export tilec_store_open"
grep -q ' T tilec_emu_' "$tmp/libtilec.nm" || fail "libtilec.so does not export the emulator's tilec_emu_* functions"

step "pkg-config tilec: a C11 program linked against the installed libtilec.so"
pc() { PKG_CONFIG_PATH="$1/pkgconfig" pkg-config "${@:2}" tilec; }
cflags=$(pc "$p/$lib" --cflags) || fail "pkg-config --cflags tilec"
libs=$(pc "$p/$lib" --libs) || fail "pkg-config --libs tilec"
echo "$cflags $libs"
[[ $(pc "$p/$lib" --modversion) == "$version" ]] || fail "tilec.pc's version is not $version"
# shellcheck disable=SC2086  # the flags are words
cc -std=c11 -Wall -Wextra -pedantic -Werror $cflags -o "$tmp/c_host_pc" "$tmp/c_host.c" $libs -Wl,-rpath,"$p/$lib" ||
  fail "building a C program with pkg-config tilec"
check_c_host "$tmp/c_host_pc" "$p/$lib"

step "find_package(tilec COMPONENTS c): a C project linking tilec::c, no other package found"
mkdir -p "$tmp/c_user"
cp "$tmp/c_host.c" "$tmp/c_user/"
cat >"$tmp/c_user/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.25)
project(c_user C)
find_package(tilec CONFIG REQUIRED COMPONENTS c)
if(TARGET tilec::runtime OR TARGET tilec::compiler)
  message(FATAL_ERROR "find_package(tilec COMPONENTS c) defined the C++ targets")
endif()
add_executable(c_host c_host.c)
set_target_properties(c_host PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
target_compile_options(c_host PRIVATE -Wall -Wextra -pedantic -Werror)
target_link_libraries(c_host PRIVATE tilec::c)
EOF
# fmt, toml++ and LLVM hidden: the C ABI needs none of them.
cmake -G Ninja -S "$tmp/c_user" -B "$tmp/c_user/build" -DCMAKE_PREFIX_PATH="$p" -DCMAKE_DISABLE_FIND_PACKAGE_fmt=TRUE \
  -DCMAKE_DISABLE_FIND_PACKAGE_tomlplusplus=TRUE -DCMAKE_DISABLE_FIND_PACKAGE_LLVM=TRUE >"$tmp/c_user.log" 2>&1 ||
  { cat "$tmp/c_user.log"; fail "a C project with find_package(tilec COMPONENTS c) does not configure"; }
cmake --build "$tmp/c_user/build" || fail "a C project linking tilec::c does not build"
check_c_host "$tmp/c_user/build/c_host" "$p/$lib"

step "db export: the winners of the database autotune wrote, exported again without measuring"
"$tilec" db export "$tmp/tuning.toml" --to "$tmp/exported" || fail "rmsnorm_tilec db export"
compgen -G "$tmp/exported/rmsnorm-*host.toml" >/dev/null || fail "db export wrote no module for the emulator"
[[ -f $tmp/exported/rmsnorm.kernel.toml ]] || fail "db export wrote no kernel card"

step "the tutorial's C host (examples/rmsnorm/host_c.c): rmsnorm by name through the installed libtilec.so"
# shellcheck disable=SC2086  # the flags are words
cc -std=c11 -Wall -Wextra -pedantic -Werror $cflags -o "$tmp/rmsnorm_c" "$src/examples/rmsnorm/host_c.c" $libs -lm \
  -Wl,-rpath,"$p/$lib" || fail "building examples/rmsnorm/host_c.c with pkg-config tilec"
"$tmp/rmsnorm_c" "$tmp/exported" $rows $cols || fail "rmsnorm_c on the exported folder"
"$tmp/rmsnorm_c" "$tmp/exported" 50 $cols || fail "rmsnorm_c at another row count (the nearest tuned key)"
# The tutorial's Python host runs over this folder with the installed wheel
# (tests/install/test_hosts_installed.sh, where NumPy is installed).
rm -rf "$build/rmsnorm_deploy"
cp -r "$tmp/exported" "$build/rmsnorm_deploy"

step "the runtime-only install's libtilec.so, through its own tilec.pc"
rt_flags=$(pc "$tmp/rt_prefix/$rl" --cflags --libs) || fail "pkg-config tilec on the runtime-only install"
# shellcheck disable=SC2086  # the flags are words
cc -std=c11 -o "$tmp/c_host_rt" "$tmp/c_host.c" $rt_flags -Wl,-rpath,"$tmp/rt_prefix/$rl" ||
  fail "building a C program against the runtime-only install"
check_c_host "$tmp/c_host_rt" "$tmp/rt_prefix/$rl"

echo
echo "install test passed in $((SECONDS - start))s"
