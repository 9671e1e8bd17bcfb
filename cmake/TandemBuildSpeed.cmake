# SPDX-License-Identifier: Apache-2.0
# Build speed, never build requirements (docs/ci.md has the measurements):
# - ccache is used when it is installed and no compiler launcher was given (TANDEM_CCACHE=OFF: never).
# - Precompiled headers (TANDEM_PCH, default ON) for the tool and the tests, whose every file includes
#   CLI11 or gtest beside nlohmann/json, spdlog and tandem's core headers: 15-27% less compile time per file.
#   Not for the library: loading the 125 MB header costs a small file more than it saves (core/tensor.cpp
#   3.3 s with it, 1.9 s without; measured 2026-12-03, docs/ci.md).
#
# - Unity builds of the library (TANDEM_UNITY_LIBRARY, default OFF; scripts/test.sh and .ci/run's sanitizer
#   builds turn it on):
#   each object library of src/ and backends/cpu compiles its sources 8 to a translation unit, so the
#   headers and templates they share are parsed and instantiated once per 8 files (an 8-file batch of
#   src/cnn under the sanitizers: 32 CPU-s instead of 50). Sources must then not define the same name in
#   their anonymous namespaces (.ci/run rebuilds without unity, loudly, when a clash breaks the build).
#
#   tandem_precompile(tandem_cli CLI/CLI.hpp)   # the family's headers + CLI11's
option(TANDEM_PCH "Precompile the common heavy headers of each target" ON)
option(TANDEM_UNITY_LIBRARY "Compile the library's sources in batches of 8 (unity build)" OFF)
option(TANDEM_CCACHE "Use ccache when it is installed" ON)

if(TANDEM_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  find_program(TANDEM_CCACHE_PROGRAM ccache)
  if(TANDEM_CCACHE_PROGRAM)
    # pch_defines,time_macros: without them ccache cannot cache a file compiled with a precompiled header.
    # CCACHE_BASEDIR: paths below the source tree hash alike in every checkout of it.
    set(_tandem_launcher ${CMAKE_COMMAND} -E env CCACHE_SLOPPINESS=pch_defines,time_macros
                         CCACHE_BASEDIR=${PROJECT_SOURCE_DIR} ${TANDEM_CCACHE_PROGRAM})
    set(CMAKE_CXX_COMPILER_LAUNCHER ${_tandem_launcher})
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${_tandem_launcher})
    message(STATUS "tandem: ccache ${TANDEM_CCACHE_PROGRAM}")
  endif()
endif()

# The headers nearly every file of the library, the tool and the tests includes.
set(TANDEM_PCH_COMMON
    <algorithm> <cmath> <cstdint> <cstring> <functional> <map> <memory> <mutex> <span> <string>
    <unordered_map> <vector> <nlohmann/json.hpp> <spdlog/spdlog.h>
    "${PROJECT_SOURCE_DIR}/include/tandem/core/error.h" "${PROJECT_SOURCE_DIR}/include/tandem/core/tensor.h"
    "${PROJECT_SOURCE_DIR}/include/tandem/core/backend.h" "${PROJECT_SOURCE_DIR}/include/tandem/ops/ops.h")

# tandem_precompile(<target> [extra headers...]): the common set plus the target family's own headers,
# for C++ sources only (CUDA sources of the same target compile without it).
function(tandem_precompile target)
  if(NOT TANDEM_PCH)
    return()
  endif()
  set(headers ${TANDEM_PCH_COMMON} ${ARGN})
  list(TRANSFORM headers PREPEND "$<$<COMPILE_LANGUAGE:CXX>:")
  list(TRANSFORM headers APPEND ">")
  target_precompile_headers(${target} PRIVATE ${headers})
  _tandem_pch_for_ccache(${target})
endfunction()

# tandem_precompile_reuse(<target> <donor>): <target> uses <donor>'s precompiled header (same flags needed).
function(tandem_precompile_reuse target donor)
  if(TANDEM_PCH)
    target_precompile_headers(${target} REUSE_FROM ${donor})
    _tandem_pch_for_ccache(${target})
  endif()
endfunction()

# ccache reads a precompiled header only through the preprocessor's marker (ccache manual, "Precompiled
# headers"); in a plain compile the flag changes nothing.
function(_tandem_pch_for_ccache target)
  if(TANDEM_CCACHE_PROGRAM AND CMAKE_CXX_COMPILER_LAUNCHER)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-fpch-preprocess>)
  endif()
endfunction()

# tandem_unity(<target>): with TANDEM_UNITY_LIBRARY, <target> is built as a unity build. A type from one
# file's anonymous namespace held by another file's class is a false -Wsubobject-linkage there.
function(tandem_unity target)
  if(TANDEM_UNITY_LIBRARY)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-subobject-linkage>)
  endif()
endfunction()
