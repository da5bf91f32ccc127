#!/usr/bin/env python3
"""`make test`'s first step: the reference files the tests compare against must be there and be
the ones the tests were written for. Checks every file MANIFEST.tsv lists (size and MD5) under
$LOADSCOPE_SHARED_DATA, by default ../shared/data/real beside this repository.

Missing or changed data is a failure here, not a quiet skip: without it the tests that need it
would pass without testing (tests/python/conftest.py and tests/cpp/helpers.h fail instead of
skipping while LOADSCOPE_REQUIRE_SHARED_DATA=1, which `make test` sets).
"""

import hashlib
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOW = ("make test needs the real reference files (images, videos, shards and their reference decodes) "
       "of the workplace's shared/data/real, next to this repository as ../shared/data/real, or at "
       "$LOADSCOPE_SHARED_DATA. Get the shared/ checkout that came with this repository, or run the "
       "tests without them with `pytest tests/python` (they then skip, and say so at the end).")


def main() -> int:
    root = os.environ.get("LOADSCOPE_SHARED_DATA") or os.path.join(os.path.dirname(REPO), "shared", "data", "real")
    manifest = os.path.join(root, "MANIFEST.tsv")
    if not os.path.isfile(manifest):
        print(f"check-shared-data: {manifest} not found.\n{HOW}", file=sys.stderr)
        return 1
    bad, total, size = [], 0, 0
    with open(manifest, encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        if header[:3] != ["path", "bytes", "md5"]:
            print(f"check-shared-data: {manifest}: unexpected header {header}", file=sys.stderr)
            return 1
        for line in f:
            if not line.strip():
                continue
            rel, nbytes, md5 = line.rstrip("\n").split("\t")[:3]
            path = os.path.join(root, rel)
            total += 1
            try:
                with open(path, "rb") as g:
                    data = g.read()
            except OSError as e:
                bad.append(f"{rel}: {e.strerror}")
                continue
            size += len(data)
            if len(data) != int(nbytes):
                bad.append(f"{rel}: {len(data)} bytes, the manifest says {nbytes}")
            elif hashlib.md5(data).hexdigest() != md5:
                bad.append(f"{rel}: MD5 differs from the manifest's")
    if total == 0 or bad:
        shown = "\n  ".join(bad[:10]) + (f"\n  ... and {len(bad) - 10} more" if len(bad) > 10 else "")
        print(f"check-shared-data: {len(bad)} of {total} files under {root} are missing or changed:\n  {shown}\n{HOW}",
              file=sys.stderr)
        return 1
    print(f"check-shared-data: {total} reference files under {root} as listed ({size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
