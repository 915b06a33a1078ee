#pragma once
// Dataflows: ranges of datapoints composed with `|`, in range-v3's style. A dataflow may be
// iterated many times; each iteration is one pass over the data.
//
//   auto flow = tp::data::examples(images, labels)                 // or from_dataset(torch dataset)
//             | tp::data::parallel_map(augment, 4)                 // f in 4 threads, order kept
//             | ranges::views::transform(normalize)                 // any range-v3 view composes
//             | tp::data::shuffle(seed)                             // or shuffle_buffer(n, seed)
//             | tp::data::shard(rank, world_size)                   // this process's share
//             | tp::data::batch(64);                                // + repeat(n), take(n)
//
// Seeded views replay: a pass is a function of the seed and the pass number, and a dataflow's
// position can be saved and restored (state.hpp).
#include <tp/data/batch.hpp>
#include <tp/data/examples.hpp>
#include <tp/data/parallel_map.hpp>
#include <tp/data/repeat.hpp>
#include <tp/data/shard.hpp>
#include <tp/data/shuffle.hpp>
#include <tp/data/state.hpp>
#include <tp/data/torch_dataset.hpp>
