# The folders of tilec, why each exists, and the folders each may include headers from
# (besides its own).
# Dependencies point one way; the runtime side (abi, runtime) never sees the compiler, and only
# the code that interprets (fuzz, tools, bench, tests) sees the interpreter.
# docs/ARCHITECTURE.md explains each edge; change both together.
set(TILEC_LAYER_RULES
  "abi:"  # the bottom layer: what compiler and runtime share (manifest, dtypes, errors, hash)
  "ir:abi"  # the tile IR and its passes: what every front end builds and every back end reads
  "dsl:ir abi"  # the embedded C++ DSL users write kernels in; it only builds IR
  "runtime:abi"  # the host runtime a shipped program links: no compiler, no LLVM
  "launch:ir runtime abi"  # host buffers, arguments, grids, specialize(), the Launcher interface every backend implements
  "interp:launch ir abi"  # the IR interpreter: the semantic oracle, used only where code interprets
  "templates:dsl launch ir runtime abi"  # the kernel templates (kernels with problems and references, the registry): no LLVM
  "measure:templates dsl launch ir runtime abi"  # checking and timing compiled configs on a machine without the compiler
  "codegen:ir abi"  # the SIMT lowering to LLVM IR, PTX and emulator code: the only LLVM user
  "backends:templates codegen launch runtime dsl ir abi"  # where compiled code meets the runtime: launchers, jit, module cache and builder
  "autotune:measure backends templates codegen dsl launch ir runtime abi"  # the tuner as a library and its search spaces
  "fuzz:autotune backends templates codegen interp launch ir runtime abi"  # the differential fuzzer (interpreter vs compiled code)
  "tools:measure fuzz autotune backends templates codegen interp launch dsl ir runtime abi"  # the tilec command line over all of the above
  "examples:runtime abi"  # host programs a user would write: the runtime only
  "bench:measure templates backends codegen interp launch dsl ir runtime abi"  # benchmarks, and gpu_bench for the GPU machine
  "tests:measure tools fuzz autotune backends templates codegen interp launch dsl ir runtime abi") # everything

# Headers private to a folder inside a top-level one, as "HEADER:FOLDER": only files under
# FOLDER may include HEADER.
set(TILEC_PRIVATE_HEADERS
  "runtime/emulator/internal.h:runtime/emulator"  # the emulator's own types and shared helpers
  "dsl/internal.h:dsl")  # the DSL's live-tile tracker and its typing and broadcasting rules

# Fails configuration, naming the file, the line and the edge, when a source includes a
# header from a folder its rule does not allow, or a private header from outside its folder.
function(tilec_check_layer_rules)
  set(known "")
  foreach(rule IN LISTS TILEC_LAYER_RULES)
    string(REGEX MATCH "^[a-z_]+" folder "${rule}")
    list(APPEND known ${folder})
  endforeach()
  set(violations "")
  foreach(rule IN LISTS TILEC_LAYER_RULES)
    string(REGEX MATCH "^[a-z_]+" folder "${rule}")
    string(REGEX REPLACE "^[a-z_]+:" "" allowed "${rule}")
    separate_arguments(allowed UNIX_COMMAND "${allowed}")
    list(APPEND allowed ${folder})
    list(JOIN allowed " " allowed_text)
    file(GLOB_RECURSE files CONFIGURE_DEPENDS
      ${PROJECT_SOURCE_DIR}/${folder}/*.h ${PROJECT_SOURCE_DIR}/${folder}/*.cpp ${PROJECT_SOURCE_DIR}/${folder}/*.c)
    foreach(file IN LISTS files)
      file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${file})
      # examples/rmsnorm/ is an out-of-tree project (built against an installed tilec, never by
      # this build): its kernel includes dsl/ and templates/ as every user kernel does.
      if(rel MATCHES "^examples/rmsnorm/")
        continue()
      endif()
      file(STRINGS ${file} includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"[a-z_]+/")
      foreach(line IN LISTS includes)
        string(REGEX MATCH "\"([a-z_]+)/" _ "${line}")
        set(target "${CMAKE_MATCH_1}")
        if(target IN_LIST known AND NOT target IN_LIST allowed)
          string(STRIP "${line}" line)
          list(APPEND violations "  ${rel}: ${line} (${folder}/ may include only: ${allowed_text})")
        endif()
        string(REGEX MATCH "\"([^\"]+)\"" _ "${line}")
        set(header "${CMAKE_MATCH_1}")
        foreach(private IN LISTS TILEC_PRIVATE_HEADERS)
          string(REGEX MATCH "^([^:]+):(.+)$" _ "${private}")
          set(private_header "${CMAKE_MATCH_1}")
          set(private_folder "${CMAKE_MATCH_2}")
          if(header STREQUAL private_header AND NOT rel MATCHES "^${private_folder}/")
            string(STRIP "${line}" line)
            list(APPEND violations "  ${rel}: ${line} (${header} is private to ${private_folder}/)")
          endif()
        endforeach()
      endforeach()
    endforeach()
  endforeach()
  # Every top-level folder with C++ sources must have a rule, so a new folder is not unchecked.
  file(GLOB entries RELATIVE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/*)
  foreach(entry IN LISTS entries)
    if(IS_DIRECTORY ${PROJECT_SOURCE_DIR}/${entry} AND NOT entry MATCHES "^(\\.|build|cmake$|docs$|configs$|scripts$)")
      file(GLOB_RECURSE sources ${PROJECT_SOURCE_DIR}/${entry}/*.cpp ${PROJECT_SOURCE_DIR}/${entry}/*.h)
      if(sources AND NOT entry IN_LIST known)
        list(APPEND violations "  ${entry}/ has C++ sources but no rule in cmake/LayerRules.cmake")
      endif()
    endif()
  endforeach()
  if(violations)
    list(JOIN violations "\n" text)
    message(FATAL_ERROR "includes across a forbidden folder edge (cmake/LayerRules.cmake):\n${text}")
  endif()
endfunction()

# Fails configuration when one of `targets` links a library matching `pattern` (their direct
# link edges): the link-graph side of the rules above. `why` ends the message.
function(tilec_forbid_links pattern why)
  foreach(target IN LISTS ARGN)
    get_target_property(libs ${target} LINK_LIBRARIES)
    foreach(lib IN LISTS libs)
      if(lib MATCHES "${pattern}")
        message(FATAL_ERROR "${target} links ${lib}; ${why}")
      endif()
    endforeach()
  endforeach()
endfunction()
