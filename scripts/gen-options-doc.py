#!/usr/bin/env python3
"""Writes, from the declaration of the Loader's options (python/loadscope/_options.py), the table
of docs/options.md (between the markers below) and the options' type,
python/loadscope/_option_types.py (``LoaderOptions``, the ``**options`` of ``Loader``, ``Dataset``
and ``Spec`` for type checkers, PEP 692); --check fails (in `make lint`) when either differs."""

import sys
from pathlib import Path

from loadscope import _options
from loadscope._spec import FIELD_KINDS, SOURCE_KINDS

PAGE = Path(__file__).resolve().parent.parent / "docs" / "options.md"
BEGIN = "<!-- the Loader's options: generated from python/loadscope/_options.py by scripts/gen-options-doc.py -->"
END = "<!-- end of the generated table -->"


TYPES = Path(__file__).resolve().parent.parent / "python" / "loadscope" / "_option_types.py"

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


def types() -> str:
    lines = ['"""The Loader\'s keyword options as a type (PEP 692), for type checkers: generated from the',
             "declaration (_options.OPTIONS) by scripts/gen-options-doc.py (`make options-doc`); `make lint`",
             'fails when it differs. Do not edit."""',
             "",
             "from __future__ import annotations",
             "",
             "import os",
             "from typing import Any, Callable, Mapping, Optional, Sequence, TypedDict, Union",
             "",
             "import torch",
             "",
             "from ._fields import Field",
             "from .ray import Workers",
             "",
             "__all__ = [\"LoaderOptions\"]",
             "",
             "",
             "class LoaderOptions(TypedDict, total=False):",
             "    fields: Mapping[str, Field]"]
    lines += [f"    {o.name}: {o.type}" for o in _options.OPTIONS]
    return "\n".join(lines) + "\n"


def main() -> int:
    text = PAGE.read_text()
    if BEGIN not in text or END not in text:
        print(f"gen-options-doc: {PAGE} has no markers {BEGIN!r} ... {END!r}")
        return 1
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = f"{head}{BEGIN}\n{table()}\n{END}{tail}"
    typed = types()
    if "--check" in sys.argv:
        stale = [str(p) for p, want in ((PAGE, new), (TYPES, typed)) if not p.exists() or p.read_text() != want]
        if stale:
            print(f"gen-options-doc: {' and '.join(stale)} differ from the declaration in "
                  "python/loadscope/_options.py: run `make options-doc`")
            return 1
        return 0
    PAGE.write_text(new)
    TYPES.write_text(typed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
