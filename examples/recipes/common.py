"""What the three recipes share: the loader a training script makes, a tiny model, and the
record of what each rank consumed (for tests/python/test_recipes.py)."""

import json
import os

import torch

import loadscope as ls


def make_loader(data: str, batch_size: int, device: str = "cpu") -> ls.Loader:
    """A training loader: its rank and world size come from torch.distributed (initialised by
    the framework before this is called) or from torchrun's RANK/WORLD_SIZE."""
    image = ls.Image(32, flip=0.5, dtype="float32", mean=ls.IMAGENET_MEAN, std=ls.IMAGENET_STD)
    return ls.Loader(ls.Folder(data), fields={"jpg": image, "cls": ls.Int()}, batch_size=batch_size,
                     shuffle=True, seed=0, threads=1, device=device, output=("jpg", "cls", "__key__"))


def make_model(classes: int = 16) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten(), torch.nn.Linear(48, classes))


def record(out: str, rank: int, world: int, keys: list, **extra) -> None:
    """One JSON file per rank: the sample keys it trained on, in order."""
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "world": world, "keys": keys, **extra}, f)
