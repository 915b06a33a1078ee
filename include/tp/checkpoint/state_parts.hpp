#pragma once
// The parts of a state spread over processes: a sharded run's optimizer state, which each rank
// keeps a shard of and writes as its own part of a checkpoint (optim/optimizer_pieces.hpp).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include <tp/checkpoint/state_tree.hpp>

namespace tp {

// [offset, offset + length) of one parameter, flattened; the parameter is named by its number in
// the whole optimizer (torch.optim's numbering: across the param groups, in order).
struct state_piece {
  std::int64_t parameter = 0;
  std::int64_t offset = 0;
  std::int64_t length = 0;
};

// Where a sharded state's parts are: the pieces each part holds, and how to read one (a tree
// whose "pieces" list each piece with its state), so that a loader reads only those it needs.
struct state_parts {
  std::vector<std::vector<state_piece>> covers;
  std::function<state_tree(std::size_t)> read;
};

}  // namespace tp
