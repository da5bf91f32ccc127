#!/usr/bin/env python3
"""Writes the table of the Loader's options in docs/options.md from their declaration
(python/loadscope/_options.py), between the markers below; --check fails (in `make lint`) when
the page and the code differ."""

import sys
from pathlib import Path

from loadscope import _options
from loadscope._spec import FIELD_KINDS, SOURCE_KINDS

PAGE = Path(__file__).resolve().parent.parent / "docs" / "options.md"
BEGIN = "<!-- the Loader's options: generated from python/loadscope/_options.py by scripts/gen-options-doc.py -->"
END = "<!-- end of the generated table -->"


PIPE = "\\|"  # a | inside a cell


def code(value) -> str:
    return f"`{value!r}`"


def table() -> str:
    kinds = lambda text: ", ".join(f"`{k}`" for k in text.replace(" or ", ", ").split(", "))  # noqa: E731
    rows = ["| option | default | allowed | meaning | on resume |", "|---|---|---|---|---|",
            f"| `source` | required | {kinds(SOURCE_KINDS)}, or a `Spec` | where samples come from | the same samples |",
            f"| `fields` | required | a non-empty `dict` name → {kinds(FIELD_KINDS)} | what each batch holds; names "
            "must not start with `__` | — |"]
    resume = {_options.ALWAYS: "must match", _options.MID_EPOCH: "must match mid-epoch", _options.NEVER: "free"}
    for o in _options.OPTIONS:
        default = "required" if o.default is _options.REQUIRED else o.default_text or code(o.default)
        allowed, meaning = o.allowed.replace("{cores}", "N").replace("|", PIPE), o.meaning.replace("|", PIPE)
        rows.append(f"| `{o.name}` | {default} | {allowed} | {meaning} | {resume[o.resume]} |")
    return "\n".join(rows)


def main() -> int:
    text = PAGE.read_text()
    if BEGIN not in text or END not in text:
        print(f"gen-options-doc: {PAGE} has no markers {BEGIN!r} ... {END!r}")
        return 1
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = f"{head}{BEGIN}\n{table()}\n{END}{tail}"
    if "--check" in sys.argv:
        if new != text:
            print("gen-options-doc: docs/options.md's table differs from the declaration in "
                  "python/loadscope/_options.py: run `make options-doc`")
            return 1
        return 0
    PAGE.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
