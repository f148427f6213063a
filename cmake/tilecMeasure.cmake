# tilec_add_measure(NAME SOURCES src...)
#
# Builds the executable NAME: `tilec-measure` (it times a plan that `tilec autotune --prepare`
# wrote; docs/AUTOTUNING.md "Compile here, measure there") over tilec's own kernels plus those the SOURCES
# register with TILEC_REGISTER_KERNEL (templates/registry.h). It needs no LLVM: the kernels'
# sources build the IR with the DSL, the problems and their references on the host, and the
# modules come compiled in the plan. As with tilec_add_kernels, main() comes from a library
# (tilec::measure_main) and the sources are compiled into the executable, so their
# registrations always run.
#
#   find_package(tilec CONFIG REQUIRED COMPONENTS measure)   # on a GPU machine without LLVM
#   tilec_add_measure(my_measure SOURCES my_kernel.cpp)
#   # ./my_measure plan/ --backend cuda --shard 1/4 -o shard1.toml
#
# Defined by the installed package (tilecConfig.cmake, component measure) and by tilec's own
# CMakeLists.txt.
include_guard(GLOBAL)

# The executable `name` of a user's kernels: `sources` compiled into it (so their registrations
# run) and linked with `libs`, exporting the emulator's functions. Shared by tilec_add_measure
# and tilec_add_kernels (cmake/tilecKernels.cmake); `fn` names the caller in errors.
function(_tilec_kernels_executable fn name sources libs)
  if(NOT sources)
    message(FATAL_ERROR "${fn}(${name}): no SOURCES (the files that register kernels with TILEC_REGISTER_KERNEL)")
  endif()
  add_executable(${name} ${sources})
  target_link_libraries(${name} PRIVATE ${libs})
  target_compile_features(${name} PRIVATE cxx_std_20)
  # Emulated modules are shared libraries calling the emulator's tilec_emu_* functions, which
  # this executable must export (runtime/emulator/emulator.h).
  target_link_options(${name} PRIVATE "LINKER:--export-dynamic-symbol=tilec_emu_*")
  # Source locations recorded in the kernels' IR relative to the calling project, so printed
  # IR (which the module cache and a plan's modules hash) does not depend on where it lives.
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${name} PRIVATE "-ffile-prefix-map=${CMAKE_CURRENT_SOURCE_DIR}/=")
  endif()
endfunction()

function(tilec_add_measure name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "SOURCES")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "tilec_add_measure(${name}): unexpected arguments: ${arg_UNPARSED_ARGUMENTS} "
                        "(usage: tilec_add_measure(NAME SOURCES src...))")
  endif()
  if(NOT TARGET tilec::measure_main)
    message(FATAL_ERROR "tilec_add_measure(${name}) needs tilec::measure_main: "
                        "find_package(tilec CONFIG REQUIRED COMPONENTS measure)")
  endif()
  _tilec_kernels_executable(tilec_add_measure ${name} "${arg_SOURCES}" tilec::measure_main)
endfunction()
