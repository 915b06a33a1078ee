#!/usr/bin/env python3
"""Writes every ```cpp block of the given Markdown pages into C++ translation units, so that the
test docs.snippets compiles them against the headers and a snippet cannot drift from them.

    doc_snippets.py --out snippets.cpp README.md docs/guide/*.md    (prints the programs' units)

A block with `int main(` is a whole program, and a unit of its own: it must compile with the
includes it shows (and the precompiled LibTorch the compile command forces in). Any other block
is a fragment; they share one unit, and the line just above a fragment's fence must say how to
compile it:

    <!-- snippet: statements; given: flow, desc -->     the body of a function
    <!-- snippet: expression; given: env -->            one expression
    <!-- snippet: declarations; then: CODE -->          at namespace scope, then CODE in a function
    <!-- snippet: ...; cuda -->                         only where CUDA is (TP_WITH_CUDA)

Each name after `given:` is made first, as `auto NAME = snippet::NAME();`, from
tests/docs/snippet_prelude.hpp: the names the fragment's own first comment says it assumes. The
marker is an HTML comment, so the page shows nothing of it. #line directives make the compiler
name the page and line of an error. A fragment without a marker, or with an unknown kind or
name, fails here with its page and line.
"""
import argparse
import os
import re
import sys

KINDS = ("statements", "expression", "declarations")
MARKER = re.compile(r"^<!--\s*snippet:(.*)-->\s*$")


class SnippetError(Exception):
    pass


def blocks(path):
    """(first line number, marker line or None, lines) of each ```cpp block in the page."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```cpp":
            start = i + 1
            end = start
            while end < len(lines) and lines[end].strip() != "```":
                end += 1
            if end == len(lines):
                raise SnippetError(f"{path}:{i + 1}: a ```cpp block with no closing ```")
            marker = lines[i - 1] if i > 0 and MARKER.match(lines[i - 1]) else None
            yield start + 1, marker, lines[start:end]
            i = end
        i += 1


def parse_marker(where, marker, givens_known):
    fields = {}
    for part in MARKER.match(marker).group(1).split(";"):
        part = part.strip()
        key, _, value = part.partition(":")
        fields[key.strip()] = value.strip()
    kind = next((k for k in KINDS if k in fields), None)
    if kind is None:
        raise SnippetError(f"{where}: the marker names no kind; start it with one of {', '.join(KINDS)}")
    unknown = set(fields) - set(KINDS) - {"given", "then", "cuda"}
    if unknown:
        raise SnippetError(f"{where}: the marker has {', '.join(sorted(unknown))}; it may hold a kind, given:, then: and cuda")
    given = [g.strip() for g in fields.get("given", "").split(",") if g.strip()]
    for g in given:
        if g not in givens_known:
            raise SnippetError(f"{where}: `{g}` is not one the prelude makes ({', '.join(sorted(givens_known))}); "
                               f"add it to tests/docs/snippet_prelude.hpp")
    return kind, given, fields.get("then", ""), "cuda" in fields


def known_givens(prelude):
    """The names the prelude's namespace snippet makes: its `inline auto NAME()` functions."""
    with open(prelude, encoding="utf-8") as f:
        return set(re.findall(r"^inline\s+\S+\s+(\w+)\(\)", f.read(), re.M))


def translation_units(pages, prelude, root):
    """(the fragments' unit, [(file name, unit) of each whole program]), as texts."""
    givens_known = known_givens(prelude)
    # A fragment shows names that the page goes on to use, and callbacks that use only some of
    # their hooks' parameters.
    head = [f'#include "{os.path.abspath(prelude)}"', "#pragma GCC diagnostic ignored \"-Wunused-variable\"",
            "#pragma GCC diagnostic ignored \"-Wunused-but-set-variable\"", "#pragma GCC diagnostic ignored \"-Wunused-parameter\""]
    body, programs = [], []
    count = 0
    for page in pages:
        name = os.path.relpath(page, root)
        for first, marker, lines in blocks(page):
            count += 1
            where = f"{name}:{first - 1}"
            if any(re.match(r"int main\(", l) for l in lines):
                # A unit of its own, so that it compiles with its own includes only.
                stem = re.sub(r"\W", "_", os.path.splitext(name)[0])
                programs.append((f"{stem}_{first}.cpp", "\n".join([f'#line {first} "{name}"'] + lines) + "\n"))
                continue
            if marker is None:
                raise SnippetError(f"{where}: a C++ fragment needs a line just above its fence saying how to compile it, "
                                   f"such as <!-- snippet: statements; given: flow, desc --> (see tools/doc_snippets.py)")
            kind, given, then, cuda = parse_marker(where, marker, givens_known)
            guard = "#ifdef TP_WITH_CUDA" if cuda else "#ifndef TP_SNIPPETS_CUDA_ONLY"
            for n, line in enumerate(lines):
                if line.startswith("#include"):
                    head += [guard, f'#line {first + n} "{name}"', line, "#endif"]
            # Includes become blank lines: the code keeps its line numbers.
            code = ["" if l.startswith("#include") else l for l in lines]
            ns = f"doc_snippet_{count}"
            made = " ".join(f"[[maybe_unused]] auto {g} = snippet::{g}();" for g in given)
            out = [guard]
            if kind == "declarations":
                out += [f"namespace {ns} {{", f'#line {first} "{name}"'] + code
                if then:
                    out += [f'#line {first - 1} "{name}"', f"[[maybe_unused]] void then() {{ {then}; }}"]
                out += ["}"]
            else:
                opening = f"[[maybe_unused]] int run() {{ {made}" + (" (void)(" if kind == "expression" else "")
                out += [f"namespace {ns} {{", f'#line {first - 1} "{name}"', opening] + code
                out += [(");" if kind == "expression" else "") + "return 0; }", "}"]
            body += out + ["#endif"]
    if count == 0:
        raise SnippetError("no ```cpp block in " + ", ".join(pages))
    return "\n".join(head + body) + "\n", programs


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the fragments' unit; each program goes beside it")
    parser.add_argument("--prelude", default=os.path.join(os.path.dirname(__file__), "..", "tests", "docs", "snippet_prelude.hpp"))
    parser.add_argument("--root", default=".", help="the pages are named relative to it in errors")
    parser.add_argument("pages", nargs="+")
    args = parser.parse_args()
    try:
        fragments, programs = translation_units(args.pages, args.prelude, args.root)
    except (SnippetError, OSError) as e:
        print(f"doc_snippets: {e}", file=sys.stderr)
        return 1
    folder = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(folder, exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(fragments)
    for file, text in programs:
        with open(os.path.join(folder, file), "w", encoding="utf-8") as f:
            f.write(text)
    # The programs' units, one per line after the count, for the caller to compile.
    print(f"doc_snippets: a unit of fragments and {len(programs)} programs from {len(args.pages)} pages")
    for file, _ in programs:
        print(os.path.join(folder, file))
    return 0


if __name__ == "__main__":
    sys.exit(main())
