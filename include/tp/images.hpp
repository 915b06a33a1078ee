#pragma once
// Data from disk: image folders (torchvision's ImageFolder layout), list files and WebDataset
// tar shards as dataflows of image files; JPEG (libjpeg-turbo) and PNG (libpng) decoding;
// torchvision's augmentations, seeded per example; decode_images, which decodes and augments in
// parallel_map threads. Link tp::images (libjpeg-turbo, libarchive, libpng). See tp/tp.hpp.
//
//   auto augment = tp::data::transforms().random_resized_crop(224).random_horizontal_flip(0.5)
//                      .normalize({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225});
//   auto flow = tp::data::image_folder("train")                    // or list_file, tar_shards
//             | tp::data::shuffle(42) | tp::data::shard(rank, world_size)
//             | tp::data::decode_images(augment, /*threads=*/8, /*seed=*/7)
//             | tp::data::batch(256);
#include <tp/data/decode_images.hpp>
#include <tp/data/image/bad_file.hpp>
#include <tp/data/image/decode.hpp>
#include <tp/data/image/image_file.hpp>
#include <tp/data/image/transforms.hpp>
#include <tp/data/image_folder.hpp>
#include <tp/data/tar_shards.hpp>
