#!/usr/bin/env python3
"""Builds tp's API reference (docs/Doxyfile) into OUT/html and checks it: fails, naming each
place and what to do, on a public name without documentation and on a link that goes nowhere.

    python3 tools/check_reference.py [--members] [OUT]   (default OUT: build-docs; `make docs`;
                                                           CTest: docs.reference)

Public: what is declared at namespace scope in namespace tp and its namespaces but `detail`
(classes, structs, concepts, functions, variables, enums, aliases). Their public members are
counted, and checked too with --members. Documentation is a `//` comment directly above the
declaration (or after a one-line one), which tools/doxygen_filter.py hands to Doxygen.

Broken: a reference Doxygen could not resolve (\\ref, #name, a Markdown link to a page it does not
have), and a link in the HTML to a file that is not there. Other warnings are printed, and do
not fail the check (another Doxygen's may differ).
"""
import html.parser
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from doxygen_filter import NAMESPACE, filter_header, scan  # noqa: E402

UNDOCUMENTED = re.compile(r"is not documented\.?$")
BROKEN = re.compile(r"unable to resolve (reference|link)|could not be resolved|explicit link request|"
                    r"image file .* not found|of \\copydoc command not found|unknown (reference|anchor)|no matching file")
TODO_UNDOCUMENTED = ("document it: a `//` comment directly above the declaration (or after it, on a one-line "
                     "one) that says what it is or does, or move it into a detail namespace if it is not API")
TODO_BROKEN = "fix the name or the link (it must name a documented entity, page or file of the reference)"
TODO_DEAD = ("a Markdown link to a file outside docs/Doxyfile's INPUT, most likely: link a page or header the "
             "reference has, or add the file to INPUT")


def filter_headers(out):
    """Every header filtered at once into OUT/filtered/<absolute path> (tools/doxygen_filter.sh)."""
    for folder, _, files in os.walk(os.path.join(ROOT, "include", "tp")):
        for name in files:
            if name.endswith(".hpp") and "detail" not in folder.split(os.sep):  # Doxyfile: EXCLUDE_PATTERNS
                path = os.path.join(folder, name)
                copy = os.path.join(out, "filtered") + path
                os.makedirs(os.path.dirname(copy), exist_ok=True)
                with open(path, encoding="utf-8") as f:
                    text = filter_header(f.read(), path)
                with open(copy, "w", encoding="utf-8") as f:
                    f.write(text)


class Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.targets = []

    def handle_starttag(self, tag, attrs):
        for key, value in attrs:
            if key in ("href", "src") and value:
                self.targets.append(value)


def broken_html_links(html_dir):
    """(page, target) for each link from a page to a local file that does not exist, or that is
    outside the reference (it works only where the HTML sits at that place in the sources)."""
    found = []
    for name in sorted(os.listdir(html_dir)):
        if not name.endswith(".html"):
            continue
        parser = Links()
        with open(os.path.join(html_dir, name), encoding="utf-8", errors="replace") as f:
            parser.feed(f.read())
        for target in parser.targets:
            path = target.split("#")[0].split("?")[0]
            if not path or re.match(r"[a-z]+:", path):
                continue  # an anchor on the page, or http:, https:, mailto:, javascript:
            full = os.path.normpath(os.path.join(html_dir, path))
            if not full.startswith(html_dir + os.sep) or not os.path.exists(full):
                found.append((name, target))
    return found


def scope(warning, scans):
    """"namespace" for a warning about a name declared at namespace scope, "member" for a class
    member, None for the rest (a macro, a page): the filter's scanner says which, at its line."""
    m = re.match(r"(.+?):(\d+): ", warning)
    if not m or " of file " in warning or not m.group(1).endswith(".hpp"):
        return None
    path = os.path.join(ROOT, m.group(1))
    if path not in scans:
        with open(path, encoding="utf-8") as f:
            scans[path] = scan(f.read().split("\n"))
    return "namespace" if scans[path][int(m.group(2)) - 1]["kind"] == NAMESPACE else "member"


def undocumented_concepts(html_dir):
    """Doxygen 1.9.4 does not warn about a concept without documentation, and lists it without
    a page: (warning, its page) for each such concept, at its declaration."""
    found, index = [], os.path.join(html_dir, "concepts.html")
    if not os.path.exists(index):
        return found
    with open(index, encoding="utf-8") as f:
        pages = sorted(set(re.findall(r'href="(concept[^"#]+\.html)"', f.read())))
    for page in pages:
        if os.path.exists(os.path.join(html_dir, page)):
            continue
        name = page[len("concept"):-len(".html")].replace("_1_1", "::").replace("__", "_")
        where = "include/tp"
        for folder, _, files in os.walk(os.path.join(ROOT, "include", "tp")):
            for header in sorted(files):
                with open(os.path.join(folder, header), encoding="utf-8") as f:
                    for number, line in enumerate(f, 1):
                        if re.search(rf"\bconcept\s+{name.rsplit('::', 1)[-1]}\b", line):
                            where = f"{os.path.relpath(os.path.join(folder, header), ROOT)}:{number}"
        found.append((f"{where}: warning: Concept {name} is not documented.", page))
    return found


def main():
    args = [a for a in sys.argv[1:] if a != "--members"]
    members = "--members" in sys.argv[1:]
    out = os.path.abspath(args[0] if args else os.path.join(ROOT, "build-docs"))
    doxygen = os.environ.get("DOXYGEN") or shutil.which("doxygen")  # CTest passes the one CMake found
    if not doxygen:
        print("check_reference: doxygen is not installed (scripts/setup.sh installs it)", file=sys.stderr)
        return 1
    start = time.monotonic()
    shutil.rmtree(os.path.join(out, "html"), ignore_errors=True)  # no page of a header since removed
    shutil.rmtree(os.path.join(out, "filtered"), ignore_errors=True)
    os.makedirs(out, exist_ok=True)
    filter_headers(out)
    run = subprocess.run([doxygen, "docs/Doxyfile"], cwd=ROOT, env=dict(os.environ, TP_DOCS_DIR=out),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if run.returncode != 0:
        print(run.stdout + f"check_reference: doxygen failed (exit {run.returncode})", file=sys.stderr)
        return 1
    with open(os.path.join(out, "warnings.log"), encoding="utf-8", errors="replace") as f:
        warnings = sorted(set(line.rstrip() for line in f if line.strip()))
    undocumented, unchecked, broken, other, scans = [], [], [], [], {}
    for line in warnings:
        line = line.replace(ROOT + os.sep, "")
        if UNDOCUMENTED.search(line):
            where = scope(line, scans)
            if where == "namespace" or (where == "member" and members):
                undocumented.append(line)
            elif where == "member":
                unchecked.append(line)
            else:
                other.append(line)
        elif BROKEN.search(line):
            broken.append(line)
        else:
            other.append(line)
    html_dir = os.path.join(out, "html")
    concepts = undocumented_concepts(html_dir)
    undocumented += [warning for warning, _ in concepts]
    dead = [(page, target) for page, target in broken_html_links(html_dir) if target not in {p for _, p in concepts}]
    for line in other:
        print(f"{line}\n    (a Doxygen warning this check does not fail on)")
    for line in undocumented:
        print(f"{line}\n    -> {TODO_UNDOCUMENTED}")
    for line in broken:
        print(f"{line}\n    -> {TODO_BROKEN}")
    for page, target in dead:
        print(f"{os.path.join(html_dir, page)}: warning: links to {target}, which the reference does not have\n"
              f"    -> {TODO_DEAD}")
    if unchecked:
        print(f"check_reference: {len(unchecked)} public members of classes without documentation "
              f"(not checked; --members lists them)")
    seconds = time.monotonic() - start
    failures = len(undocumented) + len(broken) + len(dead)
    if failures:
        print(f"check_reference: {len(undocumented)} public names without documentation, "
              f"{len(broken) + len(dead)} broken links ({seconds:.0f} s)")
        return 1
    print(f"check_reference: the reference is complete: {html_dir}/index.html ({seconds:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
