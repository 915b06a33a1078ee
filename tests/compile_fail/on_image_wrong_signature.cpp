// EXPECT: tp rule \[callback_for: hook signature\]: the hook on_image
// MAX_LINES: 25
#include "common.hpp"
struct ImageSaver {
  void on_image(auto&, const torch::Tensor& image) { (void)image; }  // forgot the name
};
int main() {
  tp::Trainer trainer(cf::input(), cf::desc(), tp::SingleDevice(), cf::options(), ImageSaver{});
  trainer.train();
}
