#!/usr/bin/env python3
"""Files and functions that have grown past what a reader takes in at once.

    scripts/check_sizes.py [--max-file-lines 500] [--max-function-lines 80] [--report-only] DIR...

Walks each DIR for C++ sources (.h, .cpp, .cu, .cuh) and names every file over
--max-file-lines lines and every function over --max-function-lines lines
(from the line of its name to its closing brace). Exit status 1 if any is
found, unless --report-only (for a look at a directory the check does not
enforce). CTest runs it on examples/ (CMakeLists.txt).

A function may stay long on purpose: a line `// check_sizes: long on purpose`
(with the reason after it) anywhere in its body exempts it, and the reason is
printed with it.

Functions are found by matching braces, which is enough for this code's style:
comments, strings, character literals and preprocessor lines are blanked first;
a `{` opens a function when the text before it (back to the previous `;`, `{`
or `}`) ends in a parameter list, and it sits at namespace or class level.
Standard library only.
"""
import argparse
import os
import re
import sys

EXTENSIONS = (".h", ".cpp", ".cu", ".cuh")
EXEMPT = "check_sizes: long on purpose"
CONTROL = re.compile(r"^\s*(if|for|while|switch|catch|do|else|try)\b")
SCOPE = re.compile(r"^\s*(?:template\s*<[^{]*>\s*)?(namespace|struct|class|union|enum|extern)\b")


def blank(text):
    """The text with comments, strings, character literals and preprocessor
    lines replaced by spaces (newlines kept, so line numbers hold)."""
    out, i, n = [], 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c == "#" or (at_line_start and c in " \t" and text[i:].lstrip(" \t").startswith("#")):
            # a preprocessor line, with its backslash continuations
            while i < n:
                if text[i] == "\n" and (i == 0 or text[i - 1] != "\\"):
                    break
                out.append("\n" if text[i] == "\n" else " ")
                i += 1
            continue
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append("".join("\n" if ch == "\n" else " " for ch in text[i:end]))
            i = end
            continue
        raw = re.match(r'R"([^(\s]*)\(', text[i:i + 20])
        if raw and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = text.find(")" + raw.group(1) + '"', i)
            end = n if end < 0 else end + len(raw.group(1)) + 2
            out.append("".join("\n" if ch == "\n" else " " for ch in text[i:end]))
            i = end
            continue
        if c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # a digit separator: 1'000
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j, n - 1) - i + 1))
            i = j + 1
            continue
        out.append(c)
        at_line_start = c == "\n" or (at_line_start and c in " \t")
        i += 1
    return "".join(out)


def functions(text):
    """(name, first line, last line, body start offset, body end offset) of each function."""
    code = blank(text)
    found = []
    stack = []  # per open brace: "scope", "function" or "block"
    header_start = 0
    for i, c in enumerate(code):
        if c in ";":
            header_start = i + 1
        elif c == "{":
            header = code[header_start:i]
            inside_function = any(kind != "scope" for kind, *_ in stack)
            kind = "block"
            if not inside_function:
                stripped = re.sub(r"^\s*((public|private|protected)\s*:\s*)+", "", header).strip()
                if SCOPE.match(stripped) and not re.search(r"\)\s*$", stripped):
                    kind = "scope"
                elif re.search(r"\)[^()]*$", stripped) and not CONTROL.match(stripped) and "=" not in stripped.split("(")[0]:
                    kind = "function"
            name_match = re.search(r"([~\w:]+|operator\s*\S+)\s*\(", header)
            stack.append((kind, i, header_start, name_match.group(1) if name_match else "?"))
            header_start = i + 1
        elif c == "}":
            if stack:
                kind, start, hstart, name = stack.pop()
                if kind == "function":
                    name_offset = hstart + len(code[hstart:start]) - len(code[hstart:start].lstrip())
                    first = code.count("\n", 0, name_offset) + 1
                    last = code.count("\n", 0, i) + 1
                    found.append((name, first, last, start, i))
            header_start = i + 1
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+")
    parser.add_argument("--max-file-lines", type=int, default=500)
    parser.add_argument("--max-function-lines", type=int, default=80)
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args()
    over = 0
    for top in args.dirs:
        paths = [os.path.join(root, f) for root, _, files in os.walk(top) for f in files if f.endswith(EXTENSIONS)]
        for path in sorted(paths):
            with open(path, encoding="utf-8") as f:
                text = f.read()
            lines = text.count("\n")
            if lines > args.max_file_lines:
                print(f"{path}: {lines} lines (over {args.max_file_lines})")
                over += 1
            for name, first, last, start, end in functions(text):
                length = last - first + 1
                if length <= args.max_function_lines:
                    continue
                body = text[start:end]
                if EXEMPT in body:
                    reason = body[body.find(EXEMPT) + len(EXEMPT):].split("\n")[0].strip(" :—-")
                    print(f"{path}:{first}: {name}: {length} lines, long on purpose ({reason})")
                    continue
                print(f"{path}:{first}: {name}: {length} lines (over {args.max_function_lines})")
                over += 1
    print(f"check_sizes: {over} over the limits ({args.max_file_lines} lines a file, "
          f"{args.max_function_lines} a function) in {' '.join(args.dirs)}")
    return 1 if over and not args.report_only else 0


if __name__ == "__main__":
    sys.exit(main())
