// EXPECT: tp rule \[input_policy: next_batch\]
#include "common.hpp"
struct Reader {  // has data, but no way to get a batch from it
  cf::Batch get() { return {}; }
};
int main() {
  tp::Trainer trainer(Reader{}, cf::desc(), tp::SingleDevice(), cf::options());
  trainer.train();
}
