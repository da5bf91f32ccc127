#!/usr/bin/env python3
"""The augmented training pipeline, swapped (issue 17; a benchmark, not a test: it asserts
nothing about speed). ImageNet-style per-sample augmentation, float output normalised:

  dataloader   torchvision: DataLoader(ImageFolder, num_workers=T) with RandomResizedCrop(224),
               RandomHorizontalFlip, RandAugment(2, 9), RandomApply([ColorJitter(.4,.4,.4,.1)], .8),
               PILToTensor, ConvertImageDtype(float32), Normalize(ImageNet)
  loadscope    the same ops per sample in C++: Image(224, flip=0.5, randaugment=RandAugment(2, 9),
               color=ColorJitter(.4, .4, .4, .1, p=.8), dtype="float32", mean, std), T threads
  loadscope-plain  loadscope without RandAugment and ColorJitter (what the augmentations cost)

The demo's real-photo JPEGs, batch 64, shuffled, 1024 samples per arm and round, a step that
only touches the batch; 5 interleaved rounds after a warm-up epoch per arm; ratios per round.

    .venv/bin/python benchmarks/bench_augment.py [--rounds 5] [--threads 2]
"""

import argparse
import statistics
from pathlib import Path

import torch
import torchvision.transforms as T
from torchvision.datasets import ImageFolder

import loadscope as ls
from loadscope import datasets
from loadscope.bench import arms as bench_arms

REPO = Path(__file__).resolve().parents[1]


def dataloader(root, threads):
    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.RandAugment(2, 9),
                    T.RandomApply([T.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8), T.PILToTensor(),
                    T.ConvertImageDtype(torch.float32), T.Normalize(ls.IMAGENET_MEAN, ls.IMAGENET_STD)])
    return torch.utils.data.DataLoader(ImageFolder(str(root), transform=tf), batch_size=64, shuffle=True,
                                       num_workers=threads, persistent_workers=False)


def loadscope_loader(root, threads, augment):
    extra = dict(randaugment=ls.RandAugment(2, 9), color=ls.ColorJitter(0.4, 0.4, 0.4, 0.1, p=0.8)) if augment else {}
    image = ls.Image(224, flip=0.5, dtype="float32", mean=ls.IMAGENET_MEAN, std=ls.IMAGENET_STD, **extra)
    return ls.Loader(ls.Folder(root), fields={"jpg": image, "cls": ls.Int()}, batch_size=64, threads=threads,
                     shuffle=True, output=("jpg", "cls"))


def capped(name, make, samples):
    """An arm whose epoch is the first `samples` samples of a fresh loader."""
    def epoch():
        n = 0
        for images, _labels in make():
            images.view(-1)[-1].item()  # a step that costs nothing
            n += images.shape[0]
            if n >= samples:
                break
        return n

    return bench_arms.Arm(name, epoch)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=ls.default_threads())
    ap.add_argument("--samples", type=int, default=1024)
    args = ap.parse_args()
    torch.set_num_threads(1)
    data = REPO / "data" / "demo"
    datasets.ensure(str(data), quiet=True)
    root = data / "folder"
    arms = [capped("dataloader", lambda: dataloader(root, args.threads), args.samples),
            capped("loadscope", lambda: loadscope_loader(root, args.threads, True), args.samples),
            capped("loadscope-plain", lambda: loadscope_loader(root, args.threads, False), args.samples)]
    rates = bench_arms.interleaved(arms, args.rounds)
    for arm in arms:
        print(f"{arm.name:<18} {statistics.median(rates[arm.name]):>8.0f} samples/s  "
              + bench_arms.format_ratio("vs dataloader", bench_arms.ratio_summary(rates[arm.name], rates["dataloader"])))


if __name__ == "__main__":
    main()
