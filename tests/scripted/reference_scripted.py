"""The Python side of tp's TorchScript tests.

    reference_scripted.py make DIR    scripts a small conv + BatchNorm + dropout classifier into
                                      DIR/model.pt, writes fixed data (DIR/x: 40x1x8x8 float32,
                                      DIR/y: 40 int64), trains the model 10 steps (SGD, lr 0.1,
                                      momentum 0.9, batches of 8 in order, seed 1 before the
                                      first step) and writes each state_dict entry to
                                      DIR/python/<name>, raw
    reference_scripted.py check DIR   loads DIR/exported.pt (tp's export), runs it in eval mode
                                      on DIR/x and compares with DIR/tp_outputs (40x10 float32)
    reference_scripted.py mlp DIR     scripts the multi-process tests' MLP (6-32-1, tanh) into
                                      DIR/mlp.pt
"""
import os
import sys

import torch
import torch.nn.functional as F


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.drop = torch.nn.Dropout(0.2)
        self.fc = torch.nn.Linear(4 * 4 * 4, 10)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return self.fc(self.drop(x.flatten(1)))


def read(path, dtype, shape):
    with open(path, "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=dtype).reshape(shape).clone()


command, directory = sys.argv[1], sys.argv[2]
if command == "make":
    torch.manual_seed(0)
    model = torch.jit.script(Net())
    model.save(f"{directory}/model.pt")
    x, y = torch.randn(40, 1, 8, 8), torch.randint(0, 10, (40,))
    with open(f"{directory}/x", "wb") as f:
        f.write(x.numpy().tobytes())
    with open(f"{directory}/y", "wb") as f:
        f.write(y.numpy().tobytes())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model.train()
    torch.manual_seed(1)
    for step in range(10):
        b = step % 5
        optimizer.zero_grad()
        F.cross_entropy(model(x[8 * b:8 * b + 8]), y[8 * b:8 * b + 8]).backward()
        optimizer.step()
    os.makedirs(f"{directory}/python", exist_ok=True)
    for name, tensor in model.state_dict().items():
        with open(f"{directory}/python/{name}", "wb") as f:
            f.write(tensor.detach().contiguous().numpy().tobytes())
elif command == "mlp":
    torch.manual_seed(5)
    torch.jit.script(torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))).save(f"{directory}/mlp.pt")
elif command == "check":
    model = torch.jit.load(f"{directory}/exported.pt")
    model.eval()
    x = read(f"{directory}/x", torch.float32, (40, 1, 8, 8))
    with torch.no_grad():
        ours = model(x)
    theirs = read(f"{directory}/tp_outputs", torch.float32, (40, 10))
    worst = (ours - theirs).abs().max().item()
    print(f"Python's outputs of tp's export against tp's predictor: largest difference {worst:.3g}")
    sys.exit(0 if worst <= 1e-6 else 1)
