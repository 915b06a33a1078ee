// EXPECT: tp rule \[input_policy: pin_memory\]
#include "common.hpp"
struct PinsAlways {  // pin_memory takes no flag: StagingInput could not ask for it
  cf::Batch batch{torch::zeros({2, 4}), torch::zeros({2, 1})};
  cf::Batch next_batch() { return batch; }
  void pin_memory() {}
};
int main() {
  tp::Trainer trainer(PinsAlways{}, cf::desc(), tp::SingleDevice(), cf::options());
  trainer.train();
}
