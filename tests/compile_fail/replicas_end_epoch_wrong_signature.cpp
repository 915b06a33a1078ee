// EXPECT: tp rule \[distribution_policy: end_epoch\]
#include "common.hpp"
#include <string>
struct Checked : tp::SingleDevice {
  template <class Tower>
  struct Replicas : tp::SingleDevice::Replicas<Tower> {
    using tp::SingleDevice::Replicas<Tower>::Replicas;
    void end_epoch(const std::string& name) { (void)name; }  // the trainer passes the epoch
  };
  template <class Tower>
  Replicas<Tower> build(Tower& tower) {
    return Replicas<Tower>(tower, *this);
  }
};
int main() {
  tp::Trainer trainer(cf::input(), cf::desc(), Checked(), cf::options());
  trainer.train();
}
