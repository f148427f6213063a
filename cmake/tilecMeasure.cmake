# tilec_add_measure(NAME SOURCES src...)
#
# Builds the executable NAME: `tilec-measure` (it times a plan that `tilec autotune --prepare`
# wrote; README "Compile here, measure there") over tilec's own kernels plus those the SOURCES
# register with TILEC_REGISTER_KERNEL (kernels/registry.h). It needs no LLVM: the kernels'
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

function(tilec_add_measure name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "SOURCES")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "tilec_add_measure(${name}): unexpected arguments: ${arg_UNPARSED_ARGUMENTS} "
                        "(usage: tilec_add_measure(NAME SOURCES src...))")
  endif()
  if(NOT arg_SOURCES)
    message(FATAL_ERROR "tilec_add_measure(${name}): no SOURCES (the files that register kernels with "
                        "TILEC_REGISTER_KERNEL)")
  endif()
  if(NOT TARGET tilec::measure_main)
    message(FATAL_ERROR "tilec_add_measure(${name}) needs tilec::measure_main: "
                        "find_package(tilec CONFIG REQUIRED COMPONENTS measure)")
  endif()
  add_executable(${name} ${arg_SOURCES})
  target_link_libraries(${name} PRIVATE tilec::measure_main)
  target_compile_features(${name} PRIVATE cxx_std_20)
  # Emulated modules (--backend emulate) are shared libraries calling the emulator's
  # tilec_emu_* functions, which this executable must export (runtime/emulator.h).
  target_link_options(${name} PRIVATE "LINKER:--export-dynamic-symbol=tilec_emu_*")
  # Source locations in the kernels' IR relative to the calling project, as tilec_add_kernels
  # records them: the plan's modules carry the IR's hash, which must match.
  if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(${name} PRIVATE "-ffile-prefix-map=${CMAKE_CURRENT_SOURCE_DIR}/=")
  endif()
endfunction()
