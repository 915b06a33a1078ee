// EXPECT: tp rule \[distribution_policy: many processes\]
#include "common.hpp"
struct TwoRanks : tp::SingleDevice {
  template <class Tower>
  struct Replicas : tp::SingleDevice::Replicas<Tower> {  // says how many ranks, but cannot agree with them
    using tp::SingleDevice::Replicas<Tower>::Replicas;
    int world_size() const { return 2; }
  };
  template <class Tower>
  Replicas<Tower> build(Tower& tower) {
    return Replicas<Tower>(tower, *this);
  }
};
int main() {
  tp::Trainer trainer(cf::input(), cf::desc(), TwoRanks(), cf::options());
  trainer.train();
}
