"""The loader end to end on the project's demo data: coverage, determinism, sources, options,
and the torch DataLoader integration."""

import os

import pytest
import torch
from PIL import Image as PILImage

import loadscope as ls

FIELDS = {"jpg": ls.Image(64, flip=0.5), "cls": ls.Int(), "txt": ls.Text(), "json": ls.Json()}


def epoch(loader):
    keys, pixels, labels = [], [], []
    for b in loader:
        keys += b["__key__"]
        pixels.append(b["jpg"].clone())
        labels.append(b["cls"].clone())
    return keys, torch.cat(pixels), torch.cat(labels)


def stem(key):  # the same sample under any source: its 7-digit name
    return os.path.basename(key.rsplit(":", 1)[-1]).split(".")[0]



def test_every_sample_once_per_epoch_and_batch_shapes(demo):
    loader = ls.Loader(ls.Folder(demo / "folder"), fields=FIELDS, batch_size=32, threads=2, shuffle=True)
    assert len(loader) == 4  # 120 samples: 3 full batches and one of 24
    sizes, keys = [], []
    for b in loader:
        sizes.append(b["jpg"].shape[0])
        assert b["jpg"].dtype == torch.uint8 and b["jpg"].shape[1:] == (3, 64, 64)
        assert b["cls"].dtype == torch.int64 and b["cls"].shape == (b["jpg"].shape[0],)
        assert isinstance(b["txt"][0], str) and isinstance(b["json"][0], dict)
        assert b["__index__"].tolist() == list(range(len(keys), len(keys) + len(b["__key__"])))
        keys += b["__key__"]
    assert sizes == [32, 32, 32, 24]
    assert len(keys) == len(set(keys)) == 120
    dropped = ls.Loader(ls.Folder(demo / "folder"), fields=FIELDS, batch_size=32, drop_last=True)
    assert len(dropped) == 3 and sum(b["jpg"].shape[0] for b in dropped) == 96


def test_identical_bytes_for_1_2_and_4_threads(demo):
    runs = []
    for threads in (1, 2, 4):
        loader = ls.Loader(ls.Folder(demo / "folder"), fields=FIELDS, batch_size=16, threads=threads, shuffle=True, seed=3)
        loader.set_epoch(5)
        runs.append(epoch(loader))
    for keys, pixels, labels in runs[1:]:
        assert keys == runs[0][0]
        assert torch.equal(pixels, runs[0][1])
        assert torch.equal(labels, runs[0][2])


def test_order_and_augmentation_change_with_epoch_and_seed(demo):
    def run(seed, ep):
        loader = ls.Loader(ls.Folder(demo / "folder"), fields=FIELDS, batch_size=16, shuffle=True, seed=seed)
        loader.set_epoch(ep)
        return epoch(loader)

    a, a2, b, c = run(0, 0), run(0, 0), run(0, 1), run(1, 0)
    assert a[0] == a2[0] and torch.equal(a[1], a2[1])
    assert a[0] != b[0] and a[0] != c[0]
    assert sorted(a[0]) == sorted(b[0]) == sorted(c[0])
    # Without set_epoch, each new iteration is the next epoch, as DataLoader reshuffles.
    loader = ls.Loader(ls.Folder(demo / "folder"), fields=FIELDS, batch_size=16, shuffle=True)
    assert epoch(loader)[0] == a[0] and epoch(loader)[0] == b[0] and loader.epoch == 2


def test_folder_tar_shards_and_manifest_agree(demo):
    """The same 120 images through the three sources: the same samples, labels and pixels."""
    center = {"jpg": ls.Image(48, crop="center"), "cls": ls.Int(), "txt": ls.Text()}

    def by_stem(source):
        out = {}
        for b in ls.Loader(source, fields=center, batch_size=25, threads=2):
            for i, k in enumerate(b["__key__"]):
                out[stem(k)] = (b["jpg"][i].clone(), int(b["cls"][i]), b["txt"][i])
        return out

    folder = by_stem(ls.Folder(demo / "folder"))
    shards = by_stem(ls.WebDataset(str(demo / "shards/train-{000000..000004}.tar")))
    listed = by_stem(ls.FileList(demo / "manifest.jsonl"))
    assert folder.keys() == shards.keys() == listed.keys() and len(folder) == 120
    for k in folder:
        for other in (shards, listed):
            assert torch.equal(folder[k][0], other[k][0])
            assert folder[k][1:] == other[k][1:]


def test_folder_labels_follow_imagefolder(demo):
    from torchvision.datasets import ImageFolder

    ref = ImageFolder(str(demo / "folder"))
    src = ls.Folder(demo / "folder")
    assert src.classes == ref.classes and src.class_to_idx == ref.class_to_idx
    expected = dict(ref.samples)
    got = {}
    for b in ls.Loader(src, fields={"jpg": ls.Image(32), "cls": ls.Int()}, batch_size=50):
        got.update(zip(b["__key__"], b["cls"].tolist()))
    assert got == expected


def test_center_crop_batch_equals_torchvision_per_image(demo):
    import torchvision.transforms as T

    tf = T.Compose([T.Resize(80), T.CenterCrop(64), T.PILToTensor()])
    b = next(iter(ls.Loader(ls.Folder(demo / "folder"), fields={"jpg": ls.Image(64, crop="center", resize=80)}, batch_size=20)))
    for i, key in enumerate(b["__key__"]):
        ref = tf(PILImage.open(key).convert("RGB"))
        assert (b["jpg"][i].int() - ref.int()).abs().float().mean() <= 2.0


def test_flip_and_channels_last(demo):
    def first(**kw):
        loader = ls.Loader(ls.Folder(demo / "folder"), fields={"jpg": ls.Image(40, crop="center", **kw)}, batch_size=8)
        return next(iter(loader))["jpg"]

    plain, flipped, hwc = first(), first(flip=1.0), first(channels_last=True)
    assert torch.equal(flipped, plain.flip(-1))
    assert hwc.shape == (8, 40, 40, 3) and torch.equal(hwc.permute(0, 3, 1, 2), plain)
    # flip=0.5 flips about half of the samples, each either exactly flipped or not.
    half = ls.Loader(ls.Folder(demo / "folder"), fields={"jpg": ls.Image(40, crop="center", flip=0.5)}, batch_size=120)
    b = next(iter(half))["jpg"]
    full = ls.Loader(ls.Folder(demo / "folder"), fields={"jpg": ls.Image(40, crop="center")}, batch_size=120)
    ref = next(iter(full))["jpg"]
    same = [torch.equal(b[i], ref[i]) for i in range(120)]
    mirrored = [torch.equal(b[i], ref[i].flip(-1)) for i in range(120)]
    assert all(s or m for s, m in zip(same, mirrored))
    assert 35 <= sum(mirrored) <= 85


def test_random_resized_crop_statistics(demo):
    """Crops vary per sample and epoch and stay inside the image: the mean over many crops of
    the same image is close to the mean of the image (no black borders, no bias)."""
    src = ls.Folder(demo / "folder")
    loader = ls.Loader(src, fields={"jpg": ls.Image(32, scale=(0.08, 1.0))}, batch_size=120, threads=2)
    a, b = next(iter(loader))["jpg"], next(iter(loader))["jpg"]
    assert not torch.equal(a, b)  # epoch 0 and epoch 1 draw different crops
    assert (a.float().mean((1, 2, 3)) > 5).all()  # no all-black outputs


def test_tar_shards_shuffle_with_a_buffer(demo):
    shards = ls.WebDataset(str(demo / "shards/train-{000000..000004}.tar"), shuffle_buffer=30)
    loader = ls.Loader(shards, fields={"jpg": ls.Image(32), "cls": ls.Int()}, batch_size=10, shuffle=True)
    assert loader.samples is None and len(loader) == 12  # streamed; len() indexed the headers once
    k0, _, _ = epoch_tar(loader)
    k1, _, _ = epoch_tar(loader)
    assert sorted(k0) == sorted(k1) and len(k0) == 120 and k0 != k1
    plain = ls.Loader(ls.WebDataset(str(demo / "shards/train-{000000..000004}.tar")), fields={"jpg": ls.Image(32)}, batch_size=10)
    assert [stem(k) for k, in zip(epoch_tar(plain)[0])] == [f"{i:07d}" for i in range(120)]


def epoch_tar(loader):
    keys = []
    for b in loader:
        keys += b["__key__"]
    return keys, None, None


def test_tar_gz_shards(demo, tmp_path):
    import gzip
    import shutil

    with open(demo / "shards/train-000000.tar", "rb") as f, gzip.open(tmp_path / "s.tar.gz", "wb") as g:
        shutil.copyfileobj(f, g)
    gz = ls.Loader(ls.WebDataset(str(tmp_path / "s.tar.gz")), fields={"jpg": ls.Image(32, crop="center"), "cls": ls.Int()}, batch_size=25)
    plain = ls.Loader(ls.WebDataset(str(demo / "shards/train-000000.tar")), fields={"jpg": ls.Image(32, crop="center"), "cls": ls.Int()}, batch_size=25)
    a, b = next(iter(gz)), next(iter(plain))
    assert torch.equal(a["jpg"], b["jpg"]) and torch.equal(a["cls"], b["cls"])


@pytest.mark.parametrize("workers", [0, 2])
def test_dataset_in_torch_dataloader_gives_the_same_batches(demo, workers):
    args = dict(fields={"jpg": ls.Image(32, flip=0.5), "cls": ls.Int()}, batch_size=16, threads=1, shuffle=True)
    ref = ls.Loader(ls.Folder(demo / "folder"), **args)
    ref.set_epoch(2)
    expected = [(b["__key__"], b["jpg"].clone()) for b in ref]
    ds = ls.Dataset(ls.Folder(demo / "folder"), **args)
    ds.set_epoch(2)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers)
    got = [(b["__key__"], b["jpg"]) for b in dl]
    assert len(dl) == len(got) == len(expected) == 8
    for (k1, x1), (k2, x2) in zip(got, expected):
        assert k1 == k2 and torch.equal(x1, x2)


def test_batches_outlive_the_loader(demo):
    loader = ls.Loader(ls.Folder(demo / "folder"), fields={"jpg": ls.Image(32, crop="center")}, batch_size=60)
    kept = [b["jpg"] for b in loader]
    expected = [t.clone() for t in kept]
    del loader
    import gc

    gc.collect()
    fresh = ls.Loader(ls.Folder(demo / "folder"), fields={"jpg": ls.Image(32, crop="center")}, batch_size=60)
    for _ in fresh:  # reuse of memory elsewhere must not touch tensors still held
        pass
    for a, b in zip(kept, expected):
        assert torch.equal(a, b)


def test_pickled_loader_rebuilds(demo):
    import pickle

    loader = ls.Loader(ls.Folder(demo / "folder"), fields={"jpg": ls.Image(32, crop="center")}, batch_size=60)
    loader.set_epoch(4)
    clone = pickle.loads(pickle.dumps(loader))
    assert clone.epoch == 4
    assert torch.equal(next(iter(clone))["jpg"], next(iter(loader))["jpg"])


def test_stats_count_what_was_delivered(demo):
    loader = ls.Loader(ls.Folder(demo / "folder"), fields={"jpg": ls.Image(32)}, batch_size=50)
    for _ in loader:
        pass
    s = loader.stats()
    assert s["samples"] == 120 and s["batches"] == 3 and s["failures"] == 0
    on_disk = sum(os.path.getsize(p) for p in (demo / "folder").rglob("*.jpg"))
    assert s["bytes_read"] == on_disk
    shards = ls.Loader(ls.WebDataset(str(demo / "shards/train-{000000..000004}.tar")), fields={"jpg": ls.Image(32)}, batch_size=50)
    for _ in shards:
        pass
    assert shards.stats()["bytes_read"] > on_disk  # all members (jpg, cls, txt, json) are read


def test_tar_gz_of_several_gzip_members_with_trailing_padding_reads_like_gzip(demo, tmp_path):
    """gzip -d's rules: concatenated members are one stream, trailing zeros are ignored
    (pigz and `cat a.gz b.gz` make the first; tape-style padding the second)."""
    import gzip

    data = (demo / "shards/train-000000.tar").read_bytes()
    half = len(data) // 2 // 512 * 512
    (tmp_path / "m.tar.gz").write_bytes(gzip.compress(data[:half]) + gzip.compress(data[half:]) + b"\0" * 1024)
    import tarfile

    fields = {"jpg": ls.Image(32, crop="center"), "cls": ls.Int()}
    got = [k.split(":")[-1] for b in ls.Loader(ls.WebDataset(str(tmp_path / "m.tar.gz"), index="off"), fields=fields,
                                               batch_size=50) for k in b["__key__"]]
    with tarfile.open(demo / "shards/train-000000.tar") as tf:  # Python's tarfile as the reference
        want = list(dict.fromkeys(n.split(".", 1)[0] for n in tf.getnames()))
    assert got == want and len(got) == 25
