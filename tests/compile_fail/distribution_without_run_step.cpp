// EXPECT: tp rule \[distribution_policy: run_step\]
#include "common.hpp"
struct OneModel {
  template <class Tower>
  struct Replicas {  // a main model, but no default step
    tp::model_t<Tower> model;
    tp::model_t<Tower>& main_model() { return model; }
    void for_each_optimizer(auto&&) {}
  };
  template <class Tower>
  Replicas<Tower> build(Tower& tower) {
    return {tower.make_model()};
  }
};
int main() {
  tp::Trainer trainer(cf::input(), cf::desc(), OneModel{}, cf::options());
  trainer.train();  // the default step: OneModel has none
}
