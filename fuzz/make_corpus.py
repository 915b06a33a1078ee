#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (fuzz/corpus/<target>/): small valid inputs of each
format, which libFuzzer mutates. The files are committed; run this again only to change them.

    /usr/bin/python3 fuzz/make_corpus.py [CHECKPOINT_DIR]

CHECKPOINT_DIR: a sharded run's checkpoint folder (tests/mp_worker --shard gradients --logdir ...),
whose newest file and part 0 become the checkpoint target's seeds.
"""
import glob
import io
import os
import sys
import tarfile

import torch
from PIL import Image

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    os.makedirs(os.path.join(root, target), exist_ok=True)
    with open(os.path.join(root, target, name), "wb") as f:
        f.write(data)


def saved(value):
    out = io.BytesIO()
    torch.save(value, out)
    return out.getvalue()


put("pickle", "tree.pt", saved({"a": torch.arange(3), "b": [1, 2.5, "x", None, True], "c": (1, {"d": torch.ones(2, 2)})}))
put("pickle", "state_dict.pt", saved(torch.nn.Linear(3, 2).state_dict()))
view = torch.arange(6.0)
put("pickle", "shared_storage.pt", saved({"whole": view, "part": view[2:4]}))

if len(sys.argv) > 1:
    newest = sorted(f for f in glob.glob(os.path.join(sys.argv[1], "model-*.ckpt")) if ".part-" not in f)[-1]
    put("checkpoint", "sharded.ckpt", open(newest, "rb").read())
    put("checkpoint", "part.ckpt", open(newest.replace(".ckpt", ".part-0-of-2.ckpt"), "rb").read())


def image(mode, size, fmt, **options):
    pixels = Image.new(mode, size)
    for i in range(size[0]):
        for j in range(size[1]):
            pixels.putpixel((i, j), (i * 37 + j * 11) % 256 if mode in ("L", "P") else tuple((i * k + j) % 256 for k in range(len(mode))))
    out = io.BytesIO()
    pixels.save(out, fmt, **options)
    return out.getvalue()


put("jpeg", "rgb.jpg", image("RGB", (9, 7), "JPEG", quality=80))
put("jpeg", "grey.jpg", image("L", (8, 8), "JPEG"))
put("jpeg", "progressive.jpg", image("RGB", (17, 16), "JPEG", progressive=True))
put("png", "rgb.png", image("RGB", (5, 4), "PNG"))
put("png", "grey.png", image("L", (3, 6), "PNG"))
put("png", "rgba.png", image("RGBA", (4, 4), "PNG"))
put("png", "palette.png", image("P", (4, 3), "PNG"))
put("png", "interlaced.png", image("RGB", (9, 9), "PNG", interlace=1))

shard = io.BytesIO()
with tarfile.open(fileobj=shard, mode="w", format=tarfile.USTAR_FORMAT) as tar:
    for key, label in (("a/000", 3), ("a/001", 7)):
        for ext, data in (("png", image("L", (2, 2), "PNG")), ("cls", str(label).encode())):
            info = tarfile.TarInfo(f"{key}.{ext}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
put("tar", "two_samples.tar", shard.getvalue())
