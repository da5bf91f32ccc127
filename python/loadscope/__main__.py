"""The loadscope command line: demo, bench (run, baseline, report), index, convert, stage,
make-demo-data. `loadscope COMMAND --help` says more of each."""

from __future__ import annotations

import sys

COMMANDS = {
    "demo": "compare loadscope with torch's DataLoader on the demo dataset",
    "make-demo-data": "generate the demo dataset (python -m loadscope.datasets)",
    "bench": "A/B experiments: bench baseline FACTORY (diagnose your own pipeline as it is, and write the experiment "
             "to run next), bench run EXP.toml (run one, with a verdict), bench report DIR (rebuild a report)",
    "index": "write <shard>.idx beside tar shards (fast random access, even splits, O(1) resume)",
    "convert": "turn a folder or file list into indexed tar shards",
    "stage": "copy a dataset to local disk, verified and restartable",
}


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--version"]:
        from . import __version__, _native
        from ._version import carried_libraries

        libs = ", ".join(f"{k} {v}" for k, v in _native.library_versions().items())
        print(f"loadscope {__version__} ({libs})")
        carried = carried_libraries()
        if carried is None:
            print("built from source: the libraries above are the system's")
        else:
            print(f"wheel {carried['wheel']}: carries {len(carried['libraries'])} projects' libraries "
                  f"(licences: {carried['notice']})")
        return 0
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        import textwrap

        print("usage: loadscope COMMAND [options]    (loadscope COMMAND --help for each)\n\ncommands:")
        for name, text in COMMANDS.items():
            print(textwrap.fill(text, 100, initial_indent=f"  {name:<16} ", subsequent_indent=" " * 19))
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    if argv[0] == "demo":
        from .demo import main as run
    elif argv[0] == "bench":
        from .bench.cli import main as run
    elif argv[0] == "index":
        from .shards import main_index as run
    elif argv[0] == "convert":
        from .shards import main_convert as run
    elif argv[0] == "stage":
        from .stage import main as run
    else:
        from .datasets import main as make

        return make(argv[1:], prog="loadscope make-demo-data")
    return run(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
