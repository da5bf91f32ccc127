"""Faults while reading: injected I/O errors, short reads and vanished files (loadscope.io's
test hook, where real faults surface), and real ones — a file deleted mid-epoch, a shard cut
short under an index, a member that no longer exists — for every layout. Under
on_error="skip" the loader continues and names each lost sample; under "raise" it stops with
the sample's key and its threads are gone; nothing hangs (docs/reliability.md)."""

import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest
import torch

import loadscope as ls
from loadscope import _native, shards

from conftest import native_threads


@pytest.fixture(autouse=True)
def no_faults_left():
    yield
    _native._set_read_faults([])


@pytest.fixture(scope="module")
def data(demo, tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    rows = [json.loads(line) for line in (demo / "manifest.jsonl").read_text().splitlines()]
    files = root / "files"
    files.mkdir()
    manifest = root / "list.jsonl"
    with open(manifest, "w") as m:
        for r in rows[:48]:
            dst = files / Path(r["path"]).name
            shutil.copy(demo / r["path"], dst)
            m.write(json.dumps({"path": str(dst), "cls": r["cls"]}) + "\n")
    out = shards.convert(ls.FileList(manifest), str(root / "indexed"), shard_bytes=200_000, quiet=True)
    return {"root": root, "manifest": manifest, "files": sorted(files.iterdir()), "indexed": out["shards"]}


def loader(src, **kw):
    return ls.Loader(src, fields={"jpg": ls.Image(32), "cls": ls.Int()}, batch_size=8, threads=2, **kw)


def drain(L, timeout=60.0):
    """All batches of an epoch, failing the test instead of hanging."""
    out, err = [], []

    def run():
        try:
            out.extend(L)
        except BaseException as e:  # noqa: BLE001 - handed to the test
            err.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "the loader hung"
    if err:
        raise err[0]
    return out


@pytest.mark.parametrize("kind,words", [("eio", "Input/output error"), ("short", "short read"),
                                        ("vanished", "No such file")])
def test_injected_read_faults_are_named_skips_or_errors(data, kind, words):
    victim = data["files"][5].name
    _native._set_read_faults([(victim, kind, -1)])
    L = loader(ls.FileList(data["manifest"]), on_error="skip")
    batches = drain(L)
    assert sum(len(b["cls"]) for b in batches) == 47
    skipped = L.stats()["skipped"]
    assert len(skipped) == 1 and victim in skipped[0]["key"] and words in skipped[0]["reason"]
    assert skipped[0]["kind"] == "read"
    before = native_threads()
    with pytest.raises(ls.ReadError, match=victim) as e:
        drain(loader(ls.FileList(data["manifest"])))
    assert words in e.value.reason
    time.sleep(0.2)
    assert native_threads() <= before  # the failed epoch's threads are gone


def test_faults_in_indexed_shards_name_the_shard_and_key(data):
    shard = os.path.basename(data["indexed"][1])
    L = loader(ls.WebDataset(data["indexed"]), on_error="skip")
    _native._set_read_faults([(shard, "eio", 3)])  # three reads fail, then the disk recovers
    n = sum(len(b["cls"]) for b in drain(L))
    skipped = L.stats()["skipped"]
    assert 1 <= len(skipped) <= 3 and n == 48 - len(skipped)  # a sample with 2 members may fail twice
    assert all(shard + ":" in s["key"] and "Input/output error" in s["reason"] for s in skipped)


def test_a_file_deleted_mid_epoch(data, tmp_path):
    files = tmp_path / "f"
    shutil.copytree(data["files"][0].parent, files)
    manifest = tmp_path / "m.jsonl"
    names = sorted(p.name for p in files.iterdir())
    manifest.write_text("".join(json.dumps({"path": str(files / n), "cls": 0}) + "\n" for n in names))
    L = ls.Loader(ls.FileList(manifest), fields={"jpg": ls.Image(32)}, batch_size=4, threads=1, prefetch=1,
                  on_error="skip")
    it = iter(L)
    first = next(it)  # the epoch runs; later files are not read yet
    (files / names[-1]).unlink()
    rest = drain(it)
    assert len(first["__key__"]) + sum(len(b["__key__"]) for b in rest) == len(names) - 1
    (skip,) = L.stats()["skipped"]
    assert skip["key"].endswith(names[-1]) and "No such file" in skip["reason"]


def test_a_shard_cut_short_under_its_index(data, tmp_path):
    d = tmp_path / "s"
    d.mkdir()
    copies = [shutil.copy(s, d) for s in data["indexed"]] + [shutil.copy(s + ".idx", d) for s in data["indexed"]]
    shard_paths = sorted(str(p) for p in d.glob("*.tar"))
    L = loader(ls.WebDataset(shard_paths), on_error="skip", prefetch=1)
    it = iter(L)
    next(it)
    last = shard_paths[-1]
    with open(last, "r+b") as f:  # members vanish from the shard after the loader read its index
        f.truncate(1024)
    rest = drain(it)
    lost = L.stats()["skipped"]
    assert lost and all(s["key"].startswith(last + ":") and "short read" in s["reason"] for s in lost)
    assert 8 + sum(len(b["cls"]) for b in rest) + len({s["key"] for s in lost}) == 48
    assert copies
    with pytest.raises(ls.ConfigError, match="is stale"):  # the next loader notices up front
        loader(ls.WebDataset(shard_paths))


def test_a_streamed_shard_cut_short_is_a_counted_source_failure(data, tmp_path):
    shard = tmp_path / "cut.tar"
    full = Path(data["indexed"][0]).read_bytes()
    shard.write_bytes(full[: len(full) // 2])
    L = loader(ls.WebDataset([str(shard)], index="off"), on_error="skip")
    n = sum(len(b["cls"]) for b in drain(L))
    st = L.stats()
    assert n > 0 and st["failures"] >= 1
    assert any(str(shard) in s["key"] and "truncated" in s["reason"] for s in st["skipped"])
    with pytest.raises(ls.ReadError, match="truncated"):
        drain(loader(ls.WebDataset([str(shard)], index="off")))


def test_an_unreadable_index_names_the_file(data):
    _native._set_read_faults([(os.path.basename(data["indexed"][0]), "eio", 1)])
    with pytest.raises(ls.ReadError, match="Input/output error") as e:
        loader(ls.WebDataset(data["indexed"]))
    assert e.value.key.endswith(".idx") and data["indexed"][0] in e.value.reason


def test_fault_injection_arguments():
    with pytest.raises(ls.ConfigError, match="allowed are 'eio', 'short', 'vanished'"):
        _native._set_read_faults([("x", "flaky", 1)])


def test_bad_layouts_name_the_sample_and_what_it_has(data, tmp_path):
    import io
    import tarfile

    shard = tmp_path / "nocls.tar"
    jpg = data["files"][0].read_bytes()
    with tarfile.open(shard, "w") as tf:
        for key in ("a", "b"):
            info = tarfile.TarInfo(f"{key}.jpg")
            info.size = len(jpg)
            tf.addfile(info, io.BytesIO(jpg))
    for index in ("off", "scan"):
        with pytest.raises(ls.FieldError, match=r"nocls.tar:a': no member 'cls' .*sample has: jpg"):
            drain(loader(ls.WebDataset([str(shard)], index=index)))
    (tmp_path / "adir.jpg").mkdir()
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({"path": str(tmp_path / "adir.jpg"), "cls": 1}) + "\n")
    with pytest.raises(ls.ReadError, match="adir.jpg': is a directory"):
        drain(loader(ls.FileList(manifest)))


def test_pipes_and_devices_where_files_should_be_fail_instead_of_blocking(data, tmp_path):
    fifo = tmp_path / "pipe.jpg"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer forever
    device = tmp_path / "zero.jpg"
    device.symlink_to("/dev/zero")  # endless zeros: reading "to the end" never ends
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps({"path": p, "cls": 0}) + "\n"
                                for p in (str(data["files"][0]), str(fifo), str(device))))
    L = loader(ls.FileList(manifest), on_error="skip")
    assert sum(len(b["cls"]) for b in drain(L, timeout=30)) == 1
    reasons = {s["key"]: s["reason"] for s in L.stats()["skipped"]}
    assert "not a regular file" in reasons[str(fifo)] and "not a regular file" in reasons[str(device)]
    video = tmp_path / "v.jsonl"
    video.write_text(json.dumps({"path": str(tmp_path / "pipe.mp4")}) + "\n")
    os.mkfifo(tmp_path / "pipe.mp4")
    with pytest.raises(ls.ReadError, match="not a regular file"):
        drain(ls.Loader(ls.FileList(video), fields={"mp4": ls.VideoClip(32, frames=2)}, batch_size=1), timeout=30)


def test_a_huge_file_is_refused_before_it_is_read(data, tmp_path):
    sparse = tmp_path / "huge.jpg"
    with open(sparse, "wb") as f:
        f.truncate(3 << 30)  # 3 GiB of nothing (sparse): reading it whole took 3.3 GB and 12 s
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({"path": str(sparse), "cls": 0}) + "\n")
    with pytest.raises(ls.ReadError, match="over the 1 GiB a sample member may have"):  # checked before reading
        drain(loader(ls.FileList(manifest)), timeout=30)


@pytest.mark.parametrize("kind", ["audio", "video"])
def test_a_read_that_fails_anywhere_in_a_decode_is_a_read_error(real, tmp_path, kind):
    """FFmpeg reads a video file piece by piece (a custom AVIO over positioned reads). Whichever of
    those reads fails -- at open, in the index, at the seek, in the middle of the window -- the
    sample fails as a ReadError naming the file with the read's reason: never zeros, a short
    .length or a DecodeError. With every read good, the batch is the one without faults."""
    victim = tmp_path / "victim.mp4"
    shutil.copy(real / "vision/test/assets/videos/R6llTwEh07w.mp4", victim)  # AAC soundtrack
    (tmp_path / "m.jsonl").write_text(json.dumps({"path": str(victim)}) + "\n")
    field = (ls.Audio(sample_rate=16000, seconds=2.0, position="center") if kind == "audio"
             else ls.VideoClip(32, frames=4, stride=2, position="center"))

    def first():
        return next(iter(ls.Loader(ls.FileList(tmp_path / "m.jsonl"), fields={"mp4": field}, batch_size=1, threads=1)))

    clean = first()
    failed = 0
    for after in range(1000):  # the first `after` reads of the file succeed, every later one fails
        _native._set_read_faults([("victim.mp4", "eio", -1, after)])
        try:
            b = first()
        except ls.ReadError as e:
            assert "victim.mp4" in str(e) and "Input/output error (injected)" in str(e), str(e)
            failed += 1
            continue
        for name, value in clean.items():
            assert torch.equal(b[name], value) if isinstance(value, torch.Tensor) else b[name] == value, name
        break
    else:
        pytest.fail("the file never decoded")
    assert failed == after > 3  # every read can fail, and a window takes several
