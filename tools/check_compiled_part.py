#!/usr/bin/env python3
"""The compiled part (include/tp/compiled_part.hpp), checked: every header that defines functions
inside `#if TP_DEFINE_COMPILED_PART` is included by src/compiled_part.cpp (or a program that
links tp::compiled misses them at link time), includes <tp/compiled_part.hpp> itself, and
defines there only what it declares `TP_DECL`. Prints each problem and exits 1 if there is one.

    python3 tools/check_compiled_part.py [SOURCE_DIR]      (CTest: layers.compiled_part)
"""
import os
import re
import sys


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    include = os.path.join(root, "include")
    with open(os.path.join(root, "src", "compiled_part.cpp")) as f:
        compiled = set(re.findall(r"#include <(tp/[^>]+)>", f.read()))
    problems, parts = [], []
    for folder, _, files in os.walk(os.path.join(include, "tp")):
        for name in files:
            path = os.path.join(folder, name)
            header = os.path.relpath(path, include)
            if not name.endswith(".hpp") or header == "tp/compiled_part.hpp":
                continue
            with open(path) as f:
                text = f.read()
            if "#if TP_DEFINE_COMPILED_PART" not in text:
                if "TP_DECL" in text:
                    problems.append(f"{header}: uses TP_DECL but defines nothing inside #if TP_DEFINE_COMPILED_PART")
                continue
            parts.append(header)
            if header not in compiled:
                problems.append(f"{header}: has a compiled part but src/compiled_part.cpp does not include it")
            if "#include <tp/compiled_part.hpp>" not in text.split("#if TP_DEFINE_COMPILED_PART")[0]:
                problems.append(f"{header}: has a compiled part but does not include <tp/compiled_part.hpp> before it")
            defined = text.split("#if TP_DEFINE_COMPILED_PART", 1)[1]
            if not re.search(r"^TP_DECL ", defined, re.M):
                problems.append(f"{header}: its compiled part defines nothing TP_DECL")
    for header in sorted(compiled):
        if header not in parts:
            problems.append(f"src/compiled_part.cpp: includes {header}, which has no compiled part")
    for p in problems:
        print(p)
    print(f"{len(parts)} headers with a compiled part, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
