# What tp::tp needs; shared by our build and by find_package(tp).
include(CMakeFindDependencyMacro)
find_dependency(Torch)
find_dependency(ZLIB)
find_dependency(PNG)  # TensorBoard images
find_dependency(range-v3)
find_dependency(nlohmann_json 3.10)  # stats.json
# Images from disk (<tp/images.hpp>, the target tp::images): libjpeg-turbo (its libjpeg API, for
# the partial decodes TurboJPEG 2 lacks) and libarchive (tar shards), beside libpng. Optional:
# tp::tp does not need them. CMake's FindJPEG module finds libjpeg-turbo's jpeglib.h and library
# (not libjpeg-turbo's CMake package: Debian 13's names a static libjpeg.a it does not install).
find_package(JPEG QUIET MODULE)
find_package(LibArchive QUIET)
if(TARGET JPEG::JPEG AND TARGET LibArchive::LibArchive)
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
