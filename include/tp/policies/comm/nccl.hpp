#pragma once
// NCCL: the reduction of GPU towers in one process, one tower per GPU. A communicator over the
// process's GPUs (ncclCommInitAll); each bucket is averaged in place on every GPU by one grouped
// call (ncclGroupStart/End around one ncclAllReduce per GPU, with ncclAvg), issued on LibTorch's
// current stream of each GPU, so it is ordered after the backward that made the gradients and
// before the update that reads them. One GPU is one tower and still goes through NCCL.
//
// Compiled only when LibTorch has CUDA (TP_WITH_CUDA).
#ifdef TP_WITH_CUDA
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <c10/cuda/CUDAStream.h>
#include <nccl.h>
#include <torch/types.h>

namespace tp {

class NCCL {
 public:
  explicit NCCL(const std::vector<torch::Device>& devices) {
    std::vector<int> gpus;
    std::set<int> seen;
    for (const auto& d : devices) {
      if (!d.is_cuda())
        throw std::invalid_argument("tp::NCCL reduces GPU towers, but a tower is on " + d.str() + "; CPU towers are reduced with tp::InProcess");
      const int index = d.has_index() ? d.index() : 0;
      if (!seen.insert(index).second)
        throw std::invalid_argument("tp::NCCL: cuda:" + std::to_string(index) + " holds two towers; NCCL needs one tower per GPU");
      gpus.push_back(index);
    }
    comms_.resize(gpus.size());
    check(ncclCommInitAll(comms_.data(), static_cast<int>(gpus.size()), gpus.data()), "ncclCommInitAll");
  }
  ~NCCL() {
    for (auto comm : comms_) ncclCommDestroy(comm);
  }
  NCCL(const NCCL&) = delete;
  NCCL& operator=(const NCCL&) = delete;

  // Every tower's flat bucket becomes the mean of all of them, in place.
  void all_reduce_mean(std::vector<torch::Tensor>& flats) {
    check(ncclGroupStart(), "ncclGroupStart");
    for (std::size_t i = 0; i < flats.size(); ++i) {
      auto& flat = flats[i];
      const auto stream = c10::cuda::getCurrentCUDAStream(flat.device().index());
      check(ncclAllReduce(flat.data_ptr(), flat.data_ptr(), static_cast<std::size_t>(flat.numel()), type_of(flat), ncclAvg,
                          comms_[i], stream.stream()),
            "ncclAllReduce");
    }
    check(ncclGroupEnd(), "ncclGroupEnd");
  }

 private:
  static void check(ncclResult_t result, const char* call) {
    if (result != ncclSuccess) throw std::runtime_error(std::string("tp::NCCL: ") + call + " failed: " + ncclGetErrorString(result));
  }
  static ncclDataType_t type_of(const torch::Tensor& t) {
    switch (t.scalar_type()) {
      case torch::kFloat: return ncclFloat32;
      case torch::kDouble: return ncclFloat64;
      case torch::kHalf: return ncclFloat16;
      case torch::kBFloat16: return ncclBfloat16;
      default: throw std::invalid_argument(std::string("tp::NCCL: cannot reduce gradients of type ") + c10::toString(t.scalar_type()));
    }
  }

  std::vector<ncclComm_t> comms_;
};

}  // namespace tp
#endif
