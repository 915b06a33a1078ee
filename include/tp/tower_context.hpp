#pragma once
// What a tower function knows about the replica it is building (tensorpack's TowerContext).
#include <torch/types.h>

namespace tp {

struct TowerContext {
  bool is_training = true;           // false for inference towers (predictors, validation)
  int index = 0;                     // 0 .. towers-1
  torch::Device device = torch::kCPU;
  bool is_main = true;               // the tower whose model callbacks see and checkpoints save
};

}  // namespace tp
