"""The Python peer of bench_scripted: eager PyTorch training the same TorchScript model.

    scripted_peer.py make MODEL.pt     scripts the benchmark's MLP (64-64-10) into MODEL.pt
    scripted_peer.py run MODEL.pt      then, for each number N read from stdin, runs N training
                                       steps (batch 32, SGD) and prints the seconds they took
"""
import sys
import time

import torch
import torch.nn.functional as F


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(64, 64)
        self.b = torch.nn.Linear(64, 10)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


if sys.argv[1] == "make":
    torch.manual_seed(1)
    torch.jit.script(Mlp()).save(sys.argv[2])
    sys.exit(0)
torch.set_num_threads(1)
model = torch.jit.load(sys.argv[2])
model.train()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
torch.manual_seed(0)
x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
for line in sys.stdin:
    start = time.perf_counter()
    for _ in range(int(line)):
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    print(time.perf_counter() - start, flush=True)
