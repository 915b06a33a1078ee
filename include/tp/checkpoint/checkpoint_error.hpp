#pragma once
// The error a checkpoint that cannot be read, or does not fit the trainer that reads it, throws:
// its message names the part (an entry, a tensor, a callback) and what to do.
#include <stdexcept>

namespace tp {

struct checkpoint_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace tp
