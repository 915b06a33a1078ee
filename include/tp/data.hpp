#pragma once
// Dataflows: sources (examples, from_dataset, fashion_mnist; token files and their windows,
// character vocabularies) and the views that compose with
// `|` (batch, shuffle, shard, repeat, take, parallel_map), on range-v3. See tp/tp.hpp.
#include <tp/data/dataflow.hpp>
#include <tp/data/fashion_mnist.hpp>
#include <tp/data/character_vocabulary.hpp>
#include <tp/data/token_file.hpp>
