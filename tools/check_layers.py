#!/usr/bin/env python3
"""The include layering of docs/DESIGN.md ("Layers"), checked: every header under include/tp
includes only headers of its own layer or lower ones, no header reaches itself through its
includes, and no header includes another feature's detail/ folder (what several features share
lives in io/). Prints each violation and exits 1 if there is one.

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
# Includes into another feature's detail/ that predate the rule; each is to move (the distributed
# work into one distributed/ feature, the trainer's markers to a shared place). The list only shrinks.
KNOWN_CROSS_DETAIL = {
    ("sharded.hpp", "policies/distribution/detail/unit_runtime.hpp"),
    ("trainer/trainer_state.hpp", "checkpoint/detail/generator_state.hpp"),
    ("trainer/trainer_state.hpp", "checkpoint/detail/parameter_pieces.hpp"),
    ("policies/distribution/detail/parameter_units.hpp", "checkpoint/detail/parameter_pieces.hpp"),
    ("policies/distribution/detail/run_tower.hpp", "trainer/detail/phase_marker.hpp"),
    ("policies/distribution/detail/micro_batches.hpp", "trainer/detail/phase_marker.hpp"),
    ("policies/distribution/detail/tower_threads.hpp", "trainer/detail/phase_marker.hpp"),
    ("policies/comm/nccl_backend.hpp", "policies/distribution/detail/collective_group.hpp"),
    ("policies/comm/gloo.hpp", "policies/distribution/detail/collective_group.hpp"),
    ("predictor.hpp", "policies/distribution/detail/tower_set.hpp"),
    ("trainer.hpp", "monitors/detail/image.hpp"),
    ("callbacks/detail/forward_hooks.hpp", "trainer/detail/state_key.hpp"),
    ("callbacks/filter_images.hpp", "policies/distribution/detail/unit_runtime.hpp"),
    ("model_summary.hpp", "policies/distribution/detail/unit_runtime.hpp"),
    ("distributed/evaluate_across.hpp", "policies/distribution/detail/collective_group.hpp"),
}
NAMES = ["vocabulary", "concepts", "detail", "parts", "trainer", "umbrella"]


def layer(header):
    stem = header[:-len(".hpp")]
    if stem in VOCABULARY:
        return 0
    if header.startswith("concepts/"):
        return 1
    if header.startswith("io/"):  # files, folders and checksums that several features share
        return 2
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
    crossings = set()
    for header, targets in includes.items():
        for target in targets:
            if "/detail/" in target:
                feature = target.split("/detail/")[0]
                if not (header.startswith(feature + "/") or header == feature + ".hpp"):
                    crossings.add((header, target))
    for header, target in sorted(crossings - KNOWN_CROSS_DETAIL):
        problems.append(f"{header} includes {target}, another feature's detail/; move what both use to io/ (or the feature's public part)")
    for header, target in sorted(KNOWN_CROSS_DETAIL - crossings):
        problems.append(f"{header} no longer includes {target}: remove the pair from KNOWN_CROSS_DETAIL")
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
    print(f"layers: {len(includes)} headers, {sum(map(len, includes.values()))} includes, "
          f"{len(crossings)} into another feature's detail/, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
