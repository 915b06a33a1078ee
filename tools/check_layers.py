#!/usr/bin/env python3
"""The include layering of docs/DESIGN.md ("Layers"), checked: every header under include/tp
includes only headers of its own layer or lower ones, and no header reaches itself through its
includes. Prints each violation and exits 1 if there is one.

    python3 tools/check_layers.py [INCLUDE_DIR]      (CTest: layers.include_order)
"""
import os
import re
import sys

# Layer 0: the public value types that concepts and mechanics may name.
VOCABULARY = {"batch", "callback_pack", "checkpoint/checkpoint_error", "compiled_part", "epoch_times", "gradient_processing", "precision", "stop_training",
              "tower_context", "train_options", "train_outcome", "update_options", "data/state", "checkpoint/state_tree",
              "checkpoint/state_parts"}
UMBRELLAS = {"tp.hpp", "data.hpp", "distributed.hpp", "monitors.hpp", "images.hpp", "checkpoint.hpp"}
NAMES = ["vocabulary", "concepts", "detail", "parts", "trainer", "umbrella"]


def layer(header):
    stem = header[:-len(".hpp")]
    if stem in VOCABULARY:
        return 0
    if header.startswith("concepts/"):
        return 1
    if "/detail/" in "/" + header:  # a feature's mechanics: policies/distribution/detail/, trainer/detail/, ...
        return 2
    if header == "trainer.hpp" or header.startswith("trainer/"):
        return 4
    if header in UMBRELLAS:
        return 5
    return 3


def main():
    root = os.path.join(sys.argv[1] if len(sys.argv) > 1 else "include", "tp")
    includes = {}
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".hpp"):
                path = os.path.join(folder, name)
                header = os.path.relpath(path, root).replace(os.sep, "/")
                with open(path, encoding="utf-8") as f:
                    includes[header] = re.findall(r"^#include <tp/([^>]+)>", f.read(), re.M)
    problems = []
    for header, targets in sorted(includes.items()):
        for target in targets:
            if target not in includes:
                problems.append(f"{header} includes tp/{target}, which does not exist")
            elif layer(target) > layer(header):
                problems.append(f"{header} ({NAMES[layer(header)]}) includes {target} ({NAMES[layer(target)]}), a higher layer")
    state = {}

    def visit(header, path):
        state[header] = "open"
        for target in includes.get(header, []):
            if state.get(target) == "open":
                problems.append("include cycle: " + " -> ".join(path[path.index(target):] + [target]))
            elif target in includes and target not in state:
                visit(target, path + [target])
        state[header] = "done"

    for header in sorted(includes):
        if header not in state:
            visit(header, [header])
    for p in problems:
        print("layers: " + p)
    print(f"layers: {len(includes)} headers, {sum(map(len, includes.values()))} includes, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
