#!/usr/bin/env python3
"""Fails when a module of the Python package imports across its layers the wrong way, when its
modules import each other in a circle, or when one writes another object's private attribute
(`make lint`; the C++ side is scripts/check-layers.py). Every import is read, those inside
functions too.

The layers, bottom up (docs/architecture.md "The Python package"):

    base       _native (the binding), _errors, _version        import nothing of the package
    telemetry  loadscope.telemetry.*                            base only
    core       every other module at the top of the package     base, telemetry, core
    tools      bench.*, __main__, pytest_plugin, demo           the public API only (below)

"The public API" is what `import loadscope` exports (`loadscope.__all__` and `__version__`,
wherever the name is defined: `from .._errors import ConfigError` is `loadscope.ConfigError`),
the public modules (a name without a leading underscore: loadscope.telemetry, .stage, .gpu,
...) and their public names, and two documented internal modules, `_native` (the binding) and
`_version`, and the declaration of the Loader's options, `_options`; within bench/, its own modules. A private name or module used anyway is listed in EXCEPTIONS
with the reason; an exception that is no longer used fails the check too, so the list shrinks.
"""

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "python" / "loadscope"

BASE = {"loadscope._native", "loadscope._errors", "loadscope._version"}
TOOLS = ("loadscope.bench", "loadscope.__main__", "loadscope.pytest_plugin", "loadscope.demo")
# Internal modules the tools may use, documented as such (docs/architecture.md).
DOCUMENTED = {"loadscope._native", "loadscope._version", "loadscope._options"}

# (importing module, imported module, name) -> why it is allowed for now.
EXCEPTIONS = {
    ("loadscope.bench.user", "loadscope.telemetry.watcher", "_batch_len"):
        "the batch size of a user's batch, as the watcher counts it",
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path):
    """(line, imported module, name or None, under `if TYPE_CHECKING`) for every import of the
    package in `path`."""
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and ast.unparse(block.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
                   for stmt in block.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        typing = id(node) in typing_only  # annotations only: no import at run time
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "loadscope":
                    yield node.lineno, a.name, None, typing
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.split(".")[0] == "loadscope":
                target = node.module
            else:
                continue
            for a in node.names:
                sub = f"{target}.{a.name}"
                # `from . import x` of a module: the module is what is imported
                if sub in BASE or (PKG.parent / Path(*sub.split("."))).with_suffix(".py").exists() or \
                        (PKG.parent / Path(*sub.split("."))).is_dir():
                    yield node.lineno, sub, None, typing
                else:
                    yield node.lineno, target, a.name, typing


def layer(mod: str) -> str:
    if mod in BASE:
        return "base"
    if mod == "loadscope.telemetry" or mod.startswith("loadscope.telemetry."):
        return "telemetry"
    if mod.startswith(TOOLS):
        return "tools"
    return "core"


def public_names() -> set:
    tree = ast.parse((PKG / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value)) | {"__version__"}
    sys.exit("check-py-layers: loadscope/__init__.py has no __all__")


def allowed(me: str, target: str, name, public: set) -> bool:
    mine, theirs = layer(me), layer(target)
    if mine == "base":
        return False
    if mine == "telemetry":
        return theirs in ("base", "telemetry")
    if mine == "core":
        return theirs != "tools"
    # tools: within bench/ anything of bench/; else the public API
    if target.startswith("loadscope.bench") and me.startswith("loadscope.bench"):
        return True
    if target in DOCUMENTED or (target == "loadscope" and name is None):
        return True
    if name in public:  # a public name, wherever it is defined
        return True
    if target == "loadscope" or any(part.startswith("_") for part in target.split(".")[1:]):
        return False
    return name is None or not name.startswith("_")


def circles(graph: dict) -> list:
    """Every import circle among the package's modules, as a path (a -> b -> ... -> a), one per
    circle. An import inside a function counts: it only hides a circle from the interpreter."""
    found, state = [], {}

    def visit(m, path):
        state[m] = "open"
        for t in sorted(graph.get(m, ())):
            if state.get(t) == "open":
                found.append(path[path.index(t):] + [t])
            elif t not in state:
                visit(t, path + [t])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    return found


def foreign_writes(path: Path) -> list:
    """Writes of another object's private attribute (`obj._x = ...`, `obj._x[k] = ...`, `+=`),
    where `_x` is not an attribute this module's own classes keep (`self._x = ...` here): a part
    changes another part's state only through its methods."""
    tree = ast.parse(path.read_text(), str(path))
    def target_attrs(node):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            for e in (t.elts if isinstance(t, ast.Tuple) else [t]):
                while isinstance(e, ast.Subscript):
                    e = e.value
                if isinstance(e, ast.Attribute):
                    yield e
    writes = [(n, a) for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
              for a in target_attrs(n)]
    own = {a.attr for _, a in writes if isinstance(a.value, ast.Name) and a.value.id in ("self", "cls")}
    return [f"{path.relative_to(ROOT)}:{n.lineno}: writes {ast.unparse(a)}, another object's private state"
            for n, a in writes if a.attr.startswith("_") and not a.attr.startswith("__")
            and not (isinstance(a.value, ast.Name) and a.value.id in ("self", "cls")) and a.attr not in own]


def main() -> int:
    public = public_names()
    problems, used = [], set()
    graph: dict = {}
    for path in sorted(PKG.rglob("*.py")):
        me = module_name(path)
        for line, target, name, typing in imports(path):
            # The package itself (`from . import X`) is its __init__, which imports everything.
            if target != me and target != "loadscope" and path.name != "__init__.py" and not typing:
                graph.setdefault(me, set()).add(target)
            if target == me or allowed(me, target, name, public):
                continue
            if (me, target, name) in EXCEPTIONS:
                used.add((me, target, name))
                continue
            what = f"{target}.{name}" if name else target
            problems.append(f"{path.relative_to(ROOT)}:{line}: {me} ({layer(me)}) imports {what} ({layer(target)})")
    for path in sorted(PKG.rglob("*.py")):
        problems.extend(foreign_writes(path))
    for c in circles(graph):
        problems.append("import circle: " + " -> ".join(c))
    for stale in sorted(set(EXCEPTIONS) - used):
        problems.append(f"scripts/check-py-layers.py: the exception {stale} is no longer used: remove it")
    for p in problems:
        print(p)
    if problems:
        print("check-py-layers: the above goes against the Python package's layers (see this script's docstring)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
