// EXPECT: tp rule \[input_policy: movable\]
#include <mutex>

#include "common.hpp"
struct Locked {  // holds its mutex by value, so it cannot be moved into the trainer
  std::mutex mutex;
  cf::Batch next_batch() {
    std::lock_guard lock(mutex);
    return {torch::zeros({2, 4}), torch::zeros({2, 1})};
  }
};
int main() {
  tp::Trainer trainer(Locked{}, cf::desc(), tp::SingleDevice(), cf::options());
  trainer.train();
}
