"""The Python smoke run of `make asan`: the extension built with ASan + UBSan, driven through
the public API over every source, field and policy once (scripts/sanitize.sh)."""

import json
import os
import shutil
import sys
import tempfile

import torch

import loadscope as ls
from loadscope import datasets, shards

root = tempfile.mkdtemp(prefix="loadscope-asan-")
try:
    demo = os.path.join(root, "demo")
    datasets.generate(demo, images=60, seed=0, shard_size=16, quiet=True,
                      videos=2 if shutil.which("ffmpeg") else 0, video_shard_size=2)
    # a damaged copy of one image, to exercise the skip path
    with open(os.path.join(demo, "manifest.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    bad = os.path.join(root, "bad.jpg")
    with open(os.path.join(demo, rows[0]["path"]), "rb") as f:
        data = f.read()
    with open(bad, "wb") as f:
        f.write(data[: len(data) // 2])
    with open(os.path.join(root, "list.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps({"path": os.path.join(demo, r["path"]), "cls": r["cls"]}) + "\n")
        f.write(json.dumps({"path": bad, "cls": 0}) + "\n")
    tars = sorted(os.path.join(demo, "shards", n) for n in os.listdir(os.path.join(demo, "shards")))
    indexed_dir = os.path.join(root, "indexed")
    os.makedirs(indexed_dir)
    indexed = []
    for t in tars:
        shutil.copy(t, indexed_dir)
        indexed.append(os.path.join(indexed_dir, os.path.basename(t)))
    shards.index(indexed)
    n = 0
    for name, src, kw in [
        ("folder", ls.Folder(os.path.join(demo, "folder")), {}),
        ("list+skip", ls.FileList(os.path.join(root, "list.jsonl")), {"on_error": "skip"}),
        ("tar", ls.WebDataset(tars, index="off"), {"shuffle": True}),
        ("indexed, rank 1 of 3", ls.WebDataset(indexed), {"rank": 1, "world_size": 3, "shuffle": True}),
    ]:
        loader = ls.Loader(src, fields={"jpg": ls.Image(48, flip=0.5), "cls": ls.Int()}, batch_size=8, threads=2, **kw)
        for b in loader:
            n += len(b["cls"])
        it = iter(loader)
        next(it)
        state = loader.state_dict()
        del it
        again = ls.Loader(src, fields={"jpg": ls.Image(48, flip=0.5), "cls": ls.Int()}, batch_size=8, threads=1, **kw)
        again.load_state_dict(state)
        n += sum(len(b["cls"]) for b in again)
        print(f"{name}: ok", flush=True)
    if os.path.isdir(os.path.join(demo, "videos")):
        loader = ls.Loader(ls.FileList(os.path.join(demo, "videos.jsonl")),
                           fields={"mp4": ls.VideoClip(32, frames=4, stride=2)}, batch_size=2, threads=2)
        n += sum(b["mp4"].shape[0] for b in loader)
        print("video: ok", flush=True)
    ds = ls.Dataset(ls.Folder(os.path.join(demo, "folder")), fields={"jpg": ls.Image(32)}, batch_size=8, threads=1)
    n += sum(len(b["__key__"]) for b in torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2))
    print(f"sanitize smoke: {n} samples through the sanitized extension")
finally:
    shutil.rmtree(root, ignore_errors=True)
sys.exit(0)
