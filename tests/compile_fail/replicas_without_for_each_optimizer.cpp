// EXPECT: tp rule \[distribution_policy: for_each_optimizer\]
#include "common.hpp"
struct OneModel {
  template <class Tower>
  struct Replicas {  // a main model, but its optimizers cannot be reached (nor checkpointed)
    tp::model_t<Tower> model;
    tp::model_t<Tower>& main_model() { return model; }
  };
  template <class Tower>
  Replicas<Tower> build(Tower& tower) {
    return {tower.make_model()};
  }
};
int main() {
  tp::Trainer trainer(cf::input(), cf::desc(), OneModel{}, cf::options());
  trainer.train([](auto&) {});
}
