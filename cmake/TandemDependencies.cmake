# SPDX-License-Identifier: Apache-2.0
# System packages (Debian names in scripts/setup.sh). Nothing is vendored or downloaded.
find_package(Threads REQUIRED)
find_package(OpenMP REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(Eigen3 3.3 NO_MODULE REQUIRED)

# oneDNN: primary CPU GEMM/conv provider (its config needs OpenCL's CMake files: ocl-icd-opencl-dev).
find_package(dnnl CONFIG QUIET)
if(TARGET DNNL::dnnl)
  set(TANDEM_HAVE_DNNL ON)
else()
  set(TANDEM_HAVE_DNNL OFF)
  message(WARNING "oneDNN not found (libdnnl-dev + ocl-icd-opencl-dev): GEMM/conv fall back to OpenBLAS")
endif()

# OpenBLAS: portable CBLAS fallback.
find_library(TANDEM_OPENBLAS_LIB NAMES openblas)
find_path(TANDEM_CBLAS_INCLUDE cblas.h PATH_SUFFIXES openblas openblas-pthread)
if(TANDEM_OPENBLAS_LIB AND TANDEM_CBLAS_INCLUDE)
  set(TANDEM_HAVE_OPENBLAS ON)
  add_library(tandem_openblas INTERFACE IMPORTED)
  target_link_libraries(tandem_openblas INTERFACE ${TANDEM_OPENBLAS_LIB})
  target_include_directories(tandem_openblas INTERFACE ${TANDEM_CBLAS_INCLUDE})
else()
  set(TANDEM_HAVE_OPENBLAS OFF)
endif()
if(NOT TANDEM_HAVE_DNNL AND NOT TANDEM_HAVE_OPENBLAS)
  message(STATUS "Neither oneDNN nor OpenBLAS: GEMM uses tandem's own kernels only")
endif()

if(TANDEM_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(TANDEM_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
if(TANDEM_BUILD_EXAMPLES)
  find_package(CLI11 CONFIG REQUIRED)
endif()

# Values baked into tandem/version.h.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                OUTPUT_VARIABLE TANDEM_GIT_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT TANDEM_GIT_COMMIT)
  set(TANDEM_GIT_COMMIT "unknown")
endif()
