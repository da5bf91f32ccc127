"""Per-sample augmentations in C++ (ColorJitter, RandomGrayscale, RandomErasing) against
torchvision's functional ops on uint8 tensors with the same parameters, bit for bit; their
draws per sample, deterministic for any thread count."""

from pathlib import Path

import pytest
import torch
import torchvision.transforms.functional as F

import loadscope as ls
from loadscope import _native

REAL_JPEGS = ["vision/test/assets/encode_jpeg/grace_hopper_517x606.jpg", "pillow/Tests/images/hopper.jpg",
              "pillow/Tests/images/pil_sample_rgb.jpg", "pillow/Tests/images/jpeg_ff00_header.jpg",
              "vision/test/assets/fakedata/logos/rgb_pytorch.jpg"]


def batch(root, size=64, threads=2, seed=3, **image):
    f = ls.Image(size, flip=0.5, **image)
    return torch.cat([b["jpg"] for b in ls.Loader(ls.Folder(root), fields={"jpg": f}, batch_size=16,
                                                     threads=threads, seed=seed)])


@pytest.fixture(scope="module")
def real_images(real, tmp_path_factory):
    """Real photos and a logo, cropped to 224 and 256 (2^16 pixels) by the loader."""
    import shutil
    root = tmp_path_factory.mktemp("real") / "x"
    root.mkdir()
    for i, p in enumerate(REAL_JPEGS):
        shutil.copy(real / p, root / f"{i}.jpg")
    return [batch(root.parent, size=s, crop="center") for s in (224, 256)]


OPS = [("brightness", 1.37, F.adjust_brightness), ("brightness", 0.61, F.adjust_brightness),
       ("brightness", 0.0, F.adjust_brightness), ("contrast", 1.4, F.adjust_contrast),
       ("contrast", 0.55, F.adjust_contrast), ("saturation", 1.6, F.adjust_saturation),
       ("saturation", 0.3, F.adjust_saturation), ("saturation", 0.0, F.adjust_saturation),
       ("hue", 0.13, F.adjust_hue), ("hue", -0.41, F.adjust_hue), ("hue", 0.5, F.adjust_hue),
       ("hue", -0.5, F.adjust_hue)]


@pytest.mark.parametrize("name,factor,reference", OPS, ids=[f"{n}{f}" for n, f, _ in OPS])
@pytest.mark.parametrize("layout", ["chw", "hwc"])
def test_each_colour_op_equals_torchvisions_on_uint8_tensors(real_images, name, factor, reference, layout):
    for images in real_images:
        for img in images:
            want = reference(img, factor)
            mine = img.clone() if layout == "chw" else img.permute(1, 2, 0).contiguous()
            _native._color_ops(mine.numpy(), layout == "chw", [(name, factor)])
            got = mine if layout == "chw" else mine.permute(2, 0, 1)
            assert torch.equal(got, want), (name, factor, (got.int() - want.int()).abs().max())
    gray = real_images[0][0].clone()
    _native._color_ops(gray.numpy(), True, [("grayscale", 0.0)])
    assert torch.equal(gray, F.rgb_to_grayscale(real_images[0][0], 3))


@pytest.mark.parametrize("jitter,reference", [
    (ls.ColorJitter(brightness=(1.3, 1.3)), lambda x: F.adjust_brightness(x, 1.3)),
    (ls.ColorJitter(contrast=(0.6, 0.6)), lambda x: F.adjust_contrast(x, 0.6)),
    (ls.ColorJitter(saturation=(1.5, 1.5)), lambda x: F.adjust_saturation(x, 1.5)),
    (ls.ColorJitter(hue=(0.2, 0.2)), lambda x: F.adjust_hue(x, 0.2)),
])
def test_a_loader_jitter_with_a_fixed_factor_is_torchvisions_op_on_its_output(demo, jitter, reference):
    plain = batch(demo / "folder")
    got = batch(demo / "folder", color=jitter)
    assert torch.equal(got, torch.stack([reference(x) for x in plain]))
    gray = batch(demo / "folder", grayscale=1.0)
    assert torch.equal(gray, torch.stack([F.rgb_to_grayscale(x, 3) for x in plain]))


def test_jitter_draws_are_per_sample_and_the_same_for_any_thread_count(demo):
    jitter = ls.ColorJitter(0.4, 0.4, 0.4, 0.1, p=0.5)
    plain = batch(demo / "folder")
    one = batch(demo / "folder", color=jitter, grayscale=0.25, threads=1)
    assert torch.equal(one, batch(demo / "folder", color=jitter, grayscale=0.25, threads=2))
    changed = [not torch.equal(a, b) for a, b in zip(one, plain)]
    gray = [bool((x[0] == x[1]).all() and (x[1] == x[2]).all()) for x in one]
    n = len(plain)
    # p=0.5 jitter and p=0.25 grayscale over 120 samples (seeded: fixed counts, wide bounds)
    assert 0.3 * n < sum(changed) < 0.85 * n and 0.1 * n < sum(gray) < 0.4 * n
    assert not torch.equal(one, batch(demo / "folder", color=jitter, grayscale=0.25, seed=4))


@pytest.mark.parametrize("dtype,value", [("uint8", 0.0), ("float32", 0.0), ("float16", (1.0, -2.0, 0.5))])
def test_random_erasing_fills_one_box_of_the_drawn_size_with_the_value(demo, dtype, value):
    norm = {} if dtype == "uint8" else {"mean": ls.IMAGENET_MEAN, "std": ls.IMAGENET_STD}
    scale, ratio = (0.05, 0.3), (0.5, 2.0)
    plain = batch(demo / "folder", dtype=dtype, **norm)
    erased = batch(demo / "folder", dtype=dtype, erasing=ls.RandomErasing(p=1.0, scale=scale, ratio=ratio,
                                                                           value=value), **norm)
    fill = torch.tensor(value if isinstance(value, tuple) else (value,) * 3).to(plain.dtype).view(3, 1, 1)
    boxes = 0
    for a, b in zip(plain, erased):
        diff = (a != b).any(dim=0)
        if not diff.any():
            continue  # the box held the value already, or 10 tries found none (torchvision's rule)
        rows, cols = diff.any(dim=1).nonzero().flatten(), diff.any(dim=0).nonzero().flatten()
        top, left, h, w = rows[0], cols[0], rows[-1] - rows[0] + 1, cols[-1] - cols[0] + 1
        box = b[:, top:top + h, left:left + w]
        assert torch.equal(box, fill.expand_as(box))  # one rectangle, all of the value
        outside = torch.ones_like(diff)
        outside[top:top + h, left:left + w] = False
        assert torch.equal(a[:, outside], b[:, outside])
        assert scale[0] * 0.7 <= h * w / 64**2 <= scale[1] * 1.3  # rounding of h and w
        boxes += 1
    assert boxes > 0.9 * len(plain)


@pytest.mark.parametrize("make,message", [
    (lambda: ls.ColorJitter(hue=0.7), r"ColorJitter.hue=\(-0.7, 0.7\): must satisfy -0.5 <= min <= max <= 0.5"),
    (lambda: ls.ColorJitter(brightness=-1), r"ColorJitter.brightness=-1: a number must be >= 0"),
    (lambda: ls.Image(32, color="jitter"), r"Image.color must be a loadscope.ColorJitter\(...\), got .jitter."),
    (lambda: ls.Image(32, color=__import__("torchvision").transforms.ColorJitter(0.4)), r"torchvision transform cannot run"),
    (lambda: ls.Image(32, dtype="float32", mean=(123.7, 116.3, 103.5)), r"looks like 0-255 units"),
    (lambda: ls.RandomErasing(value="random"), r"output.s units .*.random. is not supported"),
    (lambda: ls.Image(32, grayscale=1.5), r"Image.grayscale is a probability in \[0, 1\]"),
    (lambda: ls.RandomErasing(scale=(0.0, 0.3)), r"RandomErasing.scale=\(0, 0.3\): must satisfy 0 < min <= max <= 1"),
    (lambda: ls.RandAugment(magnitude=31), r"RandAugment: magnitude \(31\) must be below num_magnitude_bins \(31\)"),
    (lambda: ls.RandAugment(num_ops=17), r"RandAugment.num_ops=17: must satisfy 0 <= num_ops <= 16, a whole number"),
    (lambda: ls.Op("Blur"), r"unknown augmentation 'Blur' \(allowed: RandAugment, ColorJitter, RandomGrayscale, "
                            r"RandomSolarize, .*, RandomErasing\)"),
    (lambda: ls.Op("RandomPosterize", bits=9), r"RandomPosterize.bits=9: must satisfy 0 <= bits <= 8, a whole number"),
    (lambda: ls.Op("RandomGrayscale", prob=0.5), r"RandomGrayscale has no parameter 'prob' \(allowed: p\)"),
    (lambda: ls.Op("RandomErasing", ratio=0.5), r"RandomErasing.ratio=0.5: must be a pair \(min, max\)"),
    (lambda: ls.Image(32, ops=[ls.RandomErasing(), ls.Op("RandomGrayscale")]),
     r"Image.ops: RandomGrayscale works on the uint8 pixels and must come before RandomErasing"),
    (lambda: ls.Image(32, ops=[], grayscale=0.5), r"either as ops=\[...\] or as the keywords"),
])
def test_bad_augmentation_arguments_say_what_is_allowed(make, message):
    with pytest.raises(ls.ConfigError, match=message):
        make()


def test_videos_refuse_the_image_only_ops():
    with pytest.raises(ls.ConfigError, match="VideoClip: color, grayscale, erasing and randaugment are for images only"):
        ls.VideoClip(32, grayscale=0.5)
    with pytest.raises(ls.ConfigError, match="for images only so far"):
        ls.VideoClip(32, ops=[ls.Op("RandomGrayscale", p=0.5)])


# --- The ops list ------------------------------------------------------------------------------


def test_the_keywords_stand_for_their_ops_list_and_give_the_same_bytes(demo):
    """Image(...)'s keywords build [RandAugment, ColorJitter, RandomGrayscale, RandomErasing]; the
    same list given as ops= draws the same and gives the same batches, float output included."""
    keywords = dict(randaugment=ls.RandAugment(2, 7), color=ls.ColorJitter(0.4, 0.4, 0.4, 0.1, p=0.8),
                    grayscale=0.3, erasing=ls.RandomErasing(p=0.6, value=(1.0, 0.0, -1.0)))
    norm = {"dtype": "float32", "mean": ls.IMAGENET_MEAN, "std": ls.IMAGENET_STD}
    ops = [ls.RandAugment(2, 7), ls.ColorJitter(0.4, 0.4, 0.4, 0.1, p=0.8), ls.Op("RandomGrayscale", p=0.3),
           ls.Op("RandomErasing", p=0.6, value=(1, 0, -1))]
    assert ls.Image(64, **keywords).augmentations() == ls.Image(64, ops=ops).augmentations()
    by_keywords = batch(demo / "folder", **keywords, **norm)
    assert torch.equal(by_keywords, batch(demo / "folder", ops=ops, **norm))
    assert not torch.equal(by_keywords, batch(demo / "folder", **norm))


def test_ops_run_in_the_order_given_as_torchvisions_ops_would(demo):
    plain = batch(demo / "folder")
    bright_then_gray = batch(demo / "folder", ops=[ls.ColorJitter(brightness=(1.3, 1.3)), ls.Op("RandomGrayscale", p=1)])
    gray_then_bright = batch(demo / "folder", ops=[ls.Op("RandomGrayscale", p=1), ls.ColorJitter(brightness=(1.3, 1.3))])
    assert torch.equal(bright_then_gray, torch.stack([F.rgb_to_grayscale(F.adjust_brightness(x, 1.3), 3) for x in plain]))
    assert torch.equal(gray_then_bright, torch.stack([F.adjust_brightness(F.rgb_to_grayscale(x, 3), 1.3) for x in plain]))
    assert not torch.equal(bright_then_gray, gray_then_bright)


def test_every_op_of_the_table_is_made_by_name_with_its_declared_defaults():
    table = ls.augmentations()
    assert [a["name"] for a in table] == ["RandAugment", "ColorJitter", "RandomGrayscale", "RandomSolarize",
                                          "RandomPosterize", "RandomAutocontrast", "RandomEqualize", "RandomInvert",
                                          "RandomErasing"]
    docs = (Path(__file__).parents[2] / "docs" / "augmentations.md").read_text()
    for a in table:
        op = ls.Op(a["name"])
        assert op.stage == a["stage"] and list(op.params) == [p["name"] for p in a["params"]]
        for p in a["params"]:
            want = p["default"][0] if p["kind"] in ("number", "integer") else tuple(p["default"])
            assert op.params[p["name"]] == want
        assert f"`{a['name']}`" in docs, f"docs/augmentations.md does not list {a['name']}"
    assert ls.Op("RandomGrayscale", p=0.2) == ls.Op("RandomGrayscale", p=0.2) != ls.Op("RandomGrayscale", p=0.3)
    assert len({ls.Op("RandomGrayscale", p=0.2), ls.Op("RandomGrayscale", p=0.2)}) == 1
    assert ls.ColorJitter(hue=0.1).op() == ls.Op("ColorJitter", hue=(-0.1, 0.1))


# --- RandAugment ---------------------------------------------------------------------------------

RA_NAMES = ["Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color",
            "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize"]
RA_SIGNED = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color", "Contrast",
             "Sharpness"}


def torchvision_op(img, name, m):
    """torchvision.transforms.autoaugment._apply_op, as RandAugment calls it (NEAREST, fill=None)."""
    from torchvision.transforms.autoaugment import _apply_op
    from torchvision.transforms import InterpolationMode
    return _apply_op(img, name, m, interpolation=InterpolationMode.NEAREST, fill=None)


def torchvision_magnitude(name, magnitude, bins, h, w):
    from torchvision.transforms import RandAugment
    mags, _ = RandAugment(num_magnitude_bins=bins)._augmentation_space(bins, (h, w))[name]
    return float(mags[magnitude].item()) if mags.ndim > 0 else 0.0


@pytest.mark.parametrize("name", RA_NAMES)
def test_each_randaugment_op_equals_torchvisions(real_images, name):
    for images in real_images:  # 224 and 256 square; and a non-square cut of them below
        for img in list(images) + [images[0][:, :160, :]]:
            h, w = img.shape[1:]
            for magnitude, bins in ((9, 31), (30, 31), (3, 10)):
                m = torchvision_magnitude(name, magnitude, bins, h, w)
                assert _native._randaugment_magnitude(RA_NAMES.index(name), magnitude, bins, h, w) == m
                for sign in ((1, -1) if name in RA_SIGNED else (1,)):
                    want = torchvision_op(img, name, sign * m)
                    for layout in ("chw", "hwc"):
                        mine = img.clone().contiguous() if layout == "chw" else img.permute(1, 2, 0).contiguous()
                        _native._color_ops(mine.numpy(), layout == "chw", [(f"ra:{RA_NAMES.index(name)}", sign * m)])
                        got = mine if layout == "chw" else mine.permute(2, 0, 1)
                        assert torch.equal(got, want), (name, magnitude, sign, layout, (got != want).sum().item())


def test_a_loader_randaugment_applies_one_of_torchvisions_ops_to_each_sample(demo):
    """num_ops=1: every sample of the loader's output is the plain output with one of the 14 ops
    at the magnitude, either sign, applied by torchvision; and several ops occur."""
    plain = batch(demo / "folder", size=48)
    got = batch(demo / "folder", size=48, randaugment=ls.RandAugment(num_ops=1, magnitude=9))
    assert torch.equal(got, batch(demo / "folder", size=48, randaugment=ls.RandAugment(num_ops=1, magnitude=9),
                                  threads=1))
    used = set()
    for a, b in zip(plain, got):
        found = [name for name in RA_NAMES for sign in ((1, -1) if name in RA_SIGNED else (1,))
                 if torch.equal(torchvision_op(a, name, sign * torchvision_magnitude(name, 9, 31, 48, 48)), b)]
        assert found, "no RandAugment op explains this sample"
        used.add(found[0])
    assert len(used) >= 8  # 120 draws from 14 ops


# --- map=: the escape hatch, and batch-level mixing ---------------------------------------------

def test_map_runs_on_every_batch_ahead_of_the_loop_in_order_and_is_timed(demo):
    import threading
    fields = {"jpg": ls.Image(32, dtype="float32"), "cls": ls.Int()}
    threads = set()

    def double(b):
        threads.add(threading.current_thread().name)
        return b[0] * 2, b[1]

    plain = list(ls.Loader(ls.Folder(demo / "folder"), fields=fields, batch_size=16, output=("jpg", "cls")))
    L = ls.Loader(ls.Folder(demo / "folder"), fields=fields, batch_size=16, output=("jpg", "cls"), map=double)
    got = list(L)
    assert len(got) == len(plain) and all(torch.equal(a[0], b[0] * 2) and torch.equal(a[1], b[1])
                                          for a, b in zip(got, plain))
    assert threads == {"loadscope-map"}  # not the training loop's thread
    loop = L.telemetry().to_dict()["loop"]
    assert loop["map"]["count"] == len(plain) and "map: 8 batches" in L.telemetry().summary()
    # The position is the consumer's, not the mapper's (which runs ahead).
    it = iter(L)
    next(it), next(it)
    assert L.state_dict()["batches"] == 2
    it.close()
    # An iterator the loop drops (break, next(iter(...))) closes, and its map thread ends.
    next(iter(L))
    for t in [t for t in threading.enumerate() if t.name == "loadscope-map"]:
        t.join(timeout=60)  # only catches a hang
        assert not t.is_alive(), "the map thread outlived its iterator"


def test_an_exception_in_map_names_the_batch_and_keeps_the_cause(demo):
    def bad(b):
        raise ValueError("boom")

    L = ls.Loader(ls.Folder(demo / "folder"), fields={"cls": ls.Int()}, batch_size=16, map=bad)
    with pytest.raises(ls.LoadscopeError, match=r"map= raised on batch 0 of epoch 0 .*ValueError: boom") as e:
        list(L)
    assert isinstance(e.value.__cause__, ValueError)
    with pytest.raises(ls.ConfigError, match="map must be a callable"):
        ls.Loader(ls.Folder(demo / "folder"), fields={"cls": ls.Int()}, batch_size=16, map="double")


def test_mixup_cutmix_on_loadscope_batches_mixes_images_and_labels_alike(demo):
    """torchvision v2's semantics (the batch mixed with itself rolled by one), checked pixel by
    pixel; draws from (seed, epoch, batch index): the same run after run and whatever the loop
    does with torch's global generator."""
    fields = {"jpg": ls.Image(32, crop="center", dtype="float32"), "cls": ls.Int()}

    def loader(**mix):
        return ls.Loader(ls.Folder(demo / "folder"), fields=fields, batch_size=32, shuffle=True,
                         output=("jpg", "cls"), map=ls.mixup_cutmix(10, **mix))

    x, y = next(iter(ls.Loader(ls.Folder(demo / "folder"), fields=fields, batch_size=32, shuffle=True,
                               output=("jpg", "cls"))))
    images, labels = next(iter(loader(cutmix_alpha=0.0)))  # MixUp only
    assert labels.shape == (32, 10) and torch.allclose(labels.sum(1), torch.ones(32))
    i = next(i for i in range(32) if y[i] != y[i - 1])  # a sample mixed with another class
    lam = labels[i, y[i]].item()
    assert torch.allclose(images, lam * x + (1 - lam) * x.roll(1, 0), atol=1e-5)
    images, labels = next(iter(loader(mixup_alpha=0.0)))  # CutMix only: one box from the rolled batch
    diff = (images != x).any(dim=1)
    rows, cols = diff.any(dim=2).any(dim=0).nonzero().flatten(), diff.any(dim=1).any(dim=0).nonzero().flatten()
    if len(rows):
        box = (rows[-1] - rows[0] + 1) * (cols[-1] - cols[0] + 1)
        assert labels[i, y[i]].item() == pytest.approx(1 - box.item() / 32**2, abs=1e-6)
    runs = []
    for noise in (False, True):
        torch.manual_seed(123)
        got = []
        for images, labels in loader():
            if noise:
                torch.randn(1000)  # the loop using torch's generator changes nothing
            got.append((images, labels))
        runs.append(got)
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(*runs))
    with pytest.raises(ls.ConfigError, match="num_classes"):
        ls.mixup_cutmix(1)
    u8 = ls.Loader(ls.Folder(demo / "folder"), fields={"jpg": ls.Image(32), "cls": ls.Int()}, batch_size=8,
                   output=("jpg", "cls"), map=ls.mixup_cutmix(10))
    with pytest.raises(ls.LoadscopeError, match="give the image field a float dtype"):
        next(iter(u8))


SINGLE_OPS = [("RandomSolarize", {"threshold": 100}, lambda x: F.solarize(x, 100)),
              ("RandomSolarize", {"threshold": 0}, lambda x: F.solarize(x, 0)),
              ("RandomPosterize", {"bits": 3}, lambda x: F.posterize(x, 3)),
              ("RandomPosterize", {"bits": 0}, lambda x: F.posterize(x, 0)),
              ("RandomAutocontrast", {}, F.autocontrast), ("RandomEqualize", {}, F.equalize),
              ("RandomInvert", {}, F.invert)]


@pytest.mark.parametrize("name,params,reference", SINGLE_OPS, ids=[f"{n}{p}" for n, p, _ in SINGLE_OPS])
def test_each_random_op_equals_torchvisions_on_the_plain_output(demo, name, params, reference):
    """p=1: every sample is torchvision's functional op on the same plain output; p=0.5: about
    half the samples, drawn per sample, the same for any thread count."""
    plain = batch(demo / "folder")
    got = batch(demo / "folder", ops=[ls.Op(name, p=1, **params)])
    assert torch.equal(got, torch.stack([reference(x) for x in plain]))
    half = batch(demo / "folder", ops=[ls.Op(name, p=0.5, **params)], threads=1)
    assert torch.equal(half, batch(demo / "folder", ops=[ls.Op(name, p=0.5, **params)], threads=2))
    applied = [torch.equal(h, g) and not torch.equal(h, x) for h, g, x in zip(half, got, plain)]
    kept = [torch.equal(h, x) for h, x in zip(half, plain)]
    assert all(a or k for a, k in zip(applied, kept))
    assert 0.3 * len(plain) < sum(applied) < 0.7 * len(plain)  # 120 samples, seeded: a fixed count
