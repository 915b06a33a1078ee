"""Python's torch.optim.NAdam or RAdam on the parameters and gradients the C++ test wrote.

    reference_optimizer.py DIR nadam|radam

Reads DIR/w0 (4x3) and DIR/b0 (3), the initial parameters, and DIR/gw (100x4x3) and DIR/gb
(100x3), one gradient per step, all raw float32. Steps 100 times with lr 0.01 (0.005 from step
50 on) and weight decay 0.01, and writes DIR/trajectory: the 15 parameters after every step.
"""
import inspect
import sys

import torch

directory, name = sys.argv[1], sys.argv[2]


def read(file, shape):
    with open(f"{directory}/{file}", "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=torch.float32).reshape(shape).clone()


if name == "nadam" and torch.__version__.startswith("1."):
    # PyTorch 1.13's NAdam multiplies mu into mu_product_next twice; PyTorch 2.0 fixed it
    # (pytorch/pytorch#92699). tp implements the fixed update: test against that line fixed.
    import torch.optim.nadam as nadam_module

    source = inspect.getsource(nadam_module._single_tensor_nadam)
    wrong = "mu_product_next = mu_product * mu * mu_next"
    assert wrong in source, "the NAdam of this PyTorch is not the one this patch is for"
    exec(source.replace(wrong, "mu_product_next = torch.tensor(mu_product.item() * mu_next, dtype=torch.float64)"),
         nadam_module.__dict__)

w = read("w0", (4, 3)).requires_grad_()
b = read("b0", (3,)).requires_grad_()
gw, gb = read("gw", (100, 4, 3)), read("gb", (100, 3))
optimizer_class = {"nadam": torch.optim.NAdam, "radam": torch.optim.RAdam}[name]
optimizer = optimizer_class([w, b], lr=0.01, weight_decay=0.01, foreach=False)
trajectory = []
for step in range(100):
    if step == 50:
        for group in optimizer.param_groups:
            group["lr"] = 0.005
    w.grad, b.grad = gw[step].clone(), gb[step].clone()
    optimizer.step()
    trajectory.append(torch.cat([w.detach().flatten(), b.detach().flatten()]))
with open(f"{directory}/trajectory", "wb") as f:
    f.write(torch.stack(trajectory).numpy().tobytes())
