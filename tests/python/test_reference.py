"""Decoded and augmented pixels against independent references: PIL/torchvision, djpeg's
reference decodes (../shared/data/real/_reference) and the facts of the data README."""

import csv
import hashlib
import io

import numpy as np
import pytest
import torchvision.transforms as T
from PIL import Image as PILImage
from PIL import ImageOps

import loadscope as ls
from loadscope import _native

# Every decodable JPEG and PNG of the real set (the damaged ones are tested separately).
JPEGS = [
    "vision/test/assets/encode_jpeg/grace_hopper_517x606.jpg",
    "vision/test/assets/fakedata/logos/rgb_pytorch.jpg",
    "vision/test/assets/fakedata/logos/gray_pytorch.jpg",
    "vision/test/assets/fakedata/logos/cmyk_pytorch.jpg",
    "pillow/Tests/images/hopper.jpg",
    "pillow/Tests/images/pil_sample_rgb.jpg",
    "pillow/Tests/images/hopper_16bit_qtables.jpg",
    "pillow/Tests/images/jpeg_ff00_header.jpg",
    "pillow/Tests/images/truncated_app14.jpg",
    "pillow/Tests/images/orientation_rectangle.jpg",
    "imageio/chelsea.jpg",
    "imageio/bricks.jpg",
    "libjpeg-turbo/testimages/testorig.jpg",
    "libjpeg-turbo/testimages/testimgari.jpg",
    "moviepy/media/doc_medias/example_mask.jpg",
] + [f"exif-orientation-examples/Landscape_{i}.jpg" for i in range(9)]
PNGS = [
    "vision/test/assets/fakedata/logos/rgb_pytorch.png",
    "vision/test/assets/fakedata/logos/gray_pytorch.png",
    "vision/test/assets/fakedata/logos/grayalpha_pytorch.png",
    "vision/test/assets/fakedata/logos/palette_pytorch.png",
    "vision/test/assets/fakedata/logos/rgbalpha_pytorch.png",
    "vision/test/assets/fakedata/logos/rgb_pytorch16.png",
    "vision/test/assets/fakedata/logos/rgbalpha_pytorch16.png",
] + [f"vision/test/assets/fakedata/imagefolder/{c}/{c}{i}.png" for c, n in (("a", 3), ("b", 4)) for i in range(1, n + 1)]

# Every WebP of the real set: lossy, lossy with EXIF (orientation 1 and 6) and ICC, lossy with
# alpha, a small one (README of ../shared/data/real). It has no still lossless WebP: those are
# made from a real photo in the tests below.
WEBPS = [
    "pillow/Tests/images/hopper.webp",
    "pillow/Tests/images/flower.webp",
    "pillow/Tests/images/hopper_orientation_6.webp",
    "pillow/Tests/images/transparent.webp",
    "pillow/Tests/images/anim_frame1.webp",
]

# BMPs of the real set: 8-bit palette (libjpeg-turbo's test image), 24-bit and 8-bit (Pillow's
# "good" BMP suite).
BMPS = [
    "libjpeg-turbo/testimages/shira_bird8.bmp",
    "pillow/Tests/images/bmp/g/rgb24.bmp",
    "pillow/Tests/images/bmp/g/pal8.bmp",
]


def decode(data: bytes, **image_args) -> np.ndarray:
    """One image through loadscope's decode+augment path, as HWC uint8."""
    field = ls.Image(**image_args)
    h, w = field.hw
    out, _warning = _native.decode_image(data, field._native("img", _native))
    return np.frombuffer(out, np.uint8).reshape(3, h, w).transpose(1, 2, 0)


def pil_upright(path) -> PILImage.Image:
    with PILImage.open(path) as im:
        return ImageOps.exif_transpose(im).convert("RGB")


@pytest.mark.filterwarnings("ignore:Palette images with Transparency")
@pytest.mark.parametrize("rel", JPEGS + PNGS + WEBPS + BMPS)
def test_resize_center_crop_matches_torchvision(real, rel):
    """Resize(256) + CenterCrop(224) with default options: mean |difference| to torchvision's
    PIL backend <= 2.0; in fact the same filter as Pillow's, so no pixel is off by more than 2."""
    ref = np.asarray(T.CenterCrop(224)(T.Resize(256)(pil_upright(real / rel))))
    got = decode((real / rel).read_bytes(), size=224, crop="center", resize=256)
    diff = np.abs(got.astype(np.int16) - ref.astype(np.int16))
    assert diff.mean() <= 2.0, f"{rel}: mean |diff| {diff.mean():.3f}"
    assert diff.max() <= 2, f"{rel}: max |diff| {diff.max()}"


@pytest.mark.parametrize("hw", [(224, 224), (23, 37), (200, 13), (61, 100), (17, 300), (1, 5), (450, 680)])
def test_resampling_any_size_layout_and_flip_matches_pillow(real, hw):
    """The resampler's output, in both layouts and mirrored, against Pillow's resize (BILINEAR,
    antialiased) of a real photo kept lossless in a PNG: down- and upscales, sizes that are not
    multiples of the 8 x 16 blocks it transposes in, within one level per channel."""
    photo = PILImage.open(real / "imageio/chelsea.jpg").convert("RGB")
    png = io.BytesIO()
    photo.save(png, format="PNG")
    h, w = hw
    ref = np.asarray(photo.resize((w, h), PILImage.BILINEAR)).astype(int)
    for flip in (0.0, 1.0):
        want = ref[:, ::-1] if flip else ref
        chw = decode(png.getvalue(), size=hw, crop="resize", flip=flip)
        field = ls.Image(size=hw, crop="resize", flip=flip, channels_last=True)
        out, _ = _native.decode_image(png.getvalue(), field._native("img", _native))
        hwc = np.frombuffer(out, np.uint8).reshape(h, w, 3)
        assert np.array_equal(hwc, chw), f"{hw} flip={flip}: the layouts differ"
        assert np.abs(chw.astype(int) - want).max() <= 1, f"{hw} flip={flip}"


@pytest.mark.parametrize("hw, resize", [((224, 224), 256), ((23, 37), 41), ((200, 13), 211), ((17, 300), 333)])
def test_center_crops_of_any_size_layout_and_flip_match_torchvision(real, hw, resize):
    """Resize + CenterCrop, where the resampler reads only a window of the image (its first
    column is not the image's), in both layouts and mirrored, against torchvision's PIL
    backend within 2 levels (torchvision resizes the whole image, then crops)."""
    photo = PILImage.open(real / "imageio/chelsea.jpg").convert("RGB")
    png = io.BytesIO()
    photo.save(png, format="PNG")
    h, w = hw
    ref = np.asarray(T.CenterCrop(hw)(T.Resize(resize)(photo))).astype(int)
    for flip in (0.0, 1.0):
        want = ref[:, ::-1] if flip else ref
        chw = decode(png.getvalue(), size=hw, crop="center", resize=resize, flip=flip)
        field = ls.Image(size=hw, crop="center", resize=resize, flip=flip, channels_last=True)
        out, _ = _native.decode_image(png.getvalue(), field._native("img", _native))
        assert np.array_equal(np.frombuffer(out, np.uint8).reshape(h, w, 3), chw), f"{hw} flip={flip}: layouts differ"
        assert np.abs(chw.astype(int) - want).max() <= 2, f"{hw} flip={flip}"


def test_random_resized_crop_of_the_whole_image_matches_torchvision(real):
    """With scale=(1, 1) and the image's own aspect ratio, RandomResizedCrop keeps the whole
    image in torchvision too, so the outputs are comparable pixel for pixel."""
    path = real / "imageio/chelsea.jpg"
    im = pil_upright(path)
    r = im.width / im.height
    ref = np.asarray(T.RandomResizedCrop(160, scale=(1, 1), ratio=(r, r))(im))
    got = decode(path.read_bytes(), size=160, crop="random_resized", scale=(1.0, 1.0), ratio=(r, r))
    assert np.abs(got.astype(int) - ref).mean() < 0.5


@pytest.mark.parametrize("rel", [j for j in JPEGS if "Landscape" not in j and "cmyk" not in j])
def test_full_decode_matches_djpeg_reference_md5(real, rel):
    """At its own size with crop='resize', the output is the decoded image itself: its bytes
    must hash to djpeg 2.1.5's reference decode (grey replicated to RGB)."""
    rows = {r["path"]: r for r in csv.DictReader(open(real / "_reference/jpeg_reference_decodes.tsv"), delimiter="\t")}
    ref = rows[rel]
    w, h = int(ref["width"]), int(ref["height"])
    got = decode((real / rel).read_bytes(), size=(h, w), crop="resize", exif=False, dct_scaling=False)
    raw = got[..., 0].tobytes() if ref["pnm"] == "P5" else got.tobytes()
    assert hashlib.md5(raw).hexdigest() == ref["raw_md5"]


def test_libjpeg_turbo_own_test_image_md5(real):
    """libjpeg-turbo's CMake tests: testorig.jpg decodes to raw RGB md5 058c0772...241c7f."""
    got = decode((real / "libjpeg-turbo/testimages/testorig.jpg").read_bytes(), size=(149, 227), crop="resize", dct_scaling=False)
    assert hashlib.md5(got.tobytes()).hexdigest() == "058c077208b6d9e0a8fb0a5565241c7f"


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_gives_the_upright_picture(real, orientation):
    """Every Landscape_N must read upright at 1800x1200: equal to Landscape_0 (no EXIF) up to
    the JPEG noise of separate encodes, and to PIL's exif_transpose."""
    upright = decode((real / "exif-orientation-examples/Landscape_0.jpg").read_bytes(), size=(120, 180), crop="resize")
    path = real / f"exif-orientation-examples/Landscape_{orientation}.jpg"
    got = decode(path.read_bytes(), size=(120, 180), crop="resize")
    assert np.abs(got.astype(int) - upright).mean() < 3.0
    ref = np.asarray(pil_upright(path).resize((180, 120), PILImage.BILINEAR))
    assert np.abs(got.astype(int) - ref).mean() < 1.0
    # Switched off, orientations 5-8 stay transposed: the stored picture is 1200x1800.
    if orientation >= 5:
        raw = decode(path.read_bytes(), size=(180, 120), crop="resize", exif=False)
        stored = np.asarray(PILImage.open(path).convert("RGB").resize((120, 180), PILImage.BILINEAR))
        assert np.abs(raw.astype(int) - stored).mean() < 1.0


def test_orientation_rectangle(real):
    """Pillow's test: 2x1 stored, EXIF 8, upright it is 1x2 and equals rotate(90, expand)."""
    path = real / "pillow/Tests/images/orientation_rectangle.jpg"
    got = decode(path.read_bytes(), size=(2, 1), crop="resize", dct_scaling=False)
    with PILImage.open(path) as im:
        ref = np.asarray(im.convert("RGB").rotate(90, expand=True))
    assert got.shape == ref.shape == (2, 1, 3)
    assert np.array_equal(got, ref)


def test_cmyk_and_grey_convert_like_pil(real):
    for rel in ("vision/test/assets/fakedata/logos/cmyk_pytorch.jpg", "vision/test/assets/fakedata/logos/gray_pytorch.jpg"):
        got = decode((real / rel).read_bytes(), size=100, crop="resize", dct_scaling=False)
        ref = np.asarray(PILImage.open(real / rel).convert("RGB"))
        assert np.abs(got.astype(int) - ref).mean() < 2.0, rel


@pytest.mark.parametrize("rel", ["vision/test/assets/fakedata/logos/rgb_pytorch16.png", "vision/test/assets/fakedata/logos/rgbalpha_pytorch16.png"])
def test_16bit_png_keeps_the_high_byte_like_pil(real, rel):
    got = decode((real / rel).read_bytes(), size=100, crop="resize")
    ref = np.asarray(PILImage.open(real / rel).convert("RGB"))
    assert np.array_equal(got, ref)


def _lossless_webp(real, mode: str, **options) -> bytes:
    """A still lossless WebP of a real photo (not square: 150x120), RGB or RGBA."""
    photo = PILImage.open(real / "imageio/chelsea.jpg").convert("RGB").crop((40, 20, 190, 140)).convert(mode)
    if mode == "RGBA":
        photo.putalpha(PILImage.linear_gradient("L").resize(photo.size))
    return _encoded(photo, "WEBP", lossless=True, **options)


def _webp_inputs(real):
    yield from ((rel, (real / rel).read_bytes()) for rel in WEBPS)
    yield "lossless RGB", _lossless_webp(real, "RGB")
    yield "lossless RGBA", _lossless_webp(real, "RGBA")
    for orientation in (3, 5, 6, 8):  # raw TIFF in the EXIF chunk, as libwebp's tools write it
        exif = PILImage.Exif()
        exif[0x0112] = orientation
        yield f"orientation {orientation}", _lossless_webp(real, "RGB", exif=exif.tobytes()[6:])


def test_webp_decodes_like_pillow(real):
    """Kept at its size, a WebP is Pillow's decode byte for byte (both use libwebp): lossy and
    lossless, alpha dropped as convert("RGB") drops it, EXIF orientations turned upright (a
    non-square image, so that a transposed size shows)."""
    for name, data in _webp_inputs(real):
        with PILImage.open(io.BytesIO(data)) as im:
            assert not getattr(im, "is_animated", False)
            ref = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
        if name.startswith("orientation"):
            assert ref.shape[:2] == ((150, 120) if name[-1] in "568" else (120, 150)), name
        got = decode(data, size=ref.shape[:2], crop="resize")
        assert np.array_equal(got, ref), f"{name}: max |diff| {np.abs(got.astype(int) - ref).max()}"


def test_webp_size_checks(real):
    """A WebP over max_pixels fails before decoding; a VP8X canvas that disagrees with the
    bitstream's size is refused by libwebp."""
    data = (real / "pillow/Tests/images/hopper.webp").read_bytes()
    with pytest.raises(ls.DecodeError, match="image too large: 128x128 pixels, over max_pixels=16383"):
        decode(data, size=32, max_pixels=128 * 128 - 1)
    decode(data, size=32, max_pixels=128 * 128)
    flower = bytearray((real / "pillow/Tests/images/flower.webp").read_bytes())
    assert flower[12:16] == b"VP8X"
    flower[24:27] = (479 + 16).to_bytes(3, "little")  # canvas width - 1: 496 instead of 480
    with pytest.raises(ls.DecodeError, match="WebP: bitstream error"):
        decode(bytes(flower), size=32)


def test_webp_reference_decode_of_the_data_readme(real):
    """hopper.webp against hopper_webp_bits.ppm, libwebp's own decode that Pillow's tests hold
    it to (within 1 level: other libwebp versions may round chroma differently)."""
    got = decode((real / "pillow/Tests/images/hopper.webp").read_bytes(), size=128, crop="resize")
    ref = np.asarray(PILImage.open(real / "pillow/Tests/images/hopper_webp_bits.ppm").convert("RGB"))
    assert np.abs(got.astype(int) - ref).max() <= 1


def _netpbm(mode: str, raw: bool, real) -> bytes:
    """A real photograph written as netpbm by Pillow (raw), or by hand in netpbm's plain text
    form (Pillow writes no plain form), which Pillow reads back as the reference."""
    with PILImage.open(real / "pillow/Tests/images/hopper.webp") as im:
        im = im.convert(mode).resize((37, 23))
    if raw:
        buf = io.BytesIO()
        im.save(buf, format="PPM")
        return buf.getvalue()
    px = np.asarray(im)
    if mode == "1":  # plain PBM: 1 is black
        return b"P1\n37 23\n" + b"\n".join(b" ".join(b"0" if v else b"1" for v in row) for row in px) + b"\n"
    magic, maxval = (b"P3", 255) if mode == "RGB" else (b"P2", 255)
    body = b"\n".join(b" ".join(str(int(v)).encode() for v in row.ravel()) for row in px)
    return magic + b"\n# a comment\n37 23\n" + str(maxval).encode() + b"\n" + body + b"\n"


@pytest.mark.parametrize("mode, raw, magic", [("RGB", True, b"P6"), ("L", True, b"P5"), ("1", True, b"P4"),
                                              ("RGB", False, b"P3"), ("L", False, b"P2"), ("1", False, b"P1")])
def test_netpbm_decodes_like_pillow(real, mode, raw, magic):
    """PPM, PGM and PBM (torchvision's IMG_EXTENSIONS list .ppm and .pgm), raw and plain,
    exactly as Pillow reads them, greys replicated to RGB."""
    data = _netpbm(mode, raw, real)
    assert data[:2] == magic
    got = decode(data, size=(23, 37), crop="resize")
    ref = np.asarray(PILImage.open(io.BytesIO(data)).convert("RGB"))
    assert np.array_equal(got, ref)


def test_a_real_ppm_decodes_like_pillow(real):
    path = real / "pillow/Tests/images/hopper_webp_bits.ppm"
    got = decode(path.read_bytes(), size=128, crop="resize")
    assert np.array_equal(got, np.asarray(PILImage.open(path).convert("RGB")))


def test_the_format_table_gives_the_member_names_and_folder_lists_what_imagefolder_does():
    """IMAGE_EXTENSIONS is torchvision's list (a Folder has ImageFolder's samples), and every
    one of them is a format that decodes; the member names are the table's."""
    from torchvision.datasets.folder import IMG_EXTENSIONS

    assert ls.IMAGE_EXTENSIONS == IMG_EXTENSIONS
    names = {name: exts for name, exts in _native.formats()["image"]}
    assert set(names) == {"JPEG", "PNG", "PPM", "PGM", "PBM", "BMP", "TIFF", "WebP", "GIF"}
    assert _native.formats()["missing_demuxers"] == []  # the system's FFmpeg has every container's
    members = ls.formats()
    assert members["image"] == tuple(e for exts in names.values() for e in exts)
    assert {"." + e for e in members["image"]} >= set(IMG_EXTENSIONS)
    assert ls.VIDEO_EXTENSIONS == tuple("." + e for e in members["video"])
    assert {"mp4", "mkv", "webm", "avi", "mov"} <= set(members["video"])
    assert {"wav", "flac", "mp3", "m4a", "ogg", "opus"} <= set(members["audio"])


def test_animated_webp_gives_its_first_frame_like_pillow():
    """An animation (made here: the real set has none) decodes to its first frame as Pillow
    shows it, drawn on the canvas, alpha dropped; the first frame covers part of the canvas."""
    first = PILImage.new("RGBA", (20, 14), (0, 0, 0, 0))
    first.paste(PILImage.new("RGBA", (12, 8), (200, 60, 30, 255)), (4, 3))
    second = PILImage.new("RGBA", (20, 14), (10, 220, 90, 255))
    buf = io.BytesIO()
    first.save(buf, format="WEBP", save_all=True, append_images=[second], duration=40, lossless=True)
    data = buf.getvalue()
    anmf = data.index(b"ANMF") + 8  # the first frame's offset and size: a part of the canvas
    x, y = (int.from_bytes(data[anmf + k : anmf + k + 3], "little") * 2 for k in (0, 3))
    w, h = (int.from_bytes(data[anmf + k : anmf + k + 3], "little") + 1 for k in (6, 9))
    assert (w, h) != (20, 14) and (x, y) != (0, 0)
    with PILImage.open(buf) as im:
        assert im.n_frames == 2
        ref = np.asarray(im.convert("RGB"))
    got = decode(buf.getvalue(), size=(14, 20), crop="resize")
    assert np.array_equal(got, ref)
    assert tuple(got[5, 6]) == (200, 60, 30)


@pytest.mark.parametrize("rel", ["pillow/Tests/images/flower.webp", "pillow/Tests/images/transparent.webp",
                                 "lossless"])
def test_webp_random_crops_decode_only_their_region_exactly(real, rel):
    """RandomResizedCrop decodes only the crop's region (libwebp's cropping, from even
    coordinates): the result equals the same crop of a PNG holding Pillow's decode of the whole
    image, which loadscope decodes whole, for many crops (same seed, epoch and position)."""
    webp = _lossless_webp(real, "RGB") if rel == "lossless" else (real / rel).read_bytes()
    png = io.BytesIO()
    PILImage.open(io.BytesIO(webp)).convert("RGB").save(png, format="PNG")
    field = ls.Image(96, crop="random_resized", flip=0.5)
    for position in range(40):
        a, _ = _native.decode_image(webp, field._native("img", _native), seed=3, epoch=1, position=position)
        b, _ = _native.decode_image(png.getvalue(), field._native("img", _native), seed=3, epoch=1, position=position)
        assert a == b, f"{rel}: crop at position {position} differs"


def test_the_webp_decode_only_ceiling_decodes_and_counts_failures(real):
    """The WebP benchmark's ceiling (libwebp alone, from memory) decodes real files whole and
    cropped, and counts a truncated file as a failure, so that a broken ceiling cannot pass for
    a fast one."""
    flower = (real / "pillow/Tests/images/flower.webp").read_bytes()
    hopper = (real / "pillow/Tests/images/hopper.webp").read_bytes()
    _, images, failures = _native.webp_decode_only([flower, hopper, flower[:-100]],
                                                   [[0, 0, 0, 0], [3, 5, 60, 40], [0, 0, 0, 0]], 2)
    assert (images, failures) == (2, 1)
    with pytest.raises(ls.ConfigError, match="webps and crops differ in length"):
        _native.webp_decode_only([flower], [], 1)


@pytest.mark.parametrize("rel", BMPS)
def test_bmp_decodes_like_pillow(real, rel):
    ref = np.asarray(PILImage.open(real / rel).convert("RGB"))
    h, w = ref.shape[:2]
    assert np.array_equal(decode((real / rel).read_bytes(), size=(h, w), crop="resize"), ref)


def _encoded(image: PILImage.Image, fmt: str, **options) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format=fmt, **options)
    return buf.getvalue()


@pytest.mark.parametrize("fmt, options, mode", [
    (fmt, options, mode)
    for fmt, options in [("BMP", {}), ("GIF", {}), ("TIFF", {}), ("TIFF", {"compression": "tiff_lzw"}),
                         ("TIFF", {"compression": "tiff_adobe_deflate"})]
    for mode in ["RGB", "RGBA", "L", "1", "P"]
    if not (fmt == "BMP" and mode == "P")  # an 8-bit palette BMP: the real pal8.bmp, above
])
def test_bmp_gif_tiff_decode_like_pillow(real, fmt, options, mode):
    """BMP, GIF and TIFF through FFmpeg's decoders, on files Pillow writes from a real photo in
    every mode it saves them in: Pillow's own decode, byte for byte (alpha dropped)."""
    photo = PILImage.open(real / "imageio/chelsea.jpg").convert("RGB").crop((40, 20, 190, 140))
    data = _encoded(photo.convert(mode), fmt, **options)
    with PILImage.open(io.BytesIO(data)) as im:
        ref = np.asarray(im.convert("RGB"))
    got = decode(data, size=ref.shape[:2], crop="resize")
    assert np.array_equal(got, ref), f"{fmt} {mode}: max |diff| {np.abs(got.astype(int) - ref).max()}"


def test_16bit_tiff_keeps_the_high_byte(real):
    """A 16-bit grey TIFF (little-endian, as Pillow writes I;16) keeps each sample's high byte,
    as 16-bit PNG does: the reference is Pillow's 16-bit samples shifted right by 8 (Pillow's
    own convert("RGB") clips instead). The low bytes vary, so rounding would show."""
    grey = np.asarray(PILImage.open(real / "imageio/chelsea.jpg").convert("L").crop((40, 20, 190, 140)))
    samples = grey.astype(np.uint16) * 257 + (np.arange(grey.size).reshape(grey.shape) % 251).astype(np.uint16)
    data = _encoded(PILImage.fromarray(samples, mode="I;16"), "TIFF")
    assert data[:2] == b"II"
    with PILImage.open(io.BytesIO(data)) as im:
        ref = (np.asarray(im).astype(np.uint16) >> 8).astype(np.uint8)
    got = decode(data, size=ref.shape, crop="resize")
    assert all(np.array_equal(got[..., c], ref) for c in range(3))


def test_gif_first_frame_and_transparency():
    """An animated GIF gives its first frame. A transparent pixel comes out as FFmpeg's GIF
    decoder draws it (transparent white), where Pillow's convert("RGB") shows the transparent
    palette entry: every other pixel is Pillow's."""
    first = PILImage.new("P", (20, 14), 1)
    first.putpalette([90, 90, 200, 200, 60, 30, 10, 220, 90] + [0] * (253 * 3))
    first.paste(0, (0, 0, 5, 5))  # index 0: transparent
    second = PILImage.new("P", (20, 14), 2)
    second.putpalette(first.getpalette())
    data = _encoded(first, "GIF", save_all=True, append_images=[second], transparency=0, duration=40)
    with PILImage.open(io.BytesIO(data)) as im:
        assert im.n_frames == 2
        ref = np.asarray(im.convert("RGB"))
    got = decode(data, size=(14, 20), crop="resize")
    opaque = np.ones((14, 20), bool)
    opaque[:5, :5] = False
    assert np.array_equal(got[opaque], ref[opaque])
    assert tuple(got[10, 10]) == (200, 60, 30)
    assert tuple(ref[0, 0]) == (90, 90, 200)  # Pillow: the transparent index's palette entry
    assert tuple(got[0, 0]) == (255, 255, 255)  # FFmpeg: transparent white, alpha dropped


def test_a_bmp_claiming_a_huge_size_fails_before_allocating(real):
    """A BMP header saying 20000x10000 (200 Mpixel, over max_pixels) fails at once, naming the
    limit, instead of allocating the frame."""
    data = bytearray((real / "pillow/Tests/images/bmp/g/rgb24.bmp").read_bytes())
    data[18:26] = (20000).to_bytes(4, "little") + (10000).to_bytes(4, "little")
    with pytest.raises(ls.DecodeError, match="image too large: 20000x10000 pixels, over max_pixels=178956970"):
        decode(bytes(data), size=32)


@pytest.mark.parametrize("fmt", ["PNG", "BMP", "GIF", "TIFF"])
def test_max_pixels_is_exact_for_ffmpeg_images(fmt):
    """w x h == max_pixels decodes, one pixel more fails (FFmpeg's own limit counted the width
    rounded up to its alignment: 1000x1000 failed under 1000000)."""
    data = _encoded(PILImage.new("RGB", (1000, 1000), (9, 99, 199)), fmt)
    assert decode(data, size=16, max_pixels=1000 * 1000)[0, 0].tolist() == [9, 99, 199]
    with pytest.raises(ls.DecodeError, match="image too large: 1000x1000 pixels, over max_pixels=999999"):
        decode(data, size=16, max_pixels=1000 * 1000 - 1)


@pytest.mark.parametrize("fmt, options", [("GIF", {}), ("TIFF", {}), ("TIFF", {"compression": "tiff_lzw"}),
                                          ("BMP", {})])
def test_bmp_gif_tiff_cut_anywhere_fail(real, fmt, options):
    """Cut anywhere, a file fails with a DecodeError: a GIF at every offset (FFmpeg's GIF decoder
    took an image whose data ends between two rows as whole, at 161 of 19447 offsets of a
    150x120 one, so loadscope walks the GIF's blocks first), the others at 100 offsets."""
    photo = PILImage.open(real / "imageio/chelsea.jpg").convert("RGB").crop((40, 20, 190, 140))
    if fmt == "GIF":
        photo = photo.crop((0, 0, 80, 60))
    data = _encoded(photo, fmt, **options)
    field = ls.Image((photo.height, photo.width), crop="resize")._native("img", _native)
    # A GIF without only its trailer byte still holds its whole image (Pillow reads it too).
    for n in range(1, len(data) - 1, 1 if fmt == "GIF" else len(data) // 100):
        with pytest.raises(ls.DecodeError):
            _native.decode_image(data[:n], field)


def test_damaged_jpeg_that_libjpeg_recovers_is_delivered(real):
    """bad_huffman.jpg: torchvision's test says it must decode (a libjpeg warning only)."""
    path = real / "vision/test/assets/damaged_jpeg/bad_huffman.jpg"
    got = decode(path.read_bytes(), size=(768, 1024), crop="resize", dct_scaling=False)
    ref = np.asarray(PILImage.open(path).convert("RGB"))
    assert np.abs(got.astype(int) - ref).max() <= 1


@pytest.mark.parametrize(
    "rel, message",
    [
        ("vision/test/assets/damaged_jpeg/corrupt.jpg", "Unsupported marker type 0xae"),
        ("vision/test/assets/damaged_jpeg/corrupt34_2.jpg", "truncated"),
        ("vision/test/assets/toosmall_png/heapbof.png", "damaged PNG"),
        ("pillow/Tests/images/bmp/b/shortfile.bmp", "BMP: cannot decode: .*not enough data"),
        ("pillow/LICENSE",
         r"unsupported image format: unknown \(supported: JPEG, PNG, PPM, BMP, PGM, TIFF, WebP, GIF, PBM\)"),
        ("pillow/Tests/images/hopper.webp[:2000]", "truncated WebP: its header says 3282 bytes, 2000"),
        ("pillow/Tests/images/flower.webp[:20]", "truncated WebP"),
        ("pillow/Tests/images/hopper.webp[:20]+zeros", "WebP: bitstream error"),
    ],
)
@pytest.mark.parametrize("crop", ["center", "random_resized"])
def test_corrupt_and_unsupported_files_raise_decode_error(real, rel, message, crop):
    # "file[:n]": the file cut after n bytes; "+zeros": the rest of its bytes zeroed.
    rel, _, cut = rel.partition("[:")
    data = (real / rel).read_bytes()
    if cut:
        n = int(cut.split("]")[0])
        data = data[:n] + (bytes(len(data) - n) if cut.endswith("+zeros") else b"")
    with pytest.raises(ls.DecodeError, match=message):
        decode(data, size=64, crop=crop)
