#!/usr/bin/env python3
"""What each test cost: the ten slowest tests and the test time per label and per family.

Reads the reports scripts/ctest_timed.sh keeps in a folder (RUN.xml, CTest's JUnit report, and
RUN.json, the tests' labels), one pair per CTest run (the host suite, each kernel of the kernel
matrix, Debian 13's suite, clang's compile checks). .ci/run prints it after its stage table.
Test time is the sum over tests; with tests side by side it is about twice the wall time on 2
cores. A family is the part of a test's name before its first dot (example, compile_fail,
cuda_syntax, docs; a GoogleTest suite of tp_tests is a family of its own name).

    tools/test_times.py FOLDER
"""
import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def runs(folder):
    """(run, [(test, seconds, labels)]) for each report in the folder, in the order they were made."""
    for xml in sorted(folder.glob("*.xml"), key=lambda p: p.stat().st_mtime):
        labels = {}
        listing = xml.with_suffix(".json")
        if listing.exists():
            for test in json.loads(listing.read_text()).get("tests", []):
                for prop in test.get("properties", []):
                    if prop["name"] == "LABELS":
                        labels[test["name"]] = prop["value"]
        try:
            cases = ET.parse(xml).getroot().iter("testcase")
            yield xml.stem, [(c.get("name"), float(c.get("time", 0)), labels.get(c.get("name"), []))
                             for c in cases if c.get("status") != "notrun"]
        except ET.ParseError as error:
            print(f"test_times: {xml} is not a complete report ({error}); left out", file=sys.stderr)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: tools/test_times.py FOLDER")
    folder = Path(sys.argv[1])
    reports = list(runs(folder)) if folder.is_dir() else []
    if not reports:
        print(f"== test times: no CTest report in {folder}")
        return
    every = [(seconds, test, run) for run, tests in reports for test, seconds, _ in tests]
    print("== The ten slowest tests (test time)")
    for seconds, test, run in sorted(every, reverse=True)[:10]:
        print(f"  {seconds:7.1f} s  {test}  ({run})")
    print("== Test time per run, label and family (a test with two labels counts under both)")
    for run, tests in reports:
        total = sum(seconds for _, seconds, _ in tests)
        print(f"  {run}: {len(tests)} tests, {total:.0f} s")
        by_label, by_family = defaultdict(float), defaultdict(float)
        for test, seconds, labels in tests:
            for label in labels or ["(no label)"]:
                by_label[label] += seconds
            by_family[test.split(".")[0] if "." in test else "tp_tests suites"] += seconds
        print("    labels:   " + ", ".join(f"{k} {v:.0f} s" for k, v in sorted(by_label.items(), key=lambda kv: -kv[1])))
        print("    families: " + ", ".join(f"{k} {v:.0f} s" for k, v in sorted(by_family.items(), key=lambda kv: -kv[1])))


if __name__ == "__main__":
    main()
