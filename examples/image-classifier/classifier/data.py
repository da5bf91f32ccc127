"""The input pipeline: images in class folders (ImageFolder's layout and order), decoded with
PIL and augmented with torchvision, batched by a torch DataLoader — and the same pipeline on
loadscope, yielding batches of the same structure: (images uint8 [B,3,S,S], labels int64 [B],
file names)."""

import os

import torch
import torchvision.transforms as T
from torchvision.datasets import ImageFolder


def transform(train: bool, size: int):
    if train:
        return T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.PILToTensor()])
    return T.Compose([T.Resize(size * 8 // 7), T.CenterCrop(size), T.PILToTensor()])


class Images(ImageFolder):
    """ImageFolder that also returns the file name (the sample's id, for checks and logs)."""

    def __getitem__(self, i):
        image, label = super().__getitem__(i)
        return image, label, os.path.basename(self.samples[i][0])


def make_loader(root="data/demo", batch_size=64, num_workers=2, pin_memory=False, prefetch_factor=2,
                persistent_workers=False, train=True, size=224):
    dataset = Images(os.path.join(root, "folder"), transform=transform(train, size))
    extra = dict(prefetch_factor=prefetch_factor, persistent_workers=persistent_workers) if num_workers else {}
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size, num_workers=num_workers,
                                       pin_memory=pin_memory, **extra)


class _AsTuples:
    """A loadscope Loader yielding what the DataLoader above yields, so the training step is the
    same for both."""

    def __init__(self, loader):
        self.loader = loader

    def set_epoch(self, epoch):
        self.loader.set_epoch(epoch)

    def __iter__(self):
        for b in self.loader:
            yield b["jpg"], b["cls"], [os.path.basename(k) for k in b["__key__"]]


def make_loadscope_loader(root="data/demo", batch_size=64, num_workers=2, pin_memory=False, prefetch_factor=2,
                          persistent_workers=False, train=True, size=224):
    """The same samples and transforms on loadscope: decoding threads instead of worker processes
    (num_workers -> threads, "auto" for loadscope's controller; prefetch_factor may be "auto"
    too); pinned batches when pin_memory and CUDA is there; workers are threads, so there is
    nothing to persist."""
    import loadscope as ls

    image = (ls.Image(size, crop="random_resized", flip=0.5) if train
             else ls.Image(size, crop="center", resize=size * 8 // 7))
    loader = ls.Loader(ls.Folder(os.path.join(root, "folder")), fields={"jpg": image, "cls": ls.Int()},
                       batch_size=batch_size,
                       threads=num_workers if num_workers == "auto" else max(1, num_workers), prefetch=prefetch_factor,
                       device="cuda" if pin_memory and torch.cuda.is_available() else "cpu")
    return _AsTuples(loader)


def sample_ids(batch):
    """One id per sample: the file name."""
    return batch[2]
