"""PyTorch Lightning: a LightningDataModule whose train_dataloader() returns a loadscope
Loader. Lightning would otherwise insert a DistributedSampler: `use_distributed_sampler=False`
(loadscope already reads this rank's share; a Loader is not a DataLoader, so Lightning could
not add one anyway, but say it). Lightning sets the epoch itself (loader.sampler.set_epoch);
do not call loader.set_epoch() from a hook: Lightning makes the epoch's iterator before
on_train_epoch_start runs. Lightning saves and restores the loader's state_dict() with its
checkpoints (a Loader is a stateful iterable).
`python lightning_train.py --data DIR --out DIR --devices N`."""

import argparse
import os
import sys

import lightning as L
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import make_loader, make_model, record  # noqa: E402


class Data(L.LightningDataModule):
    def __init__(self, data: str) -> None:
        super().__init__()
        self.data = data

    def train_dataloader(self):
        return make_loader(self.data, batch_size=8)  # made in each rank, after the process group


class Model(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = make_model()
        self.keys: list = []

    def training_step(self, batch, batch_idx):
        images, labels, names = batch
        self.keys.append(list(names))
        return torch.nn.functional.cross_entropy(self.net(images), labels)

    def on_train_end(self) -> None:
        record(self.trainer.default_root_dir, self.global_rank, self.trainer.world_size, self.keys)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--devices", type=int, default=1)
    args = ap.parse_args()
    trainer = L.Trainer(accelerator="cpu", devices=args.devices, strategy="ddp" if args.devices > 1 else "auto",
                        max_epochs=2, use_distributed_sampler=False, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, default_root_dir=args.out)
    trainer.fit(Model(), datamodule=Data(args.data))
    # Lightning leaves its process group up (fit may be called again); a script that ends here
    # takes it down itself, as torch asks before exit (the ddp.py recipe does the same). Once in
    # CI a rank aborted at exit without it ("terminate called without an active exception").
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
