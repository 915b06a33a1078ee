// EXPECT: tp rule \[input_policy: background threads\]
#include "common.hpp"
struct Starts {  // starts its threads, but cannot stop them
  cf::Batch batch{torch::zeros({2, 4}), torch::zeros({2, 1})};
  cf::Batch next_batch() { return batch; }
  void start() {}
};
int main() {
  tp::Trainer trainer(Starts{}, cf::desc(), tp::SingleDevice(), cf::options());
  trainer.train();
}
