#!/usr/bin/env python3
"""Fails when a C++ file includes across the layers the wrong way (run by the build before it
compiles: CMakeLists.txt's loadscope_check_layers).

The allowed graph is CMakeLists.txt's: `loadscope_layer(NAME ... DEPS loadscope_X ...)` lets
csrc/loadscope/NAME include its own headers and those of its direct DEPS, nothing else. The
binding (csrc/loadscope/python) sits on top and may include any layer. Third-party headers have
owners too: codecs only in decode/ and bench/, curl only in io/, pybind11 only in python/.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc" / "loadscope"
TOP = "python"  # the binding: may include every layer

# third-party header prefix -> the layers that may include it
OWNED = {
    "libav": {"decode", "bench"}, "libswscale": {"decode", "bench"}, "jpeglib.h": {"decode"},
    "jconfig.h": {"bench"}, "turbojpeg.h": {"decode", "bench"}, "curl/": {"io"}, "pybind11/": {TOP},
}


def layers() -> dict:
    text = (ROOT / "CMakeLists.txt").read_text()
    graph = {}
    for m in re.finditer(r"loadscope_layer\((\w+)(.*?)\)", text, re.S):
        deps = re.search(r"DEPS(.*)", m.group(2), re.S)
        graph[m.group(1)] = set(re.findall(r"loadscope_(\w+)", deps.group(1))) if deps else set()
    if not graph:
        sys.exit("check-layers: no loadscope_layer(...) in CMakeLists.txt")
    return graph


def main() -> int:
    graph = layers()
    wrong = []
    for path in sorted(CSRC.rglob("*")):
        if path.suffix not in (".h", ".cc"):
            continue
        layer = path.relative_to(CSRC).parts[0]
        if layer != TOP and layer not in graph:
            wrong.append(f"{path.relative_to(ROOT)}: folder {layer!r} is no loadscope_layer in CMakeLists.txt")
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            m = re.match(r'\s*#\s*include\s*([<"])([^>"]+)', line)
            if not m:
                continue
            name = m.group(2)
            where = f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
            if name.startswith("loadscope/"):
                target = name.split("/")[1]
                if layer != TOP and target != layer and target not in graph[layer]:
                    allowed = ", ".join(sorted(graph[layer])) or "none"
                    wrong.append(f"{where}: {layer}/ may include only its own headers and those of: {allowed}")
            else:
                for prefix, owners in OWNED.items():
                    if name.startswith(prefix) and layer not in owners:
                        wrong.append(f"{where}: only {', '.join(sorted(owners))}/ may include it")
    for w in wrong:
        print(w, file=sys.stderr)
    if wrong:
        print("check-layers: the includes above go against the layers (CMakeLists.txt, docs/architecture.md)",
              file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
