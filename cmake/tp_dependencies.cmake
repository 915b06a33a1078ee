# What tp::tp needs; shared by our build and by find_package(tp).
include(CMakeFindDependencyMacro)
find_dependency(Torch)
find_dependency(ZLIB)
find_dependency(PNG)  # TensorBoard images
find_dependency(range-v3)
# Boost.Hana is header-only: its own CMake package (Boost 1.70+), not the FindBoost module
# that CMake 3.30 removed (policy CMP0167).
find_dependency(Boost 1.71 CONFIG COMPONENTS headers)
find_dependency(nlohmann_json 3.10)  # stats.json
# Images from disk (<tp/images.hpp>, the target tp::images): libjpeg-turbo's TurboJPEG and
# libarchive (tar shards), beside libpng. Optional: tp::tp does not need them.
find_package(libjpeg-turbo CONFIG QUIET)
find_package(LibArchive QUIET)
if(TARGET libjpeg-turbo::turbojpeg AND TARGET LibArchive::LibArchive)
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
