// EXPECT: tp rule \[distribution_policy: main_model\]
#include "common.hpp"
struct OneModel {
  template <class Tower>
  struct Replicas {  // holds the model, but does not say which one is the main model
    tp::model_t<Tower> model;
  };
  template <class Tower>
  Replicas<Tower> build(Tower& tower) {
    return {tower.make_model()};
  }
};
int main() {
  tp::Trainer trainer(cf::input(), cf::desc(), OneModel{}, cf::options());
  trainer.train();
}
