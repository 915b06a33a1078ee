#pragma once
// Dataflows: sources (examples, from_dataset, fashion_mnist) and the views that compose with
// `|` (batch, shuffle, shard, repeat, take, parallel_map), on range-v3. See tp/tp.hpp.
#include <tp/data/dataflow.hpp>
#include <tp/data/fashion_mnist.hpp>
