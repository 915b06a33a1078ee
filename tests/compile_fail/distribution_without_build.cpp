// EXPECT: tp rule \[distribution_policy: build\]
#include "common.hpp"
int main() {
  // A device where a distribution policy belongs (tp::SingleDevice(torch::kCPU) was meant).
  tp::Trainer trainer(cf::input(), cf::desc(), torch::Device(torch::kCPU), cf::options());
  trainer.train();
}
