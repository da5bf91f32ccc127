"""One rank of test_distributed.py's evaluation test: the validate() of docs/recipes.md
(#evaluation-under-ddp) under a gloo group — losses summed over this rank's real samples
(padding marked by __index__), divided by len(val_loader.sampler), then all-reduced — and the
same over the whole set in one process. Writes both means as JSON."""

import json
import sys

import torch
import torch.distributed as dist

import loadscope as ls


def model() -> torch.nn.Module:
    torch.manual_seed(0)  # the same weights in every process
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 5, stride=4), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                               torch.nn.Flatten(), torch.nn.Linear(8, 10)).eval()


def val_loader(manifest: str, **ranks) -> ls.Loader:
    return ls.Loader(ls.FileList(manifest), fields={"jpg": ls.Image(32, crop="center", resize=36), "cls": ls.Int()},
                     batch_size=8, threads=1, output=("jpg", "cls", "__index__"), **ranks)


def validate(val_loader: ls.Loader, net: torch.nn.Module) -> float:
    loss_sum = torch.zeros((), dtype=torch.float64)
    with torch.no_grad():
        for images, target, index in val_loader:
            loss = torch.nn.functional.cross_entropy(net(images.float() / 255), target % 10, reduction="none")
            loss_sum += loss[index < len(val_loader.dataset)].double().sum()  # padding counted nowhere
    mean = loss_sum / len(val_loader.sampler)  # this rank's mean over its own samples
    # Weighted by each rank's share, the ranks' means add up to the mean over the whole set.
    total = mean * len(val_loader.sampler) / len(val_loader.dataset)
    if val_loader.world_size > 1:
        dist.all_reduce(total)
    return float(total)


def main() -> None:
    manifest, out = sys.argv[1], sys.argv[2]
    net = model()
    dist.init_process_group("gloo")
    loader = val_loader(manifest)
    ddp = validate(loader, net)
    info = {"ddp": ddp, "rank": dist.get_rank(), "world": loader.world_size, "sampler": len(loader.sampler),
            "batches": len(loader), "padding": loader.sampler.padding,
            "single": validate(val_loader(manifest, rank=0, world_size=1), net)}
    dist.destroy_process_group()
    with open(f"{out}.{info['rank']}.json", "w") as f:
        json.dump(info, f)


if __name__ == "__main__":
    main()
