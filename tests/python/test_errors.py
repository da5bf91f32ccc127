"""Bad input and bad arguments: errors name the sample, skips are counted and listed, the
budget turns too many failures into an error, arguments fail at construction."""

import json
import logging
import shutil

import pytest
import torch

import loadscope as ls


@pytest.fixture
def broken(demo, real, tmp_path):
    """A copy of 30 demo images plus three bad files with real damage from the data set."""
    root = tmp_path / "broken"
    (root / "x").mkdir(parents=True)
    for p in sorted((demo / "folder").rglob("*.jpg"))[:30]:
        shutil.copy(p, root / "x" / p.name)
    shutil.copy(real / "vision/test/assets/damaged_jpeg/corrupt.jpg", root / "x" / "0000003b.jpg")
    shutil.copy(real / "vision/test/assets/damaged_jpeg/corrupt34_2.jpg", root / "x" / "0000010b.jpg")
    shutil.copy(real / "pillow/Tests/images/bmp/b/shortfile.bmp", root / "x" / "0000020b.jpg")
    return root


def test_raise_names_the_sample_and_the_reason(broken):
    loader = ls.Loader(ls.Folder(broken), fields={"jpg": ls.Image(32)}, batch_size=4, threads=2)
    seen = 0
    with pytest.raises(ls.DecodeError) as e:
        for b in loader:
            seen += len(b["__key__"])
    assert e.value.key.endswith("x/0000003b.jpg")
    assert "Unsupported marker type 0xae" in e.value.reason
    assert seen == 0  # the first batch holds it: nothing of that batch is delivered
    assert isinstance(e.value, ls.SampleError) and isinstance(e.value, ls.LoadscopeError)


def test_skip_counts_lists_and_logs(broken, caplog):
    loader = ls.Loader(ls.Folder(broken), fields={"jpg": ls.Image(32), "cls": ls.Int()}, batch_size=8, on_error="skip", error_budget=None)
    with caplog.at_level(logging.WARNING, logger="loadscope"):
        keys = [k for b in loader for k in b["__key__"]]
    assert len(keys) == 30 and not any(k.endswith("b") for k in keys)
    s = loader.stats()
    assert s["failures"] == 3 and s["samples"] == 30
    reasons = {d["key"].rsplit("/", 1)[-1]: d["reason"] for d in s["skipped"]}
    assert "Unsupported marker type 0xae" in reasons["0000003b.jpg"]
    assert "truncated" in reasons["0000010b.jpg"]
    assert "BMP: cannot decode" in reasons["0000020b.jpg"]  # a truncated BMP
    assert all(d["kind"] == "decode" for d in s["skipped"])
    assert sum("skipped" in r.message for r in caplog.records) == 3


@pytest.mark.parametrize("batch_size", [4, 3, 9])
def test_a_skip_in_the_last_batch_is_logged_like_any_other(broken, tmp_path, caplog, batch_size):
    """The bad file sorts last: alone in the last batch (4), beside good ones (3), in the only
    batch (9). Each way it is counted, listed and logged once."""
    root = tmp_path / "last" / "x"
    root.mkdir(parents=True)
    for p in [p for p in sorted((broken / "x").glob("*.jpg")) if not p.stem.endswith("b")][:8]:
        shutil.copy(p, root / p.name)
    shutil.copy(broken / "x" / "0000003b.jpg", root / "zzz.jpg")
    loader = ls.Loader(ls.Folder(root.parent), fields={"jpg": ls.Image(32)}, batch_size=batch_size, on_error="skip",
                       error_budget=None, threads=2)
    with caplog.at_level(logging.WARNING, logger="loadscope"):
        keys = [k for b in loader for k in b["__key__"]]
    assert len(keys) == 8 and loader.stats()["failures"] == 1
    logged = [r.message for r in caplog.records if "skipped" in r.message]
    assert len(logged) == 1 and "zzz.jpg" in logged[0] and "Unsupported marker type 0xae" in logged[0]


def test_error_budget(broken):
    fields = {"jpg": ls.Image(32)}
    with pytest.raises(ls.ErrorBudgetExceeded, match="3 failures in the first"):
        list(ls.Loader(ls.Folder(broken), fields=fields, batch_size=8, on_error="skip", error_budget=2))
    with pytest.raises(ls.ErrorBudgetExceeded, match="budget"):  # 3 > 0.02 * max(seen, 100)
        list(ls.Loader(ls.Folder(broken), fields=fields, batch_size=8, on_error="skip", error_budget=0.02))
    assert len(list(ls.Loader(ls.Folder(broken), fields=fields, batch_size=8, on_error="skip", error_budget=3))) == 5


def test_sample_errors_keep_their_type_and_key_through_dataloader_workers(broken):
    ds = ls.Dataset(ls.Folder(broken), fields={"jpg": ls.Image(32)}, batch_size=4, threads=1)
    with pytest.raises(ls.DecodeError) as e:
        list(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2))
    assert e.value.key.endswith("0000003b.jpg")
    assert "Unsupported marker type 0xae" in e.value.reason


def test_missing_file_in_a_manifest_is_a_read_error(demo, tmp_path):
    lines = [json.dumps({"path": str(p), "cls": 1}) for p in sorted((demo / "folder").rglob("*.jpg"))[:5]]
    lines.insert(2, json.dumps({"path": str(tmp_path / "gone.jpg"), "cls": 1}))
    (tmp_path / "m.jsonl").write_text("\n".join(lines))
    loader = ls.Loader(ls.FileList(tmp_path / "m.jsonl"), fields={"jpg": ls.Image(32), "cls": ls.Int()}, batch_size=3)
    with pytest.raises(ls.ReadError, match="gone.jpg") as e:
        list(loader)
    assert "No such file" in e.value.reason


def test_missing_member_and_bad_values_are_field_errors(demo, tmp_path):
    rows = [{"path": str(p), "cls": "seven" if i == 1 else i} for i, p in enumerate(sorted((demo / "folder").rglob("*.jpg"))[:3])]
    (tmp_path / "m.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(ls.FieldError, match="not an integer: 'seven'"):
        list(ls.Loader(ls.FileList(tmp_path / "m.jsonl"), fields={"jpg": ls.Image(32), "cls": ls.Int()}, batch_size=3))
    with pytest.raises(ls.FieldError, match=r"no member 'seg.png' .*sample has: jpg, cls"):
        list(ls.Loader(ls.FileList(tmp_path / "m.jsonl"), fields={"mask": ls.Image(32, keys="seg.png")}, batch_size=3))
    (tmp_path / "j.jsonl").write_text(json.dumps({"path": str(rows[0]["path"]), "json": "{broken"}))
    with pytest.raises(ls.FieldError, match="invalid JSON"):
        list(ls.Loader(ls.FileList(tmp_path / "j.jsonl"), fields={"json": ls.Json()}, batch_size=1))


JSON_DOCS = ['NaN', '[Infinity, -Infinity, 1.5e3, -0.0]', '{"a": NaN, "b": [null, true, false]}', '"\\u00e9"',
             '"\\ud800"', ' {"x": {"y": []}} ', '[1,]', '{"a":1}}', 'nan', '-NaN', '01', '1.', '"a\tb"', "{'a': 1}",
             '-Infinity', 'Infinityy', '[]', '']


def test_a_json_field_accepts_what_pythons_json_module_reads(demo, tmp_path):
    """The reference is json.loads: every document it reads is delivered parsed (NaN and the
    infinities included, which json.dumps writes), every one it refuses is a FieldError."""
    import math

    jpg = str(sorted((demo / "folder").rglob("*.jpg"))[0])
    for doc in JSON_DOCS:
        (tmp_path / "m.jsonl").write_text(json.dumps({"path": jpg, "json": doc}) + "\n")
        loader = ls.Loader(ls.FileList(tmp_path / "m.jsonl"), fields={"json": ls.Json()}, batch_size=1)
        try:
            want = json.loads(doc)
        except ValueError:
            with pytest.raises(ls.FieldError, match="invalid JSON"):
                list(loader)
            continue
        got = next(iter(loader))["json"][0]
        same = json.dumps(got) == json.dumps(want)  # NaN != NaN; their dumps are equal
        assert same or (isinstance(want, float) and math.isnan(want) and math.isnan(got)), (doc, got, want)


def test_corrupt_shard_is_a_read_error_naming_the_shard(demo, tmp_path):
    data = (demo / "shards/train-000001.tar").read_bytes()
    (tmp_path / "cut.tar").write_bytes(data[: len(data) // 2])
    shards = [str(demo / "shards/train-000000.tar"), str(tmp_path / "cut.tar")]
    fields = {"jpg": ls.Image(32), "cls": ls.Int()}
    with pytest.raises(ls.ReadError, match="cut.tar") as e:
        list(ls.Loader(ls.WebDataset(shards), fields=fields, batch_size=10))
    assert "truncated" in e.value.reason
    loader = ls.Loader(ls.WebDataset(shards), fields=fields, batch_size=10, on_error="skip", error_budget=None)
    n = sum(len(b["__key__"]) for b in loader)
    assert 25 < n < 50
    skipped = loader.stats()["skipped"]
    assert [d["kind"] for d in skipped] == ["source"]
    assert skipped[0]["key"].count("cut.tar") == 1  # "shard:key", not the shard named twice


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(batch_size=0), "batch_size must be an int >= 1"),
        (dict(batch_size=4, threads=0), "threads must be an int >= 1"),
        (dict(batch_size=4, on_error="ignore"), "allowed are 'raise', 'skip'"),
        (dict(batch_size=4, error_budget=1.5), r"fraction must be in \[0, 1\)"),
        (dict(batch_size=4, prefetch=0), "prefetch must be an int >= 1"),
        (dict(batch_size=4, fields={}), "non-empty dict"),
        (dict(batch_size=4, fields={"jpg": "image"}), "must be one of Image, VideoClip, Audio, Int, Text, Json, Bytes"),
        (dict(batch_size=4, fields={"jpg": ls.Image(32, scale=(0.5, 0.1))}), "scale must satisfy"),
        (dict(batch_size=4, fields={"jpg": ls.Image(64, crop="center", resize=32)}), "must be >= the output size"),
        (dict(batch_size=4, fields={"__key__": ls.Text()}), "reserved"),
        (dict(batch_size=4, fields={1: ls.Text()}), "names must be non-empty strings"),
        (dict(batch_size=4, shuffle="no"), "shuffle must be True or False"),
        (dict(batch_size=4, seed=2**70), r"seed must be an int in \[0, 18446744073709551615\]"),
        (dict(batch_size=4.0), "batch_size must be an int >= 1"),
    ],
)
def test_bad_arguments_fail_at_construction_listing_what_is_allowed(demo, kwargs, message):
    args = dict(fields={"jpg": ls.Image(32)})
    args.update(kwargs)
    with pytest.raises(ls.ConfigError, match=message):
        ls.Loader(ls.Folder(demo / "folder"), **args)
    with pytest.raises(ValueError):  # ConfigError is a ValueError too
        ls.Loader(ls.Folder(demo / "folder"), **args)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: ls.Image(32, crop="middle"), "random_resized, center, resize"),
        (lambda: ls.Image(32, flip=2), r"flip is a probability in \[0, 1\]"),
        (lambda: ls.Image(32, flip=True), "flip is a probability"),
        (lambda: ls.Image(0), r"size must be an int in \[1, 16384\]"),
        (lambda: ls.Image((1.5, 2)), r"size must be an int in \[1, 16384\]"),
        (lambda: ls.Image(20000), r"size must be an int in \[1, 16384\]"),
        (lambda: ls.VideoClip(32, clips=1001, position="uniform"), r"clips must be an int in \[1, 1000\]"),
        (lambda: ls.VideoClip(32, decoder_threads=65), r"decoder_threads must be an int in \[0, 64\]"),
        (lambda: ls.Image((1, 2, 3)), r"size must be an int or \(height, width\)"),
        (lambda: ls.Image(64, resize=80), "resize applies only to crop='center'"),
        (lambda: ls.Image(64, crop="center", resize=80.5), "resize must be an int"),
        (lambda: ls.Image(32, scale=0.5), r"scale must be a pair \(min, max\)"),
        (lambda: ls.Image(32, channels_last="no"), "channels_last must be True or False"),
        (lambda: ls.Image(32, dct_scaling="no"), "dct_scaling must be True or False"),
        (lambda: ls.Image(32, max_pixels=0), "max_pixels must be an int >= 1"),
    ],
)
def test_bad_field_arguments_fail_where_they_are_written(make, message):
    with pytest.raises(ls.ConfigError, match=message):
        make()


def test_field_bounds_are_the_engines(demo):
    """The Python fields check integer options against the ranges the engine enforces: one
    table (pipeline/fields.h). At each bound the field is made; one past it, both refuse."""
    from loadscope import _native
    from loadscope._fields import BOUNDS

    assert BOUNDS["size"] == (1, 16384) and BOUNDS["decoder_threads"] == (0, 64)
    ls.Image(16384)
    ls.VideoClip(1, clips=1000, position="uniform", decoder_threads=64)
    ls.VideoClip(1, frames=100000)
    native_args = dict(name="x", keys=["jpg"], width=32, crop="random_resized", scale=(0.08, 1.0), ratio=(0.75, 1.33),
                       resize=0, flip=0.0, channels_last=False, exif=True, dct_scaling=True,
                       max_pixels=10**8, optional=False)
    _native.image_field(height=16384, **native_args)
    with pytest.raises(ls.ConfigError, match=r"field 'x': size must be 1\.\.16384"):
        _native.image_field(height=16385, **native_args)


def test_numpy_ints_are_ints(demo):
    import numpy as np

    loader = ls.Loader(ls.Folder(demo / "folder"), fields={"jpg": ls.Image(np.int64(32))}, batch_size=np.int64(8), threads=np.int32(1))
    assert next(iter(loader))["jpg"].shape == (8, 3, 32, 32)


def test_decompression_bomb_fails_before_decoding(demo, tmp_path):
    jpg = bytearray(next((demo / "folder").rglob("*.jpg")).read_bytes())
    sof = jpg.find(b"\xff\xc0")
    jpg[sof + 5 : sof + 9] = (20000).to_bytes(2, "big") * 2  # height, width
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "bomb.jpg").write_bytes(bytes(jpg))
    with pytest.raises(ls.DecodeError, match="image too large: 20000x20000") as e:
        list(ls.Loader(ls.Folder(tmp_path), fields={"jpg": ls.Image(32, crop="center")}, batch_size=1))
    assert e.value.key.endswith("bomb.jpg")


def test_bad_sources(tmp_path):
    with pytest.raises(ls.ConfigError, match="not a directory"):
        ls.Folder(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ls.ConfigError, match="no samples under"):
        ls.Folder(tmp_path / "empty")
    with pytest.raises(ls.ConfigError, match="allowed are 'auto', 'subfolders', 'none'"):
        ls.Folder(tmp_path, labels="dirs")
    with pytest.raises(ls.ConfigError, match=r"shard\(s\) not found: .*a-1.tar"):
        ls.WebDataset(str(tmp_path / "a-{0..1}.tar"))
    (tmp_path / "m.txt").write_text("x")
    with pytest.raises(ls.ConfigError, match=r"must end in .jsonl, .ndjson or .csv"):
        ls.FileList(tmp_path / "m.txt")
    (tmp_path / "m.jsonl").write_text('{"file": "a.jpg"}\n')
    with pytest.raises(ls.ConfigError, match=r"m.jsonl:1: the row has no 'path' field \(found: 'file'\)"):
        ls.FileList(tmp_path / "m.jsonl")
    with pytest.raises(ls.ConfigError, match="source must be a loadscope"):
        ls.Loader(["a.jpg"], fields={"jpg": ls.Image(32)}, batch_size=1)


def test_sample_errors_pickle_with_and_without_a_key():
    """DataLoader workers send exceptions through pickle: key and reason survive, and an error
    made from a message alone (no sample named) keeps its message, not "sample 'None'"."""
    import pickle

    named = pickle.loads(pickle.dumps(ls.DecodeError("a/b.jpg", "bad huffman table")))
    assert (type(named), named.key, named.reason) == (ls.DecodeError, "a/b.jpg", "bad huffman table")
    bare = pickle.loads(pickle.dumps(ls.ReadError("EIO while reading")))
    assert type(bare) is ls.ReadError and bare.key is None and str(bare) == "EIO while reading"
