# What tp::tp needs; shared by our build and by find_package(tp).
include(CMakeFindDependencyMacro)
find_dependency(Torch)
find_dependency(ZLIB)
find_dependency(range-v3)
find_dependency(Boost 1.71)
find_dependency(nlohmann_json 3.10)  # stats.json
# CUDA parts compile only when LibTorch itself has CUDA.
if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
  set(TP_WITH_CUDA ON)
else()
  set(TP_WITH_CUDA OFF)
endif()
