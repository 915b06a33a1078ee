#!/usr/bin/env python3
"""Doxygen's input filter for tp's headers (docs/Doxyfile): prints what Doxygen parses instead of
the header. tp documents its API in plain `//` comments (the house style); Doxygen reads `///`.

  - The block at the top of a header (after `#pragma once`) documents the file, and is copied
    onto the entity it names first ("EarlyStopping: ...", "tp::make_trainer(...): ...") so that
    the class or function page shows the contract too.
  - A run of `//` lines directly above a declaration at namespace or class scope documents that
    declaration (or, above a `#define`, the macro); a `//` after a one-line declaration there
    (`int x;  // ...`, an enumerator, `int f() { return f_; }  // ...`) documents it too (`///<`).
  - Every other comment stays plain: inside function bodies, above a blank line, an access
    specifier, another preprocessor line or a `}`, and anything in a `detail` namespace.
  - In a documentation block, the first sentence is the summary (\\brief ... \\details), indented
    runs (examples, aligned tables) become <pre> blocks, and the characters Doxygen would read as
    commands or HTML are escaped, so that the text reads as it does in the header.

It never adds or removes a line: Doxygen's "Definition at line N" points into the header.

    python3 tools/doxygen_filter.py HEADER      (Doxygen runs it through doxygen_filter.sh)
"""
import re
import sys

NAMESPACE, CLASS, ENUM, BLOCK = "namespace", "class", "enum", "block"
DOC_SCOPES = (NAMESPACE, CLASS, ENUM)
SECTION = re.compile(r"\s*//\s*(-{3,}|={3,})")  # "// --- loop state ---": a title, documents nothing
ABBREVIATIONS = ("e.g.", "i.e.", "vs.", "etc.", "al.", "cf.")


# --- where each line is: the scope its code is in, and its comments -------------------------

def strip_template_headers(text):
    """`template <class T> struct X` -> `struct X`: the template's `class` is not the entity's."""
    while True:
        m = re.match(r"\s*template\s*<", text)
        if not m:
            return text
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"<": 1, ">": -1}.get(text[i], 0)
            i += 1
        text = text[i:]


def brace_kind(prefix, parent):
    """What a `{` opens, from the code since the last `;`, `{` or `}` before it."""
    if parent not in (NAMESPACE, CLASS):
        return BLOCK  # inside a function body, an enum or an initializer: nothing is documented
    if re.search(r"\bnamespace\b", prefix) or re.match(r'\s*extern\s+"C', prefix):
        return NAMESPACE
    head = strip_template_headers(prefix)
    if re.match(r"\s*enum\b", head):
        return ENUM
    if re.match(r"\s*(\[\[[^\]]*\]\]\s*)*(class|struct|union)\b", head) and "(" not in head and "=" not in head:
        return CLASS
    return BLOCK  # a function body, a lambda, a requires-expression, a braced initializer


def scan(lines):
    """Per line: the kind of scope it starts in, the namespaces around it, the line its statement
    began on, whether it is only a `//` comment, and the column of a trailing `//` comment."""
    stack = [(NAMESPACE, "")]
    prefix, stmt_start = "", None  # the code of the statement under way, and its first line
    in_block_comment = continued_directive = False
    info = []
    for n, line in enumerate(lines):
        row = {"kind": stack[-1][0], "ns": [name for kind, name in stack if name],
               "stmt_start": stmt_start if prefix.strip() else n, "comment_only": False,
               "directive": False, "trailing": None, "code": ""}
        info.append(row)
        stripped = line.strip()
        if not in_block_comment and stripped.startswith("//"):
            row["comment_only"] = True
            continue
        if continued_directive or (not in_block_comment and stripped.startswith("#")):
            row["directive"], continued_directive = True, line.endswith("\\")
            continue
        i, code = 0, []
        while i < len(line):
            c = line[i]
            if in_block_comment:
                end = line.find("*/", i)
                in_block_comment, i = end < 0, len(line) if end < 0 else end + 2
                continue
            if line.startswith("//", i):
                row["trailing"] = i
                break
            if line.startswith("/*", i):
                in_block_comment, i = True, i + 2
                continue
            word_before = i and (line[i - 1].isalnum() or line[i - 1] == "_")
            raw = re.match(r'R"([^(\s]*)\(', line[i:])
            if raw and not word_before:  # a raw string (tp's are on one line)
                end = line.find(")" + raw.group(1) + '"', i)
                i, c = len(line) if end < 0 else end + len(raw.group(1)) + 2, '""'
            elif c == '"' or (c == "'" and not word_before):  # after a digit, ' separates digits
                j = i + 1
                while j < len(line) and line[j] != c:
                    j += 2 if line[j] == "\\" else 1
                i, c = j + 1, c + c
            else:
                i += 1
            if c == "{":
                kind = brace_kind(prefix, stack[-1][0])
                name = re.search(r"\bnamespace\s+([\w:]+)", prefix) if kind == NAMESPACE else None
                stack.append((kind, name.group(1) if name else ""))
            elif c == "}" and len(stack) > 1:
                stack.pop()
            if c in "{};":
                prefix, stmt_start = "", None
            else:
                if not prefix.strip() and not c.isspace():
                    stmt_start = n
                prefix += c
                if c == ":" and re.fullmatch(r"\s*(public|private|protected)\s*:", prefix):
                    prefix, stmt_start = "", None  # an access specifier ends no statement but starts the next
            code.append(c)
        row["code"] = "".join(code)
        prefix += " "
    return info


def private(row):
    return any(name == "detail" or name.endswith("::detail") or "::detail::" in name for name in row["ns"])


def documentable(line, row):
    """Whether a comment directly above this line documents what it declares."""
    s = line.strip()
    if row["directive"]:  # a macro is documented, other directives (#include, #if) are not
        return s.startswith("#define") and row["kind"] == NAMESPACE and not private(row)
    if not s or row["comment_only"] or row["kind"] not in DOC_SCOPES or private(row):
        return False
    return not (s.startswith(("}", "static_assert", "friend ")) or re.match(r"(public|private|protected)\s*:", s))


# --- a comment's text as Doxygen documentation ------------------------------------------------

def escape(text, pre=False):
    """What Doxygen would read as a command, an HTML tag or a link, escaped: outside `code` in
    text (Markdown keeps a code span as it is), everywhere in a <pre> block, where a code span's
    `::` is escaped too (Doxygen reads "`torch::nn" as a link to ::nn)."""
    parts = re.split(r"(`[^`]*`)", text)
    for k, part in enumerate(parts):
        if k % 2 == 0 or pre:
            part = re.sub(r"([\\@#%]|<(?=[/A-Za-z_]))", r"\\\1", part)
            part = re.sub(r"(?<!\w)::" if k % 2 == 0 else "::", r"\\::", part)
        parts[k] = part
    return "".join(parts)


def sentence_end(text):
    """The index just past the first sentence's full stop in text, or None: a `.` followed by a
    space or the line's end, outside `code`, quotes and parentheses, not ending an abbreviation."""
    depth, quoted, span = 0, False, False
    for i, c in enumerate(text):
        if c == "`":
            span = not span
        elif span:
            continue
        elif c == '"':
            quoted = not quoted
        elif c in "([":
            depth += 1
        elif c in ")]":
            depth = max(0, depth - 1)
        elif c == "." and not depth and not quoted and (i + 1 == len(text) or text[i + 1] == " ") \
                and not text[:i + 1].endswith(ABBREVIATIONS) and not text[:i].endswith(".."):
            return i + 1
    return None


def indent(text):
    return len(text) - len(text.lstrip(" "))


def document(body):
    """A comment block's lines (each the text after `//`) -> Doxygen's text for them."""
    n = len(body)
    # Indented runs (after a blank line: an example; after a line of text: an aligned table) are
    # preformatted. The indented continuation of a list item ("- ...") stays in the item.
    pre = [False] * n
    item_indent, i = None, 0
    while i < n:
        text = body[i]
        item = re.match(r" *([-*]|\d+\.) ", text)
        if item:
            item_indent = item.end()
        elif not text.strip():
            item_indent = None
        if text.strip() and indent(text) >= 3 and not (item_indent is not None and indent(text) <= item_indent + 1):
            j = i
            while j < n and (not body[j].strip() or indent(body[j]) >= 3):
                j += 1
            while not body[j - 1].strip():
                j -= 1
            pre[i:j] = [True] * (j - i)
            i = j
        else:
            i += 1
    out = [escape(text, is_pre) for text, is_pre in zip(body, pre)]
    # The summary: the first sentence of the first paragraph (when the block starts with text),
    # or the whole paragraph (\brief ends at a blank line) when it has no full stop.
    if n and not pre[0] and out[0].strip():
        out[0] = re.sub(r"^( ?)", r"\1\\brief ", out[0], count=1)
        for k in range(n):
            if not out[k].strip():
                break
            if pre[k]:  # "...in fluent style:" and an example right below: the summary ends there
                out[k - 1] += " \\details"
                break
            end = sentence_end(out[k])
            if end is not None:
                last = k + 1 == n or pre[k + 1] or not out[k + 1].strip()
                if end < len(out[k].rstrip()) or not last:
                    out[k] = out[k][:end] + " \\details" + out[k][end:]
                break
    for k in range(n):
        if pre[k] and (k == 0 or not pre[k - 1]):
            if k:
                out[k - 1] += " <pre>"
            else:
                out[k] = "<pre>" + out[k]
        if pre[k] and (k + 1 == n or not pre[k + 1]):
            out[k] += "</pre>"
    return out


def convert_run(lines, start, end, marker="///"):
    """The `//` lines start..end-1 as one documentation block."""
    cols = [lines[k].index("//") for k in range(start, end)]
    body = document([lines[k][c + 2:] for k, c in zip(range(start, end), cols)])
    for k, c, text in zip(range(start, end), cols, body):
        lines[k] = lines[k][:c] + marker + text


# --- the entity a header is about -------------------------------------------------------------

def main_entities(first_line, file_name):
    """The names a top block starts with ("EarlyStopping: ...", "tp::Trainer<...>: ...",
    "tp::callbacks(a, b, ...): ...", "MinSaver and MaxSaver: "), else their LibTorch module
    implementations (ScriptedModuleImpl), else the file's name, as it is or in CamelCase
    (train_options.hpp: TrainOptions): the first of these lists that names a declaration wins."""
    text = re.sub(r"^\s*//\s*", "", first_line)
    name = r"(?:tp::)?(?:\w+::)*(\w+)(?:<[^:]*>|\([^:]*\))?"
    m = re.match(rf"{name}(?: and {name})?:", text)
    named = [g for g in (m.groups() if m else ()) if g]
    stem = file_name.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    return [named, [n + "Impl" for n in named], [stem, stem.title().replace("_", "")]]


def first_declaration(info, name):
    """The line of the first declaration of `name` at namespace scope outside detail, or None."""
    for k, row in enumerate(info):
        if row["kind"] == NAMESPACE and not private(row) and not row["comment_only"] and not row["directive"] \
                and row["stmt_start"] == k and row["code"].strip() and declares(statement(info, k), name):
            return k
    return None


def declares(code, name):
    """Whether a statement's code declares `name` (a class, concept, alias, variable or function)."""
    if re.search(rf"\b(class|struct|union|concept)\s+{name}\b(?!\s*;)", code) or re.search(rf"\busing\s+{name}\s*=", code) \
            or re.match(rf"\s*TORCH_MODULE\(\s*{name}\s*\)", code):
        return True
    if re.search(rf"\b(inline|constexpr)\b[^=(]*\b{name}\s*(=|\{{)", code):
        return True
    return bool(re.search(rf"(?<![.>\w:]){name}\s*\(", code)) and not re.match(r"\s*(return|if|for|while)\b", code)


def statement(info, k):
    """The code of the statement that starts on line k, up to its first `{` or `;`."""
    code = ""
    for row in info[k:k + 12]:
        code += " " + row["code"]
        if re.search(r"[;{]", row["code"]):
            break
    return code


# --- the header -------------------------------------------------------------------------------

def filter_header(text, path):
    lines = text.split("\n")
    info = scan(lines)
    documented = set()  # lines that start a declaration with documentation of its own
    # The top block documents the file (\file on the `#pragma once` line, which Doxygen needs not).
    top = 1 if lines and lines[0].strip() == "#pragma once" else 0
    end = top
    while end < len(lines) and info[end]["comment_only"]:
        end += 1
    if end > top:
        convert_run(lines, top, end)
        if top:
            lines[0] = "/// \\file"
    # Trailing comments of one-line declarations (`int x;  // ...`, `maximize,  // ...`,
    # `int f() const { return f_; }  // ...`).
    trailing = set()
    for k, row in enumerate(info):
        code = row["code"].strip()
        if row["trailing"] is None or row["kind"] not in DOC_SCOPES or row["stmt_start"] != k or private(row):
            continue
        one_line = (code.endswith(";") or (row["kind"] == ENUM and re.fullmatch(r"\w+(\s*=\s*[^,]+)?\s*,?", code))
                    or (re.search(r"\)[^{}]*\{.*\}$", code) and code.count("{") == code.count("}")))  # f() { ... }
        if one_line and not code.startswith(("static_assert", "friend ", "using namespace", "}")):
            trailing.add(k)
    # Comment runs directly above declarations, or continuing a trailing comment at its column.
    n = end
    while n < len(lines):
        if not info[n]["comment_only"]:
            n += 1
            continue
        start = n
        while n < len(lines) and info[n]["comment_only"]:
            if SECTION.match(lines[n]):
                start = n + 1
            n += 1
        if start == n:
            continue  # only a section's title
        if start - 1 in trailing - documented and lines[start].index("//") == info[start - 1]["trailing"]:
            for k in range(start, n):
                lines[k] = lines[k].replace("//", "///<", 1)
        elif n < len(lines) and documentable(lines[n], info[n]):
            convert_run(lines, start, n)
            documented.add(n)
    for k in sorted(trailing - documented):  # a declaration documented above keeps its note plain
        col = info[k]["trailing"]
        note = escape(lines[k][col + 2:].lstrip())
        continued = k + 1 < len(lines) and lines[k + 1].lstrip().startswith("///<")
        # One line in /**< */: Doxygen would join a ///< line to a /// block right below it.
        lines[k] = lines[k][:col] + ("///< " + note if continued else "/**< " + note.replace("*/", "* /") + " */")
    # The top block's contract on the entities it names first, or else on the one the file is
    # named after (train_options.hpp: TrainOptions), unless it has documentation of its own.
    if end > top:
        file_name = re.sub(r"^.*?\binclude/", "", path.replace("\\", "/"))
        for names in main_entities(text.split("\n")[top], file_name):
            found = [k for k in (first_declaration(info, name) for name in names) if k is not None]
            for k in found:
                if k not in documented:
                    lines[k] = f"/** \\copydoc {file_name} */ " + lines[k]
            if found:
                break
    return "\n".join(lines)


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        sys.stdout.write(filter_header(f.read(), sys.argv[1]))
