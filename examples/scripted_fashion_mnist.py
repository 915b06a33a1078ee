"""Defines a Fashion-MNIST classifier in Python and scripts it for tp's train_scripted.

    python3 scripted_fashion_mnist.py model.pt            writes the untrained TorchScript model
    python3 scripted_fashion_mnist.py --score trained.pt  its test accuracy, after training in C++

The model takes [N, 1, 28, 28] normalised images (train_scripted normalises them as the
fashion_mnist example does) and gives [N, 10] logits.
"""
import gzip
import os
import struct
import sys

import torch
import torch.nn.functional as F


class Classifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 32, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(32)
        self.conv2 = torch.nn.Conv2d(32, 64, 3, padding=1)
        self.bn2 = torch.nn.BatchNorm2d(64)
        self.fc1 = torch.nn.Linear(64 * 7 * 7, 128)
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(torch.relu(self.bn2(self.conv2(x))), 2)
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


def test_set():
    folder = os.environ.get("TP_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
    with gzip.open(f"{folder}/t10k-images-idx3-ubyte.gz") as f:
        _, n, rows, cols = struct.unpack(">IIII", f.read(16))
        images = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).reshape(n, 1, rows, cols)
    with gzip.open(f"{folder}/t10k-labels-idx1-ubyte.gz") as f:
        f.read(8)
        labels = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).long()
    return (images.float() / 255.0 - 0.2860) / 0.3530, labels


if sys.argv[1] == "--score":
    model = torch.jit.load(sys.argv[2])
    model.eval()
    images, labels = test_set()
    with torch.no_grad():
        accuracy = (model(images).argmax(1) == labels).float().mean().item()
    print(f"Python: test accuracy of {sys.argv[2]}: {accuracy:.4f}")
    sys.exit(0 if len(sys.argv) < 4 or accuracy >= float(sys.argv[3]) else 1)
else:
    torch.manual_seed(0)
    torch.jit.script(Classifier()).save(sys.argv[1])
    print(f"wrote {sys.argv[1]}")
