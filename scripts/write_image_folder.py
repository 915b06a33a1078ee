#!/usr/bin/env python3
"""Writes Fashion-MNIST out as image files, for tp's image sources, tests, example and benchmark.

    write_image_folder.py OUT [--format png|jpeg] [--size N] [--mode L|RGB] [--limit N]
                              [--tar-shards K] [--source DIR] [--quality Q]

  OUT/train/CLASS/NNNNN.EXT, OUT/test/CLASS/NNNNN.EXT   torchvision's ImageFolder layout: CLASS is
      the label's digit (0-9, so the sorted folder names are the labels) and NNNNN the image's
      index in its IDX file (so the sorted names are the file's order).
  OUT/train.txt, OUT/test.txt                           list files: `SPLIT/CLASS/NNNNN.EXT LABEL` per
      line, in the IDX files' order (the order of the in-memory reader, tp::data::fashion_mnist).
  OUT/train-NNNNNN.tar, OUT/test-NNNNNN.tar             with --tar-shards K: K shards per split in
      the WebDataset layout (KEY.EXT image and KEY.cls label, KEY the image's index), each a
      contiguous run of the split, in order.

--size resizes (bilinear) to N x N, e.g. 256 for the benchmark; --mode RGB writes 3 channels;
--limit keeps the first N images of each split. The bytes written are the same on every run
(tar members have fixed owners and times), so tests can rely on them. Needs only PIL
(Debian's python3-pil); the IDX files are read with gzip and struct.
"""
import argparse
import gzip
import io
import os
import struct
import sys
import tarfile

from PIL import Image


def read_idx(images_path, labels_path, limit):
    """The first `limit` (all if None) images (bytes of rows*cols) and labels of an IDX pair."""
    with gzip.open(labels_path, "rb") as f:
        magic, count = struct.unpack(">II", f.read(8))
        if magic != 2049:
            sys.exit(f"{labels_path}: not an IDX label file (magic {magic})")
        count = count if limit is None else min(count, limit)
        labels = f.read(count)
    with gzip.open(images_path, "rb") as f:
        magic, n, rows, cols = struct.unpack(">IIII", f.read(16))
        if magic != 2051 or n < count:
            sys.exit(f"{images_path}: not an IDX image file matching {labels_path}")
        images = [f.read(rows * cols) for _ in range(count)]
    return [(Image.frombytes("L", (cols, rows), data), label) for data, label in zip(images, labels)]


def encode(image, args):
    if args.size:
        image = image.resize((args.size, args.size), Image.BILINEAR)
    if args.mode == "RGB":
        image = image.convert("RGB")
    out = io.BytesIO()
    if args.format == "png":
        image.save(out, format="PNG")
    else:
        image.save(out, format="JPEG", quality=args.quality)
    return out.getvalue()


def add_member(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--format", choices=["png", "jpeg"], default="png")
    parser.add_argument("--size", type=int, default=0, help="resize to N x N (default: 28 x 28 as they are)")
    parser.add_argument("--mode", choices=["L", "RGB"], default="L")
    parser.add_argument("--limit", type=int, default=None, help="the first N images of each split")
    parser.add_argument("--tar-shards", type=int, default=0, help="also write K WebDataset tar shards per split")
    parser.add_argument("--source", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--quality", type=int, default=90, help="JPEG quality")
    args = parser.parse_args()
    if args.size < 0 or args.tar_shards < 0 or (args.limit is not None and args.limit <= 0):
        parser.error("--size, --tar-shards and --limit must be positive")
    ext = "png" if args.format == "png" else "jpg"

    for split, prefix in (("train", "train"), ("test", "t10k")):
        examples = read_idx(os.path.join(args.source, f"{prefix}-images-idx3-ubyte.gz"),
                            os.path.join(args.source, f"{prefix}-labels-idx1-ubyte.gz"), args.limit)
        encoded = [(encode(image, args), label) for image, label in examples]
        for label in sorted({label for _, label in encoded}):
            os.makedirs(os.path.join(args.out, split, str(label)), exist_ok=True)
        with open(os.path.join(args.out, f"{split}.txt"), "w") as listing:
            for index, (data, label) in enumerate(encoded):
                name = f"{split}/{label}/{index:05d}.{ext}"
                with open(os.path.join(args.out, name), "wb") as f:
                    f.write(data)
                listing.write(f"{name} {label}\n")
        shards = min(args.tar_shards, len(encoded))
        for k in range(shards):
            begin, end = k * len(encoded) // shards, (k + 1) * len(encoded) // shards
            with tarfile.open(os.path.join(args.out, f"{split}-{k:06d}.tar"), "w", format=tarfile.USTAR_FORMAT) as tar:
                for index in range(begin, end):
                    data, label = encoded[index]
                    add_member(tar, f"{index:06d}.{ext}", data)
                    add_member(tar, f"{index:06d}.cls", str(label).encode())
        print(f"{split}: {len(encoded)} images in {os.path.join(args.out, split)}" +
              (f" and {shards} tar shards" if shards else ""))


if __name__ == "__main__":
    main()
