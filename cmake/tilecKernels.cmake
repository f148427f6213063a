# tilec_add_kernels(NAME SOURCES src...)
#
# Builds the executable NAME: the whole `tilec` CLI (list, ir, compile, run, bench, autotune,
# fuzz) over tilec's own kernels plus those the SOURCES register with TILEC_REGISTER_KERNEL
# (templates/registry.h). Like Halide's generator executables, main() comes from a library
# (tilec::cli_main) and the user's sources are compiled into the executable itself, so their
# static registrars always run (an object in a static library nobody references would be
# dropped by the linker, and its kernels with it).
#
#   find_package(tilec CONFIG REQUIRED)          # or add_subdirectory(tilec) / FetchContent
#   tilec_add_kernels(my_tilec SOURCES my_kernel.cpp)
#   # ./my_tilec list; ./my_tilec run my_kernel --backend emulate; ...
#
# Defined by the installed package (tilecConfig.cmake) and by tilec's own CMakeLists.txt.
include_guard(GLOBAL)
include(${CMAKE_CURRENT_LIST_DIR}/tilecMeasure.cmake) # _tilec_kernels_executable

function(tilec_add_kernels name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "SOURCES")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "tilec_add_kernels(${name}): unexpected arguments: ${arg_UNPARSED_ARGUMENTS} "
                        "(usage: tilec_add_kernels(NAME SOURCES src...))")
  endif()
  if(NOT TARGET tilec::cli_main OR NOT TARGET tilec::compiler)
    message(FATAL_ERROR "tilec_add_kernels(${name}) needs tilec's compiler (tilec::cli_main, tilec::compiler): "
                        "find_package(tilec CONFIG REQUIRED COMPONENTS compiler), which needs LLVM 19.1 and CLI11")
  endif()
  _tilec_kernels_executable(tilec_add_kernels ${name} "${arg_SOURCES}" "tilec::cli_main;tilec::compiler")
endfunction()
