"""Python's side of tp's state tests (tests/test_python_state.cpp): Debian's python3-torch.

    state_peer.py train DIR OPTIMIZER K M    Python trains K steps, saves, trains M more
    state_peer.py resume DIR OPTIMIZER K M   Python goes on from a tp trainer's checkpoint of K steps
                                             (DIR/tp_k.ckpt) for M more
    state_peer.py checkpoint DIR CHECKPOINT  opens a tp trainer's checkpoint as a user would, and
                                             saves it with a learning rate of 0.005 (DIR/edited.ckpt)
    state_peer.py bad DIR                    writes the files tp must refuse

DIR/data.pt (written by tp) holds x [32, 4], y [32, 3] and the first weight and bias of a
Linear(4, 3); step s trains on rows [8 (s % 4), 8 (s % 4) + 8) with the mean squared error.
"""
import argparse
import collections
import copy
import pickle
import sys

import torch

command, directory = sys.argv[1], sys.argv[2]


def optimizer_for(name, parameters):
    return {
        "sgd": lambda: torch.optim.SGD(parameters, lr=0.05, momentum=0.9),
        "adam": lambda: torch.optim.Adam(parameters, lr=0.01),
        "adamw": lambda: torch.optim.AdamW(parameters, lr=0.01, weight_decay=0.01),
        "radam": lambda: torch.optim.RAdam(parameters, lr=0.01),
    }[name]()


def train(model, optimizer, data, first, steps):
    for s in range(first, first + steps):
        i = s % 4
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(data["x"][8 * i:8 * i + 8]), data["y"][8 * i:8 * i + 8])
        loss.backward()
        optimizer.step()


def fresh_linear(data):
    model = torch.nn.Linear(4, 3)
    with torch.no_grad():
        model.weight.copy_(data["w0"])
        model.bias.copy_(data["b0"])
    return model


if command == "train":
    name, k, m = sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    data = torch.load(f"{directory}/data.pt")
    model = fresh_linear(data)
    optimizer = optimizer_for(name, model.parameters())
    train(model, optimizer, data, 0, k)
    # A Lightning checkpoint's shape, with the Python objects tp does not need.
    torch.save({"state_dict": model.state_dict(), "optimizer_states": [optimizer.state_dict()], "epoch": 0, "global_step": k,
                "hyper_parameters": argparse.Namespace(lr=0.01, name=name), "callbacks": {"ModelCheckpoint": {"best": None}}},
               f"{directory}/python_k.pt")
    train(model, optimizer, data, k, m)
    torch.save(model.state_dict(), f"{directory}/python_final.pt")
elif command == "resume":
    name, k, m = sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    data = torch.load(f"{directory}/data.pt")
    checkpoint = torch.load(f"{directory}/tp_k.ckpt")
    assert checkpoint["global_step"] == k, checkpoint["global_step"]
    model = torch.nn.Linear(4, 3)
    model.load_state_dict(checkpoint["state_dict"], strict=True)
    optimizer = optimizer_for(name, model.parameters())
    optimizer.load_state_dict(checkpoint["optimizer_states"][0])
    # tp::save_optimizer_state and tp::save_state_dict wrote the same state on their own.
    standalone = torch.load(f"{directory}/tp_k_optimizer.pt")
    assert standalone["param_groups"] == checkpoint["optimizer_states"][0]["param_groups"], standalone["param_groups"]
    for key, state in checkpoint["optimizer_states"][0]["state"].items():
        for field, value in state.items():
            assert torch.equal(torch.as_tensor(standalone["state"][key][field]), torch.as_tensor(value)), (key, field)
    for name_, tensor in torch.load(f"{directory}/tp_k_model.pt").items():
        assert torch.equal(tensor, checkpoint["state_dict"][name_]), name_
    train(model, optimizer, data, k, m)
    torch.save(model.state_dict(), f"{directory}/python_after_tp.pt")
elif command == "checkpoint":
    checkpoint = torch.load(sys.argv[3])
    assert sorted(checkpoint) == ["callbacks", "epoch", "global_step", "input", "loop", "optimizer_states", "rng", "state_dict", "tp"], \
        sorted(checkpoint)

    # Every part is plain values: no archive, no bytes, no object; uint8 tensors only where
    # torch keeps a generator's state.
    def walk(value, where):
        if isinstance(value, dict):
            for key, inner in value.items():
                assert isinstance(key, (str, int)), (where, key)
                walk(inner, f"{where}/{key}")
        elif isinstance(value, (list, tuple)):
            for i, inner in enumerate(value):
                walk(inner, f"{where}/{i}")
        elif isinstance(value, torch.Tensor):
            assert value.dtype != torch.uint8 or where.startswith("/rng/"), where
        else:
            assert value is None or isinstance(value, (bool, int, float, str)), (where, type(value))
    walk(checkpoint, "")
    assert checkpoint["callbacks"]["EarlyStopping(val_loss)"]["stalled"] == 0, checkpoint["callbacks"]
    assert checkpoint["loop"] == {"steps_done": 7, "epoch_closed": True}, checkpoint["loop"]
    assert sorted(checkpoint["input"]) == ["batch", "consumed", "datapoints", "flow", "world_size"], checkpoint["input"]
    torch.set_rng_state(checkpoint["rng"]["cpu"])  # what torch.get_rng_state() gives
    # A user's change before the run goes on: a lower learning rate.
    edited = copy.deepcopy(checkpoint)
    edited["optimizer_states"][0]["param_groups"][0]["lr"] = 0.005
    torch.save(edited, f"{directory}/edited.ckpt")
    model = torch.nn.Sequential(collections.OrderedDict(a=torch.nn.Linear(6, 16), relu=torch.nn.ReLU(), b=torch.nn.Linear(16, 1)))
    model.load_state_dict(checkpoint["state_dict"], strict=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    optimizer.load_state_dict(checkpoint["optimizer_states"][0])
    assert len(optimizer.state) == 4, optimizer.state  # a momentum buffer per parameter
    model.eval()
    x = torch.load(f"{directory}/x.pt")
    torch.save({"forward": model(x).detach(), "epoch": checkpoint["epoch"], "global_step": checkpoint["global_step"],
                "lr": optimizer.param_groups[0]["lr"]}, f"{directory}/python_view.pt")
elif command == "bad":
    torch.save(torch.nn.Linear(5, 3).state_dict(), f"{directory}/other_model.pt")
    torch.save(torch.optim.SGD(torch.nn.Linear(4, 3).parameters(), lr=0.1, momentum=0.9).state_dict(), f"{directory}/sgd_fresh.pt")
    model = torch.nn.Linear(4, 3)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.ones(2, 4)).sum().backward()
    sgd.step()
    torch.save(sgd.state_dict(), f"{directory}/sgd_state.pt")
    with open(f"{directory}/plain.pkl", "wb") as f:
        pickle.dump([1, 2, 3], f)
    torch.save([1, 2, 3], f"{directory}/a_list.pt")
    torch.save(model.state_dict(), f"{directory}/legacy.pt", _use_new_zipfile_serialization=False)
else:
    sys.exit(f"unknown command {command}")
