"""Plain DDP (torchrun --nproc_per_node N ddp.py --data DIR --out DIR): the loader takes this
rank's share of every epoch from torch.distributed; nothing else to configure (no sampler)."""

import argparse
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import make_loader, make_model, record  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--epochs", type=int, default=2)
    args = ap.parse_args()
    dist.init_process_group("gloo")  # "nccl" on GPUs
    model = torch.nn.parallel.DistributedDataParallel(make_model())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = [p.detach().clone() for p in model.parameters()]
    loader = make_loader(args.data, batch_size=8)
    keys = []
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)  # like DistributedSampler.set_epoch
        for images, labels, names in loader:
            loss = torch.nn.functional.cross_entropy(model(images), labels)
            opt.zero_grad()
            loss.backward()  # all-reduce: every rank must have as many batches (loadscope pads)
            opt.step()
            keys.append(list(names))
    trained = any(not torch.equal(a, p.detach()) for a, p in zip(before, model.parameters()))
    record(args.out, dist.get_rank(), dist.get_world_size(), keys, batches=len(loader), trained=trained)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
