// EXPECT: tp rule \[input_policy: resumable\]
#include "common.hpp"
struct Saves {  // says where it is, but cannot go back there
  cf::Batch batch{torch::zeros({2, 4}), torch::zeros({2, 1})};
  cf::Batch next_batch() { return batch; }
  tp::data::position position() const { return {}; }
};
int main() {
  tp::Trainer trainer(Saves{}, cf::desc(), tp::SingleDevice(), cf::options());
  trainer.train();
}
