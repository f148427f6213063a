# Install rules, the exported CMake package and the build tree's tilec:: names; included at
# the end of the top-level CMakeLists.txt, once every target exists.
#
#   cmake --install build --prefix PREFIX
#     PREFIX/include/tilec/<folder>/*.h|*.def     headers, included as "ir/ir.h" etc. (not the lowering's own)
#     PREFIX/lib/libtilec_*.a                     the static libraries
#     PREFIX/lib/libtilec.so.0.1[.0]              the C ABI (include/tilec/runtime/tilec.h), soname libtilec.so.0.1
#     PREFIX/bin/tilec                            the CLI
#     PREFIX/bin/tilec-measure                    times a measurement plan (no LLVM)
#     PREFIX/lib/cmake/tilec/                     find_package(tilec CONFIG)
#     PREFIX/lib/pkgconfig/tilec-runtime.pc       the runtime for non-CMake builds
#     PREFIX/lib/pkgconfig/tilec.pc               the C ABI (libtilec.so) for non-CMake builds
#     PREFIX/lib/tilec/tilec_emu.dynlist          the symbols its link flag exports
#
# Four export sets: tilecCTargets (c: libtilec.so, the C ABI; needs nothing, so a C program
# can use find_package(tilec COMPONENTS c) alone; the runtime component includes it),
# and one per component of the package: tilecRuntimeTargets (abi, runtime),
# tilecMeasureTargets (ir, dsl, launch, interp, templates, measure, measure_main, tilec-measure; no LLVM
# either) and tilecCompilerTargets (the rest), so a consumer without LLVM can use
# find_package(tilec COMPONENTS runtime measure). A runtime-only build (TILEC_RUNTIME_ONLY)
# installs all but the compiler's.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(TILEC_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/tilec CACHE STRING
    "Where the tilec CMake package is installed, relative to the prefix")
mark_as_advanced(TILEC_INSTALL_CMAKEDIR)

# name in the build -> name after tilec:: (folder order: runtime side first)
set(tilec_runtime_targets tilec_abi tilec_runtime)
set(tilec_measure_libraries tilec_ir tilec_dsl tilec_launch tilec_interp tilec_templates tilec_measure tilec_measure_main)
set(tilec_compiler_libraries "")
if(NOT TILEC_RUNTIME_ONLY)
  set(tilec_compiler_libraries tilec_codegen tilec_backends tilec_autotune tilec_fuzz tilec_cli tilec_cli_main)
  # What a program that builds kernels links: the DSL, the IR and its interpreter, the launch
  # layer, the kernels and their registry, codegen (LLVM), the backends and the runtime.
  add_library(tilec_compiler INTERFACE)
  target_link_libraries(tilec_compiler INTERFACE tilec_dsl tilec_ir tilec_launch tilec_interp tilec_templates tilec_codegen
                        tilec_backends tilec_autotune tilec_runtime)
endif()

foreach(target IN LISTS tilec_runtime_targets tilec_measure_libraries tilec_compiler_libraries)
  string(REGEX REPLACE "^tilec_" "" export_name ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${export_name})
  # The headers include each other from the root ("ir/ir.h"): the checkout in the build tree,
  # include/tilec once installed (and include, for "tilec/ir/ir.h").
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/tilec>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  add_library(tilec::${export_name} ALIAS ${target})
endforeach()
# tilec::c: libtilec.so, for C programs (and any language with a C FFI). A C program compiles
# its header, "runtime/tilec.h" (or "tilec/runtime/tilec.h"), with no C++ flags.
set_target_properties(tilec_c PROPERTIES EXPORT_NAME c)
target_include_directories(tilec_c PUBLIC
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/tilec>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
add_library(tilec::c ALIAS tilec_c)
set_target_properties(tilec-measure PROPERTIES EXPORT_NAME tilec-measure)
add_executable(tilec::tilec-measure ALIAS tilec-measure)
if(NOT TILEC_RUNTIME_ONLY)
  set_target_properties(tilec_compiler PROPERTIES EXPORT_NAME compiler)
  add_library(tilec::compiler ALIAS tilec_compiler)
  set_target_properties(tilec PROPERTIES EXPORT_NAME tilec)
  add_executable(tilec::tilec ALIAS tilec)
endif()

# The headers are C++20; consumers compile them with at least that.
target_compile_features(tilec_abi PUBLIC cxx_std_20)
# Emulated kernels (dlopened shared libraries) call the emulator's tilec_emu_* functions,
# so every executable that links the runtime exports them (runtime/emulator/emulator.h).
target_link_options(tilec_runtime INTERFACE "LINKER:--export-dynamic-symbol=tilec_emu_*")

# An instrumented build (TILEC_SANITIZE) installs instrumented libraries: whatever links them
# must link the sanitizers' runtimes too (in the tree, add_link_options does that already).
set(TILEC_PC_SANITIZE "")
if(TILEC_SANITIZE)
  target_link_options(tilec_abi INTERFACE $<INSTALL_INTERFACE:-fsanitize=address,undefined>)
  target_link_options(tilec_c INTERFACE $<INSTALL_INTERFACE:-fsanitize=address,undefined>)
  set(TILEC_PC_SANITIZE " -fsanitize=address,undefined")
endif()

# codegen's headers include LLVM's: its LLVM include folder is the build's only; an
# installed tilec::codegen gets the consumer's LLVM_INCLUDE_DIRS from tilecConfig.cmake, so
# the package does not hard-code where LLVM lived on the machine that built it.
foreach(prop INTERFACE_INCLUDE_DIRECTORIES INTERFACE_SYSTEM_INCLUDE_DIRECTORIES)
  if(TILEC_RUNTIME_ONLY)
    break()
  endif()
  get_target_property(dirs tilec_codegen ${prop})
  if(dirs)
    set(kept "")
    foreach(dir IN LISTS dirs)
      if(dir IN_LIST LLVM_INCLUDE_DIRS)
        list(APPEND kept "$<BUILD_INTERFACE:${dir}>")
      else()
        list(APPEND kept "${dir}")
      endif()
    endforeach()
    set_property(TARGET tilec_codegen PROPERTY ${prop} "${kept}")
  endif()
endforeach()

# tilec_add_kernels(NAME SOURCES ...) and tilec_add_measure(NAME SOURCES ...): here for
# add_subdirectory/FetchContent users; the installed package includes the same files from
# tilecConfig.cmake.
include(${CMAKE_CURRENT_LIST_DIR}/tilecMeasure.cmake)
if(NOT TILEC_RUNTIME_ONLY)
  include(${CMAKE_CURRENT_LIST_DIR}/tilecKernels.cmake)
endif()

# --- install
# fmt and toml++ taken header-only from TILEC_DEPS_INCLUDE (no packages here): the exported
# targets would name packages a consumer cannot find, so this build installs nothing.
if(TILEC_HEADER_ONLY_DEPS)
  message(STATUS "tilec: fmt or tomlplusplus comes from TILEC_DEPS_INCLUDE, not a package: no install rules "
                 "(install libfmt-dev and libtomlplusplus-dev to install this build)")
  return()
endif()
set(tilec_header_folders abi runtime ir dsl launch interp templates measure)
if(NOT TILEC_RUNTIME_ONLY)
  list(APPEND tilec_header_folders codegen backends autotune fuzz tools)
endif()
# Headers internal to the lowering (the Lowering class, which includes LLVM's headers, and the
# pipeline plan it reads) and to the emulator (its own types, runtime/emulator/internal.h): no
# interface, not installed. An installed header that included one would not compile once
# installed, so configuration fails on it.
set(tilec_internal_headers codegen/lowering.h codegen/pipeline_plan.h runtime/emulator/internal.h)
# The DSL's internal header (what its source files share: the live-tile tracker and the rules
# every op applies) is not installed either.
list(APPEND tilec_internal_headers dsl/internal.h)
set(tilec_internal_excludes "")
set(tilec_internal_alternatives "")
foreach(h IN LISTS tilec_internal_headers)
  string(REPLACE "." "\\." h_re "${h}")
  list(APPEND tilec_internal_excludes REGEX "/${h_re}$" EXCLUDE)
  list(APPEND tilec_internal_alternatives "${h_re}")
endforeach()
string(REPLACE ";" "|" tilec_internal_alternatives "${tilec_internal_alternatives}")
foreach(folder IN LISTS tilec_header_folders)
  file(GLOB_RECURSE installed_headers RELATIVE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/${folder}/*.h)
  foreach(h IN LISTS installed_headers)
    if(NOT h IN_LIST tilec_internal_headers)
      file(STRINGS ${PROJECT_SOURCE_DIR}/${h} bad REGEX "^#include \"(${tilec_internal_alternatives})\"")
      if(bad)
        message(FATAL_ERROR "${h} is installed but includes an internal header that is not: ${bad}")
      endif()
    endif()
  endforeach()
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${folder}/
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tilec/${folder}
          COMPONENT tilec_development
          FILES_MATCHING PATTERN "*.h" PATTERN "*.def"
          PATTERN "corpus" EXCLUDE    # fuzz/: the fuzzers' inputs and targets are not the library
          PATTERN "targets" EXCLUDE
          ${tilec_internal_excludes})
endforeach()

# libtilec.so.0.1.0 and its soname link in the runtime component (what a program needs to run),
# the libtilec.so link a linker looks for with the headers.
install(TARGETS tilec_c EXPORT tilecCTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT tilec_runtime NAMELINK_COMPONENT tilec_development)
install(EXPORT tilecCTargets NAMESPACE tilec:: DESTINATION ${TILEC_INSTALL_CMAKEDIR}
        COMPONENT tilec_development)
install(TARGETS ${tilec_runtime_targets} EXPORT tilecRuntimeTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT tilec_development)
install(TARGETS ${tilec_measure_libraries} EXPORT tilecMeasureTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT tilec_development)
install(TARGETS tilec-measure EXPORT tilecMeasureTargets
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT tilec_tools)
install(EXPORT tilecRuntimeTargets NAMESPACE tilec:: DESTINATION ${TILEC_INSTALL_CMAKEDIR}
        COMPONENT tilec_development)
install(EXPORT tilecMeasureTargets NAMESPACE tilec:: DESTINATION ${TILEC_INSTALL_CMAKEDIR}
        COMPONENT tilec_development)
if(NOT TILEC_RUNTIME_ONLY)
  install(TARGETS ${tilec_compiler_libraries} tilec_compiler EXPORT tilecCompilerTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT tilec_development)
  install(TARGETS tilec EXPORT tilecCompilerTargets
          RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT tilec_tools)
  install(EXPORT tilecCompilerTargets NAMESPACE tilec:: DESTINATION ${TILEC_INSTALL_CMAKEDIR}
          COMPONENT tilec_development)
endif()

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/tilecConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/cmake/tilecConfig.cmake
                              INSTALL_DESTINATION ${TILEC_INSTALL_CMAKEDIR})
# 0.x: a minor version may break the API, so only the same minor version is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cmake/tilecConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cmake/tilecConfig.cmake ${PROJECT_BINARY_DIR}/cmake/tilecConfigVersion.cmake
              ${CMAKE_CURRENT_LIST_DIR}/tilecKernels.cmake ${CMAKE_CURRENT_LIST_DIR}/tilecMeasure.cmake
        DESTINATION ${TILEC_INSTALL_CMAKEDIR} COMPONENT tilec_development)

# pkg-config for the runtime alone (prefix relative to the .pc file, so the tree can move).
file(RELATIVE_PATH TILEC_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(${CMAKE_CURRENT_LIST_DIR}/tilec-runtime.pc.in ${PROJECT_BINARY_DIR}/cmake/tilec-runtime.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/cmake/tilec-runtime.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT tilec_development)
# pkg-config for the C ABI: libtilec.so and tilec.h.
configure_file(${CMAKE_CURRENT_LIST_DIR}/tilec.pc.in ${PROJECT_BINARY_DIR}/cmake/tilec.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/cmake/tilec.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT tilec_development)
# The symbols its link flag exports (-Wl,--dynamic-list=...): the emulator's tilec_emu_*.
install(FILES ${CMAKE_CURRENT_LIST_DIR}/tilec_emu.dynlist
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/tilec COMPONENT tilec_development)
