// Debian's CPU-only LibTorch ships c10's CUDA headers without this generated one. Only the
// cuda_syntax test uses it: it type-checks tp's CUDA and NCCL code, which cannot be built here.
#define C10_CUDA_BUILD_SHARED_LIBS
