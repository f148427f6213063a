# The folders of tilec and the folders each may include headers from (besides its own).
# Dependencies point one way; the runtime side (abi, runtime) never sees the compiler.
# docs/ARCHITECTURE.md explains each edge; change both together.
set(TILEC_LAYER_RULES
  "abi:"
  "ir:abi"
  "dsl:ir abi"
  "interp:ir abi"
  "runtime:abi"
  "kernels:dsl interp ir runtime abi"
  "codegen:ir abi"
  "backends:kernels codegen runtime interp dsl ir abi"
  "autotune:ir runtime abi"
  "fuzz:autotune backends kernels codegen interp ir runtime abi"
  "tools:fuzz autotune backends kernels codegen interp dsl ir runtime abi"
  "examples:runtime abi"
  "bench:kernels backends codegen interp dsl ir runtime abi"
  "tests:tools fuzz autotune backends kernels codegen interp dsl ir runtime abi")

# Fails configuration, naming the file, the line and the edge, when a source includes a
# header from a folder its rule does not allow.
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
      ${CMAKE_SOURCE_DIR}/${folder}/*.h ${CMAKE_SOURCE_DIR}/${folder}/*.cpp ${CMAKE_SOURCE_DIR}/${folder}/*.c)
    foreach(file IN LISTS files)
      file(STRINGS ${file} includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"[a-z_]+/")
      foreach(line IN LISTS includes)
        string(REGEX MATCH "\"([a-z_]+)/" _ "${line}")
        set(target "${CMAKE_MATCH_1}")
        if(target IN_LIST known AND NOT target IN_LIST allowed)
          file(RELATIVE_PATH rel ${CMAKE_SOURCE_DIR} ${file})
          string(STRIP "${line}" line)
          list(APPEND violations "  ${rel}: ${line} (${folder}/ may include only: ${allowed_text})")
        endif()
      endforeach()
    endforeach()
  endforeach()
  # Every top-level folder with C++ sources must have a rule, so a new folder is not unchecked.
  file(GLOB entries RELATIVE ${CMAKE_SOURCE_DIR} ${CMAKE_SOURCE_DIR}/*)
  foreach(entry IN LISTS entries)
    if(IS_DIRECTORY ${CMAKE_SOURCE_DIR}/${entry} AND NOT entry MATCHES "^(\\.|build|cmake$|docs$|configs$|scripts$)")
      file(GLOB_RECURSE sources ${CMAKE_SOURCE_DIR}/${entry}/*.cpp ${CMAKE_SOURCE_DIR}/${entry}/*.h)
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
