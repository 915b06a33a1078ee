// EXPECT: tp rule \[callback_for: hook signature\]: the hook on_scalar
// MAX_LINES: 25
#include "common.hpp"
struct Printer {
  void on_scalar(auto&, double value) { (void)value; }  // forgot the name
};
int main() {
  tp::Trainer trainer(cf::input(), cf::desc(), tp::SingleDevice(), cf::options(), Printer{});
  trainer.train();
}
