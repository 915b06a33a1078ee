#pragma once
// Thrown by a step or a hook to end training at once (tensorpack's StopTraining). The rest of
// the current step and epoch is skipped, after_train hooks run, and train() returns normally.
// To finish the current step and epoch first, call trainer.request_stop() instead.
#include <stdexcept>
#include <string>

namespace tp {

struct stop_training : std::runtime_error {
  explicit stop_training(const std::string& why = "training stopped") : std::runtime_error(why) {}
};

}  // namespace tp
