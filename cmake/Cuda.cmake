# The CUDA backend is optional: the project builds with no nvcc and no GPU. Where nvcc
# exists (Debian's toolkit lives in /usr/local/cuda, off PATH) the library compiles for the
# architectures in MPAKT_CUDA_ARCHS — by default sm_80 (A100), sm_89 (L4, RTX 40xx) and sm_90
# (H100/H200) — even on machines with no GPU to run it.
set(MPAKT_CUDA_ARCHS "80;89;90" CACHE STRING "CUDA architectures the CUDA backend is built for (semicolon list)")
if(NOT MPAKT_CUDA)
  return()
endif()
if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
  set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
endif()
include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER OR NOT EXISTS ${CMAKE_SOURCE_DIR}/backends/cuda/CMakeLists.txt)
  message(STATUS "mpakt: CUDA backend not built (no nvcc found)")
  return()
endif()
if(NOT CMAKE_CUDA_ARCHITECTURES)
  # `native` silently means sm_75 on a machine without a GPU: name the targets.
  set(CMAKE_CUDA_ARCHITECTURES ${MPAKT_CUDA_ARCHS})
endif()
enable_language(CUDA)
add_subdirectory(backends/cuda)
