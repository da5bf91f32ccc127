#!/usr/bin/env python3
"""Fails when a C++ file includes across the layers the wrong way (run by the build before it
compiles: CMakeLists.txt's loadscope_check_layers).

The allowed graph is CMakeLists.txt's: `loadscope_layer(NAME ... DEPS loadscope_X ...)` lets
csrc/loadscope/NAME include its own headers and those of its direct DEPS, nothing else, and the
graph must have no cycle. The binding (csrc/loadscope/python) sits on top and may include any
layer. Project headers are included by their path from csrc/ ("loadscope/..."), so that every
one is checked; every file under csrc/loadscope is a .h or a .cc. Third-party headers have
owners too: codecs only in decode/ and bench/, curl only in io/, pybind11 only in python/.
No file is longer than MAX_LINES.
"""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CSRC = ROOT / "csrc" / "loadscope"
TOP = "python"  # the binding: may include every layer
MAX_LINES = 900  # a file longer than this holds several steps (part 19)

# third-party header prefix -> the layers that may include it
OWNED = {
    "libav": {"decode", "bench"}, "libswscale": {"decode", "bench"}, "jpeglib.h": {"decode"},
    "webp/": {"decode", "bench"}, "jconfig.h": {"bench"}, "turbojpeg.h": {"decode", "bench"}, "curl/": {"io"}, "pybind11/": {TOP},
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


def cycles(graph: dict) -> list:
    """Every dependency cycle found by a depth-first walk (a layer graph must have none)."""
    found, state = [], {}

    def walk(node: str, path: list) -> None:
        state[node] = "open"
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == "open":
                found.append(path[path.index(dep):] + [dep])
            elif dep not in state:
                walk(dep, path + [dep])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            walk(node, [node])
    return found


def main() -> int:
    graph = layers()
    wrong = [f"CMakeLists.txt: the layers depend on each other in a cycle: {' -> '.join(c)}" for c in cycles(graph)]
    for path in sorted(CSRC.rglob("*")):
        if path.is_dir() or path.name == "README.md":
            continue
        if path.suffix not in (".h", ".cc"):
            wrong.append(f"{path.relative_to(ROOT)}: not a .h or .cc file, which this check would not read")
            continue
        layer = path.relative_to(CSRC).parts[0]
        if layer != TOP and layer not in graph:
            wrong.append(f"{path.relative_to(ROOT)}: folder {layer!r} is no loadscope_layer in CMakeLists.txt")
            continue
        lines = path.read_text().splitlines()
        if len(lines) > MAX_LINES:
            wrong.append(f"{path.relative_to(ROOT)}: {len(lines)} lines; a file over {MAX_LINES} holds several steps: "
                         "split it into named parts (as decode/video/ is)")
        for n, line in enumerate(lines, 1):
            m = re.match(r'\s*#\s*include\s*([<"])([^>"]+)', line)
            if not m:
                continue
            name = m.group(2)
            where = f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
            if m.group(1) == '"' and not name.startswith("loadscope/"):
                wrong.append(f'{where}: include loadscope\'s headers by their path from csrc/ ("loadscope/...")')
            elif name.startswith("loadscope/"):
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
        print("check-layers: the above goes against the layers (CMakeLists.txt, docs/architecture.md)",
              file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
