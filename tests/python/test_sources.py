"""Sources: brace expansion, folder grouping and labels, manifests."""

import csv
import json

import pytest

import loadscope as ls


def test_brace_expansion_like_the_shell():
    assert ls.expand_braces("s-{000..002}.tar") == ["s-000.tar", "s-001.tar", "s-002.tar"]
    assert ls.expand_braces("s-{8..10}.tar") == ["s-8.tar", "s-9.tar", "s-10.tar"]
    assert ls.expand_braces("{a,b}-{0..1}") == ["a-0", "a-1", "b-0", "b-1"]
    assert ls.expand_braces("plain.tar") == ["plain.tar"]
    with pytest.raises(ls.ConfigError, match="cannot expand"):
        ls.expand_braces("s-{x}.tar")


def test_folder_is_imagefolder_sample_for_sample(tmp_path, real):
    """Awkward names and extensions: every image file is a sample, in ImageFolder's order and
    with its labels (hidden class directories included, as ImageFolder has them)."""
    from torchvision.datasets import ImageFolder

    jpg = (real / "imageio/chelsea.jpg").read_bytes()
    png = (real / "vision/test/assets/fakedata/logos/rgb_pytorch.png").read_bytes()
    files = {
        "b_dogs/a.jpg": jpg, "b_dogs/a.png": png, "b_dogs/b.jpg": jpg, "b_dogs/b.JPG": jpg,
        "b_dogs/c.jpeg": jpg, "b_dogs/A.jpg": jpg, "b_dogs/a-b.jpg": jpg, "b_dogs/a_b.jpg": jpg,
        "b_dogs/sub/z.JPEG": jpg, "a_cats/one.jpg": jpg, ".hidden/h.png": png,
    }
    for rel, data in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(data)
    (tmp_path / "a_cats" / "one.txt").write_text("a cat")
    (tmp_path / "b_dogs" / "notes.md").write_text("not a sample")
    ref = ImageFolder(str(tmp_path))
    src = ls.Folder(tmp_path)
    assert src.classes == ref.classes and src.ignored_files == 1
    loader = ls.Loader(src, fields={"jpg": ls.Image(16), "cls": ls.Int()}, batch_size=100)
    b = next(iter(loader))
    assert list(zip(b["__key__"], b["cls"].tolist())) == ref.samples
    captions = next(iter(ls.Loader(ls.Folder(tmp_path / "a_cats"), fields={"txt": ls.Text()}, batch_size=1)))
    assert captions["txt"] == ["a cat"]
    with pytest.raises(ls.FieldError, match="no member 'txt'"):
        list(ls.Loader(src, fields={"txt": ls.Text()}, batch_size=2))
    flat = ls.Folder(tmp_path / "a_cats")
    assert flat.labels == "none" and flat.classes == []


def test_file_names_that_are_not_utf8(tmp_path, real):
    """Keys decode like os.fsdecode, so they open the file again; shards likewise."""
    import io
    import os
    import tarfile

    jpg = (real / "imageio/chelsea.jpg").read_bytes()
    d = os.fsencode(str(tmp_path / "c"))
    os.makedirs(d)
    with open(os.path.join(d, b"caf\xe9.jpg"), "wb") as f:
        f.write(jpg)
    b = next(iter(ls.Loader(ls.Folder(tmp_path), fields={"jpg": ls.Image(16), "cls": ls.Int()}, batch_size=1)))
    assert os.path.exists(b["__key__"][0])
    with tarfile.open(tmp_path / "s.tar", "w", format=tarfile.GNU_FORMAT, encoding="latin-1") as t:
        for name in ("ok1", "caf\xe9", "ok2"):
            info = tarfile.TarInfo(name + ".jpg")
            info.size = len(jpg)
            t.addfile(info, io.BytesIO(jpg))
    keys = [k for b in ls.Loader(ls.WebDataset(str(tmp_path / "s.tar")), fields={"jpg": ls.Image(16)}, batch_size=2) for k in b["__key__"]]
    assert len(keys) == 3 and keys[1].endswith(":caf\udce9")


def test_csv_manifest_with_root(tmp_path, demo):
    files = sorted((demo / "folder").rglob("*.jpg"))[:4]
    with open(tmp_path / "m.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "cls", "txt"])
        for i, p in enumerate(files):
            w.writerow([p.relative_to(demo), i, f"caption {i}"])
    src = ls.FileList(tmp_path / "m.csv", root=demo)
    b = next(iter(ls.Loader(src, fields={"jpg": ls.Image(16), "cls": ls.Int(), "txt": ls.Text()}, batch_size=4)))
    assert b["cls"].tolist() == [0, 1, 2, 3]
    assert b["txt"] == [f"caption {i}" for i in range(4)]


def test_image_named_fields_read_any_image_member(tmp_path, real):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "n01.JPEG").write_bytes((real / "imageio/chelsea.jpg").read_bytes())
    (tmp_path / "x" / "n02.png").write_bytes((real / "vision/test/assets/fakedata/logos/rgb_pytorch.png").read_bytes())
    b = next(iter(ls.Loader(ls.Folder(tmp_path), fields={"jpg": ls.Image(16), "cls": ls.Int()}, batch_size=2)))
    assert b["jpg"].shape == (2, 3, 16, 16)
    with pytest.raises(ls.FieldError, match="no member 'jpg'"):  # explicit keys are taken literally
        list(ls.Loader(ls.Folder(tmp_path), fields={"jpg": ls.Image(16, keys="jpg")}, batch_size=2))


def test_jsonl_values_of_any_type_become_members(tmp_path, demo):
    p = next((demo / "folder").rglob("*.jpg"))
    (tmp_path / "m.jsonl").write_text(json.dumps({"path": str(p), "meta": {"a": [1, 2]}, "raw": "bytes!"}) + "\n")
    src = ls.FileList(tmp_path / "m.jsonl")
    b = next(iter(ls.Loader(src, fields={"meta": ls.Json(), "raw": ls.Bytes()}, batch_size=1)))
    assert b["meta"] == [{"a": [1, 2]}] and b["raw"] == [b"bytes!"]


def test_text_members_are_utf8_exactly_as_python_decodes_it(tmp_path):
    """Text fields and manifests share one UTF-8 check (io/text.h): a member is accepted exactly
    when Python's strict decoder accepts it — overlong forms, surrogates, code points above
    U+10FFFF and cut-short sequences are refused, naming the sample."""
    import io
    import tarfile

    cases = [b"plain", "café €".encode(), "\U0001F600".encode(), "\U0010FFFF".encode(),
             b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"ends cut short \xe2\x82", b"\x80", b"\xff"]
    for n, data in enumerate(cases):
        shard = tmp_path / f"t{n}.tar"
        with tarfile.open(shard, "w") as tar:
            info = tarfile.TarInfo(f"s{n}.txt")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        loader = ls.Loader(ls.WebDataset([str(shard)]), fields={"txt": ls.Text()}, batch_size=1)
        try:
            want = data.decode("utf-8")
        except UnicodeDecodeError:
            with pytest.raises(ls.SampleError, match=rf"s{n}.*not valid UTF-8"):
                next(iter(loader))
        else:
            assert next(iter(loader))["txt"] == [want], data
