#pragma once
// Checkpoints, all of them (an umbrella, as data.hpp is): a trainer's state in files Python's
// torch.load opens, sharded or not (checkpoint/files.hpp); a model's state_dict in and out of
// torch.save files (checkpoint/state_dict.hpp); the tree of plain values every stateful part
// writes its state into (checkpoint/state_tree.hpp), and its errors (checkpoint/checkpoint_error.hpp).
#include <tp/checkpoint/checkpoint_error.hpp>
#include <tp/checkpoint/files.hpp>
#include <tp/checkpoint/state_dict.hpp>
#include <tp/checkpoint/state_parts.hpp>
#include <tp/checkpoint/state_tree.hpp>
