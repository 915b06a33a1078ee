// EXPECT: tp rule \[distribution_policy: start\]
#include "common.hpp"
struct Synced : tp::SingleDevice {
  template <class Tower>
  struct Replicas : tp::SingleDevice::Replicas<Tower> {
    using tp::SingleDevice::Replicas<Tower>::Replicas;
    void start(int root) { (void)root; }  // the trainer calls start() with nothing
  };
  template <class Tower>
  Replicas<Tower> build(Tower& tower) {
    return Replicas<Tower>(tower, *this);
  }
};
int main() {
  tp::Trainer trainer(cf::input(), cf::desc(), Synced(), cf::options());
  trainer.train();
}
