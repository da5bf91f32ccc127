"""The swap a user makes from an ImageFolder + DataLoader loop (docs/getting-started.md): tuple
batches, the mistakes people make with DataLoader, len() of shards, the console script."""

import os

import pytest
import torch

import loadscope as ls


def test_tuple_output_unpacks_like_an_imagefolder_dataloader(demo):
    fields = {"jpg": ls.Image(32, flip=0.5), "cls": ls.Int()}
    as_dict = list(ls.Loader(ls.Folder(demo / "folder"), fields=fields, batch_size=16, seed=3))
    loader = ls.Loader(ls.Folder(demo / "folder"), fields=fields, batch_size=16, seed=3, output=("jpg", "cls"))
    n = 0
    for (images, labels), d in zip(loader, as_dict):
        assert torch.equal(images, d["jpg"]) and torch.equal(labels, d["cls"])
        n += 1
    assert n == len(as_dict) > 1
    keyed = ls.Loader(ls.Folder(demo / "folder"), fields=fields, batch_size=16, output=["__key__", "cls"])
    keys, labels = next(iter(keyed))
    assert keys == as_dict[0]["__key__"] and torch.equal(labels, as_dict[0]["cls"])


@pytest.mark.parametrize("output,message", [
    (("jpg", "label"), r"'label' is not an entry of the batch; entries: jpg, cls, __key__, __index__"),
    ("tuple", r"output='tuple': allowed are 'dict', or a tuple of entry names"),
    ((), r"output=\(\): allowed are 'dict', or a tuple"),
])
def test_a_wrong_output_lists_the_entries(demo, output, message):
    with pytest.raises(ls.ConfigError, match=message):
        ls.Loader(ls.Folder(demo / "folder"), fields={"jpg": ls.Image(32), "cls": ls.Int()}, batch_size=4,
                  output=output)


def test_a_wrong_output_fails_before_any_shard_is_read(tmp_path):
    """The entries come from the fields' declarations, known before the source: a typo in output=
    is named at once, not after the shards were indexed (here: a shard that cannot be indexed)."""
    (tmp_path / "bad.tar").write_bytes(bytes(range(256)) * 12)
    src = ls.WebDataset(str(tmp_path / "bad.tar"), index="scan")
    with pytest.raises(ls.ConfigError, match=r"'jpg.len' is not an entry of the batch; entries: jpg, __key__"):
        ls.Loader(src, fields={"jpg": ls.Image(32)}, batch_size=2, output=("jpg", "jpg.len"))
    with pytest.raises(ls.ReadError, match="corrupt tar header"):
        ls.Loader(src, fields={"jpg": ls.Image(32)}, batch_size=2, output=("jpg",))


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("batch_args", [{"batch_size": 4}, {}])
def test_a_dataloader_that_batches_again_is_refused_by_name(demo, workers, batch_args):
    """DataLoader(ls.Dataset(...), batch_size=4) -- or with DataLoader's default batch_size=1 --
    would yield batches of batches with transposed keys; it fails at once, naming the fix."""
    ds = ls.Dataset(ls.Folder(demo / "folder"), fields={"jpg": ls.Image(32)}, batch_size=8, threads=1)
    dl = torch.utils.data.DataLoader(ds, num_workers=workers, **batch_args)
    with pytest.raises(Exception, match=r"make the DataLoader with batch_size=None") as e:
        next(iter(dl))
    if workers == 0:
        assert isinstance(e.value, ls.ConfigError)
    right = ds.dataloader(num_workers=workers)
    first = next(iter(right))
    assert first["jpg"].shape == (8, 3, 32, 32) and len(first["__key__"]) == 8
    with pytest.raises(ls.ConfigError, match=r"Dataset.dataloader\(batch_size=...\)"):
        ds.dataloader(batch_size=4)


def test_len_of_shards_without_an_index_indexes_them_and_keeps_streaming(demo, tmp_path):
    import shutil
    for p in sorted((demo / "shards").glob("*.tar")):
        shutil.copy(p, tmp_path / p.name)  # no .idx beside them
    shards = sorted(str(p) for p in tmp_path.glob("*.tar"))
    fields = {"cls": ls.Int()}
    loader = ls.Loader(ls.WebDataset(shards), fields=fields, batch_size=7, shuffle=True, seed=1)
    assert loader.samples is None  # streamed: its size is not known up front
    batches = list(loader)
    assert len(loader) == len(batches) and sum(len(b["__key__"]) for b in batches) == 120
    assert loader.state_dict()["samples"] is None  # the state is the streaming loader's, as before len()
    off = ls.Loader(ls.WebDataset(shards, index="off"), fields=fields, batch_size=7)
    with pytest.raises(TypeError, match=r"index='off'.*use index='auto'"):
        len(off)


def test_the_console_script_is_in_the_venv():
    import subprocess
    import sys
    from pathlib import Path
    script = Path(sys.executable).parent / "loadscope"
    out = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "usage: loadscope COMMAND" in out.stdout


def _reference(u8, dtype, mean, std, channels_last):
    """(x / 255 - mean) / std in float64, rounded once to float32, then to the dtype (torch's
    rounding): what the loader's table holds."""
    shape = (1, 1, 1, 3) if channels_last else (1, 3, 1, 1)
    m = torch.tensor(mean, dtype=torch.float64).view(shape)
    s = torch.tensor(std, dtype=torch.float64).view(shape)
    return ((u8.double() / 255 - m) / s).float().to(getattr(torch, dtype))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("mean,std", [((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)), (None, None),
                                      (0.5, 1e-5), (0.0, 3e5)])  # overflow to inf; subnormals
def test_float_output_is_the_uint8_image_normalised_as_torch_rounds_it(demo, dtype, channels_last, mean, std):
    def batch(**kw):
        f = ls.Image(32, flip=0.5, channels_last=channels_last, **kw)
        return next(iter(ls.Loader(ls.Folder(demo / "folder"), fields={"jpg": f}, batch_size=8, seed=3)))["jpg"]

    u8 = batch()
    got = batch(dtype=getattr(torch, dtype), mean=mean, std=std)
    m = (0.0,) * 3 if mean is None else (mean,) * 3 if isinstance(mean, float) else mean
    s = (1.0,) * 3 if std is None else (std,) * 3 if isinstance(std, float) else std
    want = _reference(u8, dtype, m, s, channels_last)
    assert got.dtype == getattr(torch, dtype) and got.shape == u8.shape
    assert torch.equal(got, want)  # bit for bit, inf and subnormals included
    # The same on the GPU path's torch ops (loadscope.normalize), within float32 rounding.
    assert torch.allclose(ls.normalize(u8, dtype, m, s, channels_last).float(), want.float(), rtol=1e-2 if dtype != "float32" else 1e-4, atol=1e-6)


def test_float_output_equals_torchvision_totensor_normalize(demo):
    import torchvision.transforms as T
    f = {"jpg": ls.Image(32, crop="center", dtype="float32", mean=ls.IMAGENET_MEAN, std=ls.IMAGENET_STD)}
    u = {"jpg": ls.Image(32, crop="center")}
    got = next(iter(ls.Loader(ls.Folder(demo / "folder"), fields=f, batch_size=4)))["jpg"]
    u8 = next(iter(ls.Loader(ls.Folder(demo / "folder"), fields=u, batch_size=4)))["jpg"]
    want = torch.stack([T.Normalize(ls.IMAGENET_MEAN, ls.IMAGENET_STD)(T.ConvertImageDtype(torch.float32)(x)) for x in u8])
    assert torch.allclose(got, want, atol=1e-6)


@pytest.mark.parametrize("kwargs,message", [
    ({"mean": ls.IMAGENET_MEAN}, r"mean and std normalise a float output; give dtype='float32'"),
    ({"dtype": "float64"}, r"dtype='float64': allowed are uint8, float32, float16, bfloat16"),
    ({"dtype": "float32", "std": 0}, r"std must be non-zero"),
    ({"dtype": "float32", "mean": (0.5, 0.5)}, r"mean must be a number or three"),
])
def test_bad_dtype_arguments_say_what_is_allowed(kwargs, message):
    with pytest.raises(ls.ConfigError, match=message):
        ls.Image(32, **kwargs)
    with pytest.raises(ls.ConfigError, match=r"VideoClip: clips are uint8 only"):
        ls.VideoClip(32, dtype="float16")


# --- loadscope.from_dataloader: the swap translated for you --------------------------------------

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
# Real photos and drawings of ../shared/data/real (test_reference.py's), in three classes; the
# orientation examples carry EXIF orientations that ImageFolder's PIL does not apply.
FOLDER_FILES = {
    "birds": ["vision/test/assets/encode_jpeg/grace_hopper_517x606.jpg", "imageio/chelsea.jpg",
              "libjpeg-turbo/testimages/testorig.jpg", "exif-orientation-examples/Landscape_6.jpg"],
    "cats": ["pillow/Tests/images/hopper.jpg", "imageio/bricks.jpg", "vision/test/assets/fakedata/logos/rgb_pytorch.png",
             "exif-orientation-examples/Landscape_3.jpg"],
    "dogs": ["pillow/Tests/images/pil_sample_rgb.jpg", "vision/test/assets/fakedata/logos/gray_pytorch.jpg",
             "moviepy/media/doc_medias/example_mask.jpg"],
}


@pytest.fixture(scope="module")
def image_folder(real, tmp_path_factory):
    root = tmp_path_factory.mktemp("imagefolder")
    for cls, files in FOLDER_FILES.items():
        (root / cls).mkdir()
        for i, rel in enumerate(files):
            (root / cls / f"{i}_{rel.rsplit('/', 1)[-1]}").symlink_to(real / rel)
    return root


@pytest.mark.parametrize("last", ["ToTensor+Normalize", "PILToTensor"])
def test_from_dataloader_gives_the_dataloaders_batches(image_folder, last):
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder

    tail = [T.ToTensor(), T.Normalize(MEAN, STD)] if last == "ToTensor+Normalize" else [T.PILToTensor()]
    dl = torch.utils.data.DataLoader(ImageFolder(str(image_folder), transform=T.Compose([T.Resize(40), T.CenterCrop(32)]
                                                                                        + tail)), batch_size=4)
    loader = ls.from_dataloader(dl)
    ref, got = list(dl), list(loader)
    assert len(got) == len(ref) == len(loader) == 3 and len(loader.dataset) == 11
    level = torch.tensor(STD).view(1, 3, 1, 1) * 255 if last != "PILToTensor" else 1.0  # output units per level
    for (x, y), (a, b) in zip(ref, got):
        assert a.dtype == x.dtype and a.shape == x.shape and torch.equal(b, y)
        diff = (a.double() - x.double()).abs() * level
        assert diff.flatten(1).mean(1).max() <= 0.5 and diff.max() <= 2.5, diff.flatten(1).mean(1)


def test_translate_maps_every_option(image_folder):
    import torchvision.transforms as T
    import torchvision.transforms.v2 as v2
    from torchvision.datasets import ImageFolder

    from loadscope.swap import translate

    for t in (T, v2):
        tail = [T.ToTensor()] if t is T else [v2.ToImage(), v2.ToDtype(torch.float32, scale=True)]
        tf = t.Compose([t.RandomResizedCrop(48, scale=(0.2, 1.0)), t.RandomHorizontalFlip(0.3), t.RandAugment(2, 7),
                        t.RandomApply([t.ColorJitter(0.4, 0.3, 0.2, 0.1)], p=0.7), t.RandomGrayscale(0.1)]
                       + tail + [t.Normalize(MEAN, STD), t.RandomErasing(p=0.25)])
        ds = ImageFolder(str(image_folder), transform=tf)
        sampler = torch.utils.data.DistributedSampler(ds, num_replicas=2, rank=1, shuffle=True, seed=7, drop_last=True)
        tr = translate(torch.utils.data.DataLoader(ds, batch_size=3, sampler=sampler, num_workers=2, prefetch_factor=4))
        assert tr.image == {"exif": False, "crop": "random_resized", "size": 48, "scale": (0.2, 1.0),
                            "ratio": (0.75, 4 / 3), "flip": 0.3, "dtype": "float32", "mean": tuple(MEAN),
                            "std": tuple(STD), "ops": [
                                {"name": "RandAugment", "params": {"num_ops": 2, "magnitude": 7,
                                                                   "num_magnitude_bins": 31}},
                                {"name": "ColorJitter", "params": {"p": 0.7, "brightness": (0.6, 1.4),
                                                                   "contrast": (0.7, 1.3), "saturation": (0.8, 1.2),
                                                                   "hue": (-0.1, 0.1)}},
                                {"name": "RandomGrayscale", "params": {"p": 0.1}},
                                {"name": "RandomErasing", "params": {"p": 0.25, "scale": (0.02, 0.33),
                                                                     "ratio": (0.3, 3.3), "value": 0.0}}]}, t
        assert tr.loader == {"batch_size": 3, "drop_last": "uneven", "shuffle": True, "seed": 7, "rank": 1,
                             "world_size": 2, "threads": 2, "prefetch": 8}
        loader = tr.build()
        assert (loader.rank, loader.world_size, loader.drop_last, loader.batch_size) == (1, 2, "uneven", 3)
        assert len(loader.sampler) == len(sampler) == 5  # 11 samples, 2 ranks: DistributedSampler's floor(11 / 2)
        image = loader.fields["jpg"]
        assert image.ops == (ls.RandAugment(2, 7).op(),
                             ls.ColorJitter((0.6, 1.4), (0.7, 1.3), (0.8, 1.2), (-0.1, 0.1), p=0.7).op(),
                             ls.Op("RandomGrayscale", p=0.1), ls.RandomErasing(p=0.25).op())


@pytest.mark.parametrize("make, message", [
    (lambda T: dict(transform=T.Compose([T.RandomResizedCrop(32), T.GaussianBlur(3), T.ToTensor()])),
     "transform GaussianBlur: loadscope has no counterpart"),
    (lambda T: dict(transform=T.Compose([T.ColorJitter(0.4), T.RandomHorizontalFlip(), T.RandomResizedCrop(32),
                                         T.ToTensor()])),
     "transform RandomResizedCrop after ColorJitter: loadscope crops and resizes first"),
    (lambda T: dict(transform=T.Compose([T.RandomResizedCrop(32), T.ToTensor(), T.RandomSolarize(0.5)])),
     "RandomSolarize after the conversion to float"),
    (lambda T: dict(transform=T.Compose([T.RandomResizedCrop(32), T.ToTensor(), T.RandomErasing(),
                                         T.Normalize(0.5, 0.5)])), "Normalize after RandomErasing"),
    (lambda T: dict(transform=T.Compose([T.RandomResizedCrop(32), T.RandomApply([T.RandomRotation(10)]),
                                         T.ToTensor()])), r"RandomApply\(RandomRotation\)"),
    (lambda T: dict(transform=T.Compose([T.RandomResizedCrop(32), T.Lambda(lambda x: x), T.ToTensor()])),
     r"from_dataloader\(..., map=fn\)"),
    (lambda T: dict(transform=T.Compose([T.RandomResizedCrop(32, interpolation=T.InterpolationMode.BICUBIC),
                                         T.ToTensor()])), "bilinear filter"),
    (lambda T: dict(transform=T.Compose([T.Resize(32), T.ToTensor()])), r"Resize\(32\) without a CenterCrop"),
    (lambda T: dict(transform=T.Compose([T.RandomResizedCrop(32)])), "no ToTensor or PILToTensor"),
    (lambda T: dict(transform=T.Compose([T.ToTensor()])), "no crop or resize to a fixed size"),
    (lambda T: dict(transform=T.Compose([T.RandomResizedCrop(32), T.ToTensor()]), target_transform=lambda y: y + 1),
     "target_transform"),
    (lambda T: dict(transform=T.Compose([T.RandomResizedCrop(32), T.ToTensor()]), subclass=True),
     "has its own __getitem__"),
    (lambda T: dict(transform=T.Compose([T.RandomResizedCrop(32), T.ToTensor()]), collate_fn=lambda b: b),
     "a collate function of your own"),
    (lambda T: dict(transform=T.Compose([T.RandomResizedCrop(32), T.ToTensor()]), weighted=True),
     "sampler=WeightedRandomSampler"),
    (lambda T: dict(transform=T.Compose([T.Resize((48, 48)), T.CenterCrop(32), T.ToTensor()])),
     r"Resize\(\(48, 48\)\) followed by CenterCrop"),
    (lambda T: dict(transform=T.Compose([T.RandomResizedCrop(48), T.Resize(40), T.CenterCrop(32), T.ToTensor()])),
     "a second crop"),
    (lambda T: dict(transform=T.Compose([T.RandomResizedCrop(32), T.RandAugment(
        interpolation=T.InterpolationMode.BILINEAR), T.ToTensor()])), "nearest-neighbour"),
])
def test_what_has_no_counterpart_is_refused_by_name(image_folder, make, message):
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder

    kw = make(T)

    class Named(ImageFolder):
        def __getitem__(self, i):
            return super().__getitem__(i) + (self.samples[i][0],)

    ds = (Named if kw.pop("subclass", False) else ImageFolder)(str(image_folder), transform=kw.pop("transform"),
                                                                target_transform=kw.pop("target_transform", None))
    if kw.pop("weighted", False):
        kw["sampler"] = torch.utils.data.WeightedRandomSampler([1.0] * len(ds), len(ds))
    with pytest.raises(ls.ConfigError, match=message):
        ls.from_dataloader(torch.utils.data.DataLoader(ds, batch_size=4, **kw))


def test_what_translates_as_torchvision_spells_it(image_folder):
    """Spellings found in real training scripts: v2's recommended order (ToImage and a uint8
    ToDtype first), Resize to an exact (h, w), one-number Normalize, DistributedSampler with
    DataLoader(drop_last=True)."""
    import torchvision.transforms as T
    import torchvision.transforms.v2 as v2
    from torchvision.datasets import ImageFolder

    from loadscope.swap import translate

    def tr(tf, **kw):
        return translate(torch.utils.data.DataLoader(ImageFolder(str(image_folder), transform=tf), batch_size=4, **kw))

    v2_order = tr(v2.Compose([v2.ToImage(), v2.ToDtype(torch.uint8, scale=True), v2.RandomResizedCrop(32),
                              v2.RandomHorizontalFlip(), v2.ToDtype(torch.float32, scale=True),
                              v2.Normalize(MEAN, STD)]))
    assert v2_order.image["dtype"] == "float32" and v2_order.image["crop"] == "random_resized"
    assert tr(T.Compose([T.Resize((40, 40)), T.PILToTensor()])).image["size"] == 40
    assert tr(T.Compose([T.Resize((40, 56)), T.PILToTensor()])).image == {"exif": False, "crop": "resize",
                                                                        "size": (40, 56), "dtype": "uint8"}
    one = tr(T.Compose([T.Resize(36), T.CenterCrop(32), T.ToTensor(), T.Normalize([0.5], [0.25])]))
    assert one.image["mean"] == (0.5, 0.5, 0.5) and one.image["std"] == (0.25, 0.25, 0.25)
    one.build()  # and the Image takes them
    ds = ImageFolder(str(image_folder), transform=T.Compose([T.RandomResizedCrop(32), T.ToTensor()]))
    # 11 samples, 2 ranks, batches of 2, partial batches dropped: torch 6 // 2 = 3 batches a rank
    # over its padded share, loadscope's whole steps 11 // 4 = 2: said, not hidden.
    sampler = torch.utils.data.DistributedSampler(ds, num_replicas=2, rank=0)
    t = translate(torch.utils.data.DataLoader(ds, batch_size=2, sampler=sampler, drop_last=True))
    assert t.loader["drop_last"] is True and any("2 batches a rank where torch gives 3" in x for x in t.lines)
    with pytest.raises(ls.ConfigError, match="torch gives each rank 1 batch"):
        translate(torch.utils.data.DataLoader(ds, batch_size=6, sampler=sampler, drop_last=True))


def test_every_command_and_subcommand_has_help(capsys):
    """`loadscope --help` lists every command (bench's baseline too), and each command's and
    bench's subcommands' --help prints its usage under the name users type."""
    import subprocess
    import sys

    from loadscope.__main__ import COMMANDS, main

    def run(*args):
        try:
            rc = main(list(args))
        except SystemExit as e:  # argparse's --help
            rc = e.code
        out = capsys.readouterr()
        assert rc == 0, (args, out.out, out.err)
        return out.out

    r = subprocess.run([sys.executable, "-m", "loadscope", "--help"], capture_output=True, text=True, timeout=120)
    top = r.stdout
    assert r.returncode == 0 and top == run("--help")  # the command line is this main()
    for name in COMMANDS:
        assert f"  {name} " in top
        assert f"usage: loadscope {name}" in " ".join(run(name, "--help").split())
    assert "bench baseline FACTORY" in " ".join(top.split())
    for sub in ("run", "report", "baseline"):
        assert f"usage: loadscope bench {sub}" in run("bench", sub, "--help")
    assert "baseline            measure your own pipeline as it is" in run("bench", "--help")


def test_the_harness_takes_key_from_tuple_output_as_the_sample_ids(demo):
    """Ids without code: output=(..., "__key__") carries the files, and the bench harness reads
    them as the sample ids (no sample_ids function)."""
    import os

    from loadscope.bench import user

    loader = ls.Loader(ls.Folder(demo / "folder"), fields={"jpg": ls.Image(32), "cls": ls.Int()}, batch_size=8,
                       output=("jpg", "cls", "__key__"))
    images, labels, keys = batch = next(iter(loader))
    assert len(keys) == 8 and all(os.path.isfile(k) for k in keys)
    assert user.default_ids(batch, loader) == [os.path.realpath(k) for k in keys]
    assert user.default_ids((images, labels), loader) is None  # no __key__: no ids from the batch
    # ... but the order is known: unshuffled, one rank, so each position names its file
    at = user.positional_ids(loader)
    assert [at(i) for i in range(8)] == [os.path.realpath(k) for k in keys]
    assert user.positional_ids(ls.Loader(ls.Folder(demo / "folder"), fields={"cls": ls.Int()}, batch_size=8,
                                         shuffle=True)) is None


def _val(T):
    return T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor(), T.Normalize(MEAN, STD)])


def _same_batches(ref, got):
    """The DataLoader's batches and the Loader's: same count, labels, dtype and shape, and pixels
    within about a level of 255 (two decoders, two resamplers: docs/augmentations.md)."""
    assert len(got) == len(ref) > 0
    level = torch.tensor(STD).view(1, 3, 1, 1) * 255
    for (x, y), (a, b) in zip(ref, got):
        assert a.dtype == x.dtype and a.shape == x.shape and torch.equal(b, y), (b, y)
        diff = (a.double() - x.double()).abs() * level
        assert diff.flatten(1).mean(1).max() <= 0.5, diff.flatten(1).mean(1)


@pytest.mark.parametrize("check", [True, False])
@pytest.mark.parametrize("cut", ["stock", "first 7", "filtered", "reversed", "relabelled", "Subset", "random_split",
                                 "Subset of a Subset"])
def test_what_the_dataset_holds_is_what_is_read(image_folder, cut, check):
    """The dataset's own list, as debug subsets, filtered corrupt files and class subsets leave
    it, read exactly (pixel for pixel with torchvision's deterministic val transforms, label for
    label), with or without the check; ls.Folder only where the folder's scan is that list."""
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder

    ds = ImageFolder(str(image_folder), transform=_val(T))
    n = len(ds)
    if cut == "first 7":
        ds.samples = ds.samples[:7]
    elif cut == "filtered":
        ds.samples = [s for i, s in enumerate(ds.samples) if i % 3 != 1]
    elif cut == "reversed":
        ds.samples = ds.samples[::-1]
    elif cut == "relabelled":  # classes merged: what a coarser label set does
        ds.samples = [(p, min(y, 1)) for p, y in ds.samples]
    elif cut == "Subset":
        ds = torch.utils.data.Subset(ds, [9, 2, 4, 10, 0])
    elif cut == "random_split":
        ds = torch.utils.data.random_split(ds, [6, n - 6], generator=torch.Generator().manual_seed(3))[1]
    elif cut == "Subset of a Subset":
        ds = torch.utils.data.Subset(torch.utils.data.Subset(ds, list(range(1, n))), [5, 0, 3])
    dl = torch.utils.data.DataLoader(ds, batch_size=2)
    loader = ls.from_dataloader(dl, check=check)
    assert isinstance(loader.source, ls.Folder if cut == "stock" else ls.Files)
    assert len(loader.dataset) == len(ds)
    _same_batches(list(dl), list(loader))


def test_a_subset_random_sampler_reads_its_indices_shuffled(image_folder):
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder

    ds = ImageFolder(str(image_folder), transform=_val(T))
    picked = [1, 3, 4, 8, 10]
    dl = torch.utils.data.DataLoader(ds, batch_size=2, sampler=torch.utils.data.SubsetRandomSampler(picked))
    t = translate_of(dl)
    assert t.loader["shuffle"] is True and isinstance(t.source, ls.Files)
    loader = ls.from_dataloader(dl)
    keys = [os.fsdecode(t.source._table.sample(i)[0]) for i in range(len(t.source))]
    assert keys == [ds.samples[i][0] for i in picked]
    labels = sorted(int(y) for _, ys in loader for y in ys)
    assert labels == sorted(ds.samples[i][1] for i in picked)


def translate_of(dl):
    from loadscope.swap import translate

    return translate(dl)


def test_every_op_of_the_engine_translates_from_torchvision_or_says_why(image_folder):
    """The op table (augment/ops.cc) is what is translated: each op from torchvision's transform of
    the same name (v1 and v2), with parameters away from the defaults, read by name — or it is in
    swap.UNTRANSLATED with its reason. An op added to the table with neither fails here."""
    import inspect

    import torchvision.transforms as T
    import torchvision.transforms.v2 as v2
    from torchvision.datasets import ImageFolder

    from loadscope import swap

    def value(p):  # a value of the parameter inside its bounds, not its default
        lo, hi, d = p["min"], p["max"], p["default"]
        if p["kind"] == "integer":
            return int(d[0]) + 1 if d[0] + 1 <= hi else int(d[0]) - 1
        if p["kind"] == "number":
            return (d[0] + hi) / 2 if hi != float("inf") else d[0] + 1
        if p["kind"] == "range":
            return (0.8, 1.3) if d == [1.0, 1.0] else (-0.2, 0.1) if lo < 0 else (round(lo + (d[1] - lo) * 0.3, 6),
                                                                                  round(d[1] * 0.9, 6))
        return (1.0, 2.0, 3.0)  # rgb

    table = ls.augmentations()
    assert {o["name"] for o in table} >= {"RandomSolarize", "RandomPosterize", "RandomAutocontrast", "RandomEqualize",
                                          "RandomInvert"}
    for op in table:
        name = op["name"]
        if name in swap.UNTRANSLATED:
            assert swap.UNTRANSLATED[name].strip(), name
            continue
        for m in (T, v2):
            cls = getattr(m, name, None)
            assert cls is not None, f"{name}: no torchvision transform of that name and no reason in swap.UNTRANSLATED"
            accepted = inspect.signature(cls).parameters
            given = {p["name"]: value(p) for p in op["params"] if p["name"] in accepted}
            tf = cls(**given)
            wrapped = "p" not in accepted and any(p["name"] == "p" for p in op["params"])  # ColorJitter
            inner = [m.RandomApply([tf], p=0.5)] if wrapped else [tf]
            tail = ([v2.ToImage(), v2.ToDtype(torch.float32, scale=True)] if m is v2 else [T.ToTensor()]) \
                + [m.Normalize(MEAN, STD)]
            pipeline = ([m.RandomResizedCrop(32)] + inner + tail) if op["stage"] == "pixels" else \
                ([m.RandomResizedCrop(32)] + tail + inner)
            dl = torch.utils.data.DataLoader(ImageFolder(str(image_folder), transform=m.Compose(pipeline)),
                                             batch_size=2)
            got = ls.from_dataloader(dl, check=False).fields["jpg"].ops
            if wrapped:
                given["p"] = 0.5
            assert got == (ls.Op(name, **given),), (m.__name__, name, got, given)


def test_the_ops_run_in_the_users_order_and_agree_with_torchvision_where_deterministic(image_folder):
    """Ops at p=1 are deterministic: the swap of a val pipeline with them gives torchvision's
    pixels (within a level of 255: the pixel-wise ops do not amplify the decoders' rounding);
    the order is the user's (solarize then invert is not invert then solarize)."""
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder

    def swap(ops):
        tf = T.Compose([T.Resize(40), T.CenterCrop(32)] + ops + [T.ToTensor(), T.Normalize(MEAN, STD)])
        dl = torch.utils.data.DataLoader(ImageFolder(str(image_folder), transform=tf), batch_size=4)
        return dl, ls.from_dataloader(dl)

    for ops in ([T.RandomSolarize(100, p=1.0), T.RandomInvert(p=1.0)], [T.RandomInvert(p=1.0), T.RandomSolarize(100, p=1.0)],
                [T.RandomPosterize(3, p=1.0)]):
        dl, loader = swap(ops)
        assert [o.name for o in loader.fields["jpg"].ops] == [type(o).__name__ for o in ops]
        _same_batches(list(dl), list(loader))


def test_what_a_user_sets_passes_through_and_a_conflict_is_named(image_folder, real, tmp_path):
    """on_error, map, threads='auto' ... pass through from_dataloader; what the DataLoader
    decides may be given only as it says. A corrupt JPEG in the list is skipped and counted."""
    import shutil

    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder

    root = tmp_path / "folder"
    shutil.copytree(image_folder, root, symlinks=True)
    (root / "cats" / "zz_corrupt.jpg").symlink_to(real / "vision/test/assets/damaged_jpeg/corrupt.jpg")
    ds = ImageFolder(str(root), transform=_val(T))
    dl = torch.utils.data.DataLoader(ds, batch_size=4)
    with pytest.raises(ls.ConfigError, match=r"from_dataloader\(batch_size=8\): the DataLoader says batch_size=4"):
        ls.from_dataloader(dl, batch_size=8)
    with pytest.raises(ls.ConfigError, match=r"from_dataloader\(on_eror=...\): not a Loader option; allowed are .*on_error"):
        ls.from_dataloader(dl, on_eror="skip")
    loader = ls.from_dataloader(dl, check=False, batch_size=4, on_error="skip", error_budget=None, threads="auto",
                                map=lambda b: (b[0], b[1] + 100))
    got = list(loader)
    assert sum(len(y) for _, y in got) == len(ds) - 1 and all(int(y.min()) >= 100 for _, y in got)
    stats = loader.stats()
    assert stats["failures"] == 1 and [os.path.basename(s["key"]) for s in stats["skipped"]] == ["zz_corrupt.jpg"], stats
