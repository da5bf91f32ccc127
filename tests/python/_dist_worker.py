"""One rank of the multi-process tests (test_distributed.py): started with torchrun's variables
(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), joins a gloo group, and for each layout reads two
epochs with an all-reduce per step — a rank with one batch more would wait there forever —
then writes what it saw as JSON."""

import json
import sys

import torch
import torch.distributed as dist

import loadscope as ls


def source(layout, spec):
    if layout == "folder":
        return ls.Folder(spec["folder"])
    if layout == "list":
        return ls.FileList(spec["manifest"])
    return ls.WebDataset(spec["tars"] if layout == "tar" else spec["indexed"])


def main() -> None:
    spec = json.load(open(sys.argv[1]))
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    out = {"rank": rank, "layouts": {}}
    for layout in spec["layouts"]:
        loader = ls.Loader(source(layout, spec), fields={"cls": ls.Int()}, batch_size=spec["batch_size"],
                           shuffle=True, seed=5, threads=1, drop_last=spec.get("drop_last", False))
        epochs = []
        for epoch in range(2):
            loader.set_epoch(epoch)
            keys = []
            for b in loader:
                keys.append(list(b["__key__"]))
                dist.all_reduce(torch.ones(1))  # the step's collective
            epochs.append(keys)
        out["layouts"][layout] = {"epochs": epochs, "len": len(loader), "world": loader.world_size,
                                  "from": loader.rank_from}
        g = ls.telemetry.gather(loader)
        out["layouts"][layout]["gather"] = {"ranks": [r["rank"] for r in g["ranks"]], "straggler": g["straggler"]["rank"]}
    json.dump(out, open(f"{sys.argv[2]}.{rank}.json", "w"))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
