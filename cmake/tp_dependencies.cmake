# What tp::tp needs; shared by our build and by find_package(tp).
include(CMakeFindDependencyMacro)
find_dependency(Torch)
find_dependency(ZLIB)
find_dependency(PNG)  # TensorBoard images
find_dependency(range-v3)
find_dependency(nlohmann_json 3.10)  # stats.json
# Images from disk (<tp/images.hpp>, the target tp::images): libjpeg-turbo's TurboJPEG and
# libarchive (tar shards), beside libpng. Optional: tp::tp does not need them.
# TurboJPEG is found by its header and library, not by libjpeg-turbo's CMake package: Debian 13's
# libjpeg-turboTargets.cmake names a static libjpeg.a that Debian does not install, and fails.
find_path(TP_TURBOJPEG_INCLUDE_DIR turbojpeg.h)
find_library(TP_TURBOJPEG_LIBRARY turbojpeg)
find_package(LibArchive QUIET)
if(TP_TURBOJPEG_INCLUDE_DIR AND TP_TURBOJPEG_LIBRARY AND TARGET LibArchive::LibArchive)
  if(NOT TARGET tp::turbojpeg)
    add_library(tp::turbojpeg UNKNOWN IMPORTED)
    set_target_properties(tp::turbojpeg PROPERTIES IMPORTED_LOCATION "${TP_TURBOJPEG_LIBRARY}"
                                                   INTERFACE_INCLUDE_DIRECTORIES "${TP_TURBOJPEG_INCLUDE_DIR}")
  endif()
  set(TP_WITH_IMAGES ON)
else()
  set(TP_WITH_IMAGES OFF)
endif()
# CUDA parts compile only when LibTorch itself has CUDA.
if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
  set(TP_WITH_CUDA ON)
else()
  set(TP_WITH_CUDA OFF)
endif()
