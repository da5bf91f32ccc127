"""The first hour, second pass (part 25): a repository shaped like the classic ImageNet training
script (pytorch/examples imagenet/main.py: `train_loader` and `val_loader` made from ImageFolder
and torchvision transforms, `--workers`, `--evaluate`, DDP through `mp.spawn` with gloo, the
validation remainder evaluated through `Subset(val_loader.dataset, ...)`), with the datasets
real repositories have: stock, cut to a debug subset (`ds.samples = ds.samples[:N]`), a
`Subset`, and transforms with RandomSolarize and RandomEqualize.

For each: `bench baseline` -> `next-experiment.toml` -> `bench run`, as written, with the
correctness check between the DataLoader and the translated Loader; copied into
`experiments/`, the experiment and its factory still work as they are; and the swapped
`main.py` (two lines) trains an epoch under two gloo ranks and its `validate()` counts every
sample of the dataset once.

References: the dataset's own samples (torchvision's ImageFolder) for what must be read, and
the DataLoader's pixels for the check."""

import json
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

MAIN = '''
"""A classic ImageNet training script, small: train_loader / val_loader from ImageFolder and
torchvision transforms, DDP through mp.spawn (gloo), validate() with the remainder loader."""
import argparse
import json
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torchvision.transforms as T
from torch.utils.data import DataLoader, Subset
from torch.utils.data.distributed import DistributedSampler
from torchvision.datasets import ImageFolder

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def dataset(root, train, variant, size):
    if train:
        ops = [T.RandomSolarize(128, p=0.3), T.RandomEqualize(p=0.3)] if variant == "ops" else []
        tf = T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), *ops, T.ToTensor(), T.Normalize(MEAN, STD)])
    else:
        tf = T.Compose([T.Resize(size * 8 // 7), T.CenterCrop(size), T.ToTensor(), T.Normalize(MEAN, STD)])
    ds = ImageFolder(root, tf)
    if variant == "cut":  # a debug subset
        ds.samples = ds.samples[:75]
    elif variant == "subset":  # every other sample of the first classes
        ds = Subset(ds, [i for i, (_, y) in enumerate(ds.samples) if y < 7][::2])
    return ds


def make_loader(root="data/folder", batch_size=16, workers=2, train=True, shuffle=True, variant="stock", size=32,
                distributed=False):
    ds = dataset(root, train, variant, size)
    sampler = None
    if distributed:
        sampler = DistributedSampler(ds, shuffle=shuffle) if train else DistributedSampler(ds, shuffle=False,
                                                                                          drop_last=True)
    return DataLoader(ds, batch_size=batch_size, shuffle=train and shuffle and sampler is None, num_workers=workers,
                      pin_memory=True, sampler=sampler)


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                               torch.nn.Flatten(), torch.nn.Linear(8, 10))


def build(ctx):
    m = model()
    return {"model": m, "opt": torch.optim.SGD(m.parameters(), lr=0.01)}


def step(state, batch):
    images, target = batch
    loss = torch.nn.functional.cross_entropy(state["model"](images), target)
    loss.backward()
    state["opt"].step()
    state["opt"].zero_grad()


def validate(val_loader, net, args):
    """The classic script's: meters over this rank's loader, all-reduced, then the samples the
    DistributedSampler left out, on every rank, through a DataLoader over Subset(dataset, ...)."""
    seen = torch.zeros(2, dtype=torch.float64)  # samples, sum of labels

    def run(loader):
        with torch.no_grad():
            for images, target in loader:
                net(images)
                seen[0] += len(target)
                seen[1] += float(target.sum())

    run(val_loader)
    if args.distributed:
        dist.all_reduce(seen)
    if args.distributed and len(val_loader.sampler) * args.world_size < len(val_loader.dataset):
        rest = Subset(val_loader.dataset, range(len(val_loader.sampler) * args.world_size, len(val_loader.dataset)))
        run(DataLoader(rest, batch_size=args.batch_size, shuffle=False, num_workers=args.workers))
    return seen


def main_worker(rank, args):
    args.distributed = args.world_size > 1
    if args.distributed:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank,
                                world_size=args.world_size)
    train_loader = make_loader(args.data, args.batch_size, args.workers, train=True, variant=args.variant,
                               distributed=args.distributed)
    val_loader = make_loader(args.data, args.batch_size, args.workers, train=False, variant=args.variant,
                             distributed=args.distributed)
    if args.loadscope:  # the swap
        import loadscope as ls
        train_loader, val_loader = ls.from_dataloader(train_loader), ls.from_dataloader(val_loader)
    net = model()
    if args.distributed:
        net = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    trained = 0
    if not args.evaluate:
        for epoch in range(args.epochs):
            if args.distributed and hasattr(train_loader.sampler, "set_epoch"):
                train_loader.sampler.set_epoch(epoch)
            for images, target in train_loader:
                loss = torch.nn.functional.cross_entropy(net(images), target)
                opt.zero_grad()
                loss.backward()
                opt.step()
                trained += len(target)
    seen = validate(val_loader, net, args)
    with open(os.path.join(args.out, f"rank{rank}.json"), "w") as f:
        json.dump({"trained": trained, "validated": int(seen[0]), "label_sum": int(seen[1]),
                   "sampler_len": len(train_loader.sampler)}, f)
    if args.distributed:
        dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("data")
    p.add_argument("-j", "--workers", type=int, default=2)
    p.add_argument("-b", "--batch-size", type=int, default=16)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("-e", "--evaluate", action="store_true")
    p.add_argument("--world-size", type=int, default=1)
    p.add_argument("--variant", default="stock")
    p.add_argument("--loadscope", action="store_true")
    p.add_argument("--out", default="results/run")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        args.port = s.getsockname()[1]
    if args.world_size > 1:
        mp.spawn(main_worker, nprocs=args.world_size, args=(args,))
    else:
        main_worker(0, args)


if __name__ == "__main__":
    main()
'''


@pytest.fixture(scope="module")
def repo(tmp_path_factory, demo) -> Path:
    """The repository: main.py at its root, the data linked in, a git work tree (so
    training_repo = "auto" finds it, as in a real clone)."""
    root = tmp_path_factory.mktemp("classic")
    (root / "main.py").write_text(MAIN)
    (root / "data").symlink_to(demo)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return root


def expected(repo: Path, variant: str, train: bool = False):
    """The (path, class) pairs the variant's dataset reads, by torchvision itself."""
    sys.path.insert(0, str(repo))
    try:
        import main
        ds = main.dataset(str(repo / "data" / "folder"), train, variant, 32)
        from loadscope.swap import dataset_samples
        return dataset_samples(ds)[1]
    finally:
        sys.path.remove(str(repo))
        sys.modules.pop("main", None)


@pytest.mark.parametrize("variant", ["cut", "subset", "ops"])
def test_the_baselines_experiment_runs_as_written_and_moves_into_experiments(repo, variant):
    out = repo / "results" / "baseline" / variant
    # --workers 0 (as `main.py -j 0` runs): the DataLoader in the main process, so that no
    # repetition waits for worker processes to start; the DDP run below has its workers.
    r = subprocess.run([sys.executable, "-m", "loadscope", "bench", "baseline", "main:make_loader", "--arg",
                        f'variant="{variant}"', "--arg", "workers=0", "--setup", "main:build", "--step", "main:step",
                        "--repo", ".",
                        "--data", "data/folder", "--samples", "48", "--warmup-samples", "16", "--repetitions", "1",
                        "--out", str(out), "--quiet"], cwd=repo, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    res = json.loads((out / "baseline.json").read_text())
    assert res["next"]["factor"] == "factory" and not res["next"].get("withheld"), res["next"]
    raw = tomllib.loads((out / "next-experiment.toml").read_text())
    # Names that hold wherever the two files go in the repository.
    assert raw["training_repo"] == "auto" and raw["gate"] is True and raw["dataset"]["path"] == "data/folder"
    assert raw["factor"]["values"] == ["main:make_loader", "loadscope_factory.py:make_loadscope_loader"]
    factory = (out / "loadscope_factory.py").read_text()
    lines = {"cut": "ls.Files: its 75 (path, class) pairs", "subset": ", Subset of ",
             "ops": "RandomEqualize(p=0.3) -> ls.Op('RandomEqualize', p=0.3)"}
    assert lines[variant] in factory, factory
    if variant == "ops":
        assert "RandomSolarize(threshold=128, p=0.3) -> ls.Op('RandomSolarize', threshold=128, p=0.3)" in factory

    r = subprocess.run([sys.executable, "-m", "loadscope", "bench", "run", str(out / "next-experiment.toml"),
                        "--repetitions", "1", "--samples", "48", "--warmup-samples", "16", "--out",
                        f"results/next-{variant}", "--quiet"], cwd=repo, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads((repo / "results" / f"next-{variant}" / "summary.json").read_text())
    check = summary["correctness"]["arms"][summary["arms"][1]]
    assert check["ok"] is True and "the measured phases read the same samples" in check["detail"], check

    # Into experiments/, as they are: pytest collects it, and every arm draws a batch there.
    from loadscope.bench import baseline
    from loadscope.bench.experiment import load

    exp_dir = repo / "experiments"
    exp_dir.mkdir(exist_ok=True)
    moved = exp_dir / f"swap_{variant}.toml"
    shutil.copy(out / "next-experiment.toml", moved)
    shutil.copy(out / "loadscope_factory.py", exp_dir / "loadscope_factory.py")
    exp = load(str(moved))
    assert exp.training_repo == str(repo) and exp.gate
    assert exp.arms[1].config["factory"] == f"{exp_dir}/loadscope_factory.py:make_loadscope_loader"
    assert baseline.rehearse(str(moved), moved.read_text()) is None
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                        "experiments"], cwd=repo, capture_output=True, text=True, timeout=300)
    assert f"experiments/swap_{variant}.toml::swap_{variant}" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("variant", ["stock", "cut", "subset", "ops"])
def test_the_swapped_script_trains_and_validates_every_sample_once_under_two_ranks(repo, variant):
    pairs = expected(repo, variant)
    run = repo / "results" / f"ddp-{variant}"
    r = subprocess.run([sys.executable, "main.py", "data/folder", "--world-size", "2", "--variant", variant,
                        "--loadscope", "--out", str(run)], cwd=repo, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    ranks = [json.loads((run / f"rank{k}.json").read_text()) for k in range(2)]
    n = len(pairs)
    # validate(): every sample of the val dataset once, over both ranks and the remainder.
    for got in ranks:
        assert got["validated"] == n and got["label_sum"] == sum(y for _, y in pairs), (got, n)
    # training: the train set's every sample once over the ranks, plus at most one padded sample
    # (equal batch counts); len(sampler) counts each rank's real samples (docs/recipes.md).
    m = len(expected(repo, variant, train=True))
    assert sum(g["sampler_len"] for g in ranks) == m and 0 <= sum(g["trained"] for g in ranks) - m <= 1, (ranks, m)
