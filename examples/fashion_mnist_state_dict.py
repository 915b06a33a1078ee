"""Scores a tp checkpoint (or a state_dict file) of the fashion_mnist example in Python alone:
builds the example's CNN as a torch.nn.Module, loads the weights with strict=True, and prints
the test accuracy, which is the one tp reported for that checkpoint.

    python3 fashion_mnist_state_dict.py train_log/model-0000000300.ckpt
    python3 fashion_mnist_state_dict.py weights.pt            (tp-export --state-dict, or Python's own)

Needs Debian's python3-torch and dataset-fashion-mnist ($TP_FASHION_MNIST_DIR overrides its folder).
"""
import gzip
import os
import sys

import torch
import torch.nn.functional as F


class Net(torch.nn.Module):
    """examples/fashion_mnist_net.hpp, module by module: the names are the state_dict's."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 32, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(32, 64, 3, padding=1)
        self.fc1 = torch.nn.Linear(64 * 7 * 7, 128)
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def read_idx(path, offset):
    with gzip.open(path, "rb") as f:
        return torch.frombuffer(bytearray(f.read()[offset:]), dtype=torch.uint8)


folder = os.environ.get("TP_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
images = read_idx(f"{folder}/t10k-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28)
labels = read_idx(f"{folder}/t10k-labels-idx1-ubyte.gz", 8).long()

saved = torch.load(sys.argv[1])
state_dict = saved["state_dict"] if "state_dict" in saved else saved  # a checkpoint, or a state_dict
net = Net()
net.load_state_dict(state_dict, strict=True)
net.eval()
correct = 0
with torch.no_grad():
    for start in range(0, len(labels), 1000):
        x = (images[start:start + 1000].float() / 255.0 - 0.2860) / 0.3530  # the example's normalize()
        correct += (net(x).argmax(1) == labels[start:start + 1000]).sum().item()
print(f"test accuracy: {correct / len(labels)!r}")
