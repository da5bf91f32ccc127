"""A Loader is a spec plus a run: `loader.spec` is a plain value (equal to itself through pickle,
immutable, checked when made) that defines the epoch's batches, so a Loader made from it in a
fresh process yields the same bytes; every option comes from one declaration (_options)."""

import hashlib
import inspect
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import loadscope as ls
from loadscope import _options
from servers import put_bucket

ROOT = Path(__file__).resolve().parents[2]


def batch_hash(b):
    """One batch, every entry's bytes (tensors) or repr (keys, records), as one hash."""
    h = hashlib.sha256(repr(b["__key__"]).encode())
    for k, v in sorted(b.items()):
        h.update(k.encode() + (v.numpy().tobytes() if hasattr(v, "numpy") else repr(v).encode()))
    return h.hexdigest()


def batch_hashes(loader, epochs=(0, 1)):
    out = []
    for epoch in epochs:
        loader.set_epoch(epoch)
        out += [batch_hash(b) for b in loader]
    return out


# Runs in a fresh interpreter: the spec from a pickle file, two epochs, one hash per batch
# (the functions above, by their source: one definition of what is compared).
CHILD = ("import hashlib, pickle, sys\nimport loadscope as ls\n" + inspect.getsource(batch_hash)
         + inspect.getsource(batch_hashes)) + """
print("\\n".join(batch_hashes(ls.Loader(pickle.load(open(sys.argv[1], "rb"))))))
"""


def in_a_fresh_process(spec, tmp_path, env=None):
    path = tmp_path / "spec.pkl"
    path.write_bytes(pickle.dumps(spec))
    r = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, timeout=600,
                       env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def real_jpegs(real):
    return sorted(p for p in (real / "exif-orientation-examples").glob("*.jpg"))


def test_a_pickled_spec_of_random_crops_and_color_jitter_gives_the_same_batches_in_a_fresh_process(real, tmp_path):
    files = ls.Files([(str(p), i % 3) for i, p in enumerate(real_jpegs(real))])
    image = ls.Image(64, crop="random_resized", flip=0.5, color=ls.ColorJitter(0.4, 0.4, 0.4, 0.1))
    loader = ls.Loader(files, fields={"jpg": image, "cls": ls.Int()}, batch_size=3, shuffle=True, seed=7,
                       threads=2)
    spec = loader.spec
    assert pickle.loads(pickle.dumps(spec)) == spec
    here = batch_hashes(loader)
    assert len(here) == 2 * len(loader) and len(set(here)) == len(here)  # two epochs, reshuffled and redrawn
    assert in_a_fresh_process(spec, tmp_path) == here
    # The same spec with other threads is still the same batches; another seed is not.
    assert batch_hashes(ls.Loader(spec, threads=1)) == here
    assert batch_hashes(ls.Loader(spec.replace(seed=8))) != here


def test_a_pickled_spec_of_video_clips_gives_the_same_clips_in_a_fresh_process(real, tmp_path):
    videos = [real / "vision/test/assets/videos/SOX5yA1l24A.mp4", real / "vision/test/assets/videos/R6llTwEh07w.mp4"]
    files = ls.Files([(str(p), i) for i, p in enumerate(videos)], label="cls")
    spec = ls.Spec(files, fields={"mp4": ls.VideoClip(48, frames=4, stride=3, position="random"), "cls": ls.Int()},
                   batch_size=1, shuffle=True, seed=3)
    here = batch_hashes(ls.Loader(spec))
    assert len(here) == 4
    assert in_a_fresh_process(spec, tmp_path) == here


@pytest.fixture(scope="module")
def s3_shards(s3_server, demo):
    shards = sorted((demo / "shards").glob("*.tar"))
    put_bucket(s3_server, "spec-shards", [(f"train/{p.name}", p) for p in shards])
    return shards


def test_a_pickled_spec_over_s3_with_its_own_remote_settings_reads_the_same_in_a_process_without_them(
        s3_server, s3_shards, tmp_path):
    """The source's Remote names the endpoint and a credentials file; the fresh process's
    environment names no server and no credentials, so the batches can only come through the
    spec's own settings. They are those of the same shards read from disk."""
    import os

    creds = tmp_path / "credentials"
    creds.write_text(f"[spec]\naws_access_key_id = {s3_server['AWS_ACCESS_KEY_ID']}\n"
                     f"aws_secret_access_key = {s3_server['AWS_SECRET_ACCESS_KEY']}\n")
    remote = ls.Remote(endpoint=s3_server["AWS_ENDPOINT_URL"], region=s3_server["AWS_REGION"], profile="spec",
                       credentials_file=creds, attempts=3)
    urls = [f"s3://spec-shards/train/{p.name}" for p in s3_shards]
    fields = {"jpg": ls.Image(40), "cls": ls.Int()}
    spec = ls.Spec(ls.WebDataset(urls, remote=remote), fields=fields, batch_size=16, shuffle=True, seed=2,
                   threads=2)
    assert pickle.loads(pickle.dumps(spec)) == spec
    here = batch_hashes(ls.Loader(spec))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["HOME"] = str(tmp_path)  # no ~/.aws either
    assert in_a_fresh_process(spec, tmp_path, env=env) == here
    # The same shards on disk: the same samples and draws (keys differ by the shard's name).
    local = ls.Loader(spec.replace(source=ls.WebDataset([str(p) for p in s3_shards])))
    strip = [[k.rsplit("/", 1)[-1] for k in b["__key__"]] for b in local]
    remote_keys = [[k.rsplit("/", 1)[-1] for k in b["__key__"]] for b in ls.Loader(spec)]
    assert strip == remote_keys


def test_a_spec_is_a_checked_immutable_value(demo):
    folder = ls.Folder(demo / "folder")
    spec = ls.Spec(folder, fields={"jpg": ls.Image(32)}, batch_size=8, partition="contiguous")
    assert spec == ls.Spec(ls.Folder(demo / "folder"), fields={"jpg": ls.Image(32)}, batch_size=8,
                           partition="contiguous")
    assert spec != spec.replace(batch_size=9) and spec.replace(batch_size=9).batch_size == 9
    assert spec.threads is None and spec.options["partition"] == "contiguous"
    with pytest.raises(AttributeError, match="immutable"):
        spec.batch_size = 4
    with pytest.raises(TypeError, match="batch_sise: not a Loader option; allowed are source, fields, "
                                        "batch_size, threads"):
        ls.Spec(folder, fields={"jpg": ls.Image(32)}, batch_sise=8)
    with pytest.raises(TypeError, match=r"Loader\(\) needs batch_size= \(an int >= 1\)"):
        ls.Loader(folder, fields={"jpg": ls.Image(32)})
    with pytest.raises(TypeError, match="fields="):
        ls.Loader(folder, batch_size=8)
    with pytest.raises(TypeError):  # the fields cannot change under the spec
        spec.fields["cls"] = ls.Int()
    # what users hand over as they have it: an enum's str, numpy ints; "" is not "no cache"
    import enum

    import numpy as np

    class Part(str, enum.Enum):
        C = "contiguous"

    odd = ls.Spec(folder, fields={"jpg": ls.Image(32)}, batch_size=np.int64(8), partition=Part.C,
                  timeout=np.int64(3), cache_dir=None)
    assert odd.partition == "contiguous" and type(odd.partition) is str and odd.timeout == 3.0
    with pytest.raises(ls.ConfigError, match="cache_dir='': "):
        ls.Spec(folder, fields={"jpg": ls.Image(32)}, batch_size=8, cache_dir="")
    with pytest.raises(ls.ConfigError, match="world_size must be an int >= 1"):
        ls.Spec(folder, fields={"jpg": ls.Image(32)}, batch_size=8, rank=0, world_size=0)
    assert {folder: 1}[ls.Folder(demo / "folder")] == 1  # sources hash as they compare
    loader = ls.Loader(spec, threads=1)
    assert loader.spec == spec.replace(threads=1) and loader.threads == 1
    assert repr(loader) == f"Loader({folder!r}, fields={{'jpg': {ls.Image(32)!r}}}, batch_size=8, threads=1, " \
                           "partition='contiguous')"
    # A Loader pickled (to a spawned DataLoader worker) keeps the share this process resolved.
    copy = pickle.loads(pickle.dumps(ls.Loader(spec, rank=1, world_size=2)))
    assert (copy.rank, copy.world_size) == (1, 2)


@pytest.mark.parametrize("name", [o.name for o in _options.OPTIONS if hasattr(o.check, "values")])
def test_a_listed_option_names_every_allowed_value(demo, name):
    with pytest.raises(ls.ConfigError) as e:
        ls.Loader(ls.Folder(demo / "folder"), fields={"jpg": ls.Image(32)}, batch_size=4, **{name: "nonsense"})
    for value in _options.allowed_values(name):
        assert repr(value) in str(e.value)


def test_loaders_signature_and_docstring_are_the_declarations():
    params = inspect.signature(ls.Loader).parameters
    assert list(params) == ["source", "fields"] + [o.name for o in _options.OPTIONS]
    for o in _options.OPTIONS:
        assert f"        {o.name}: " in ls.Loader.__doc__
        if o.default is not _options.REQUIRED:
            assert params[o.name].default == o.default


def test_each_allowed_values_list_is_written_once_in_the_package():
    """partition, on_error, drop_last and max_pixels: grep finds each list (or bound) once."""
    import re

    texts = {p: p.read_text() for p in (ROOT / "python" / "loadscope").rglob("*.py")}
    patterns = {"partition": r"""["']interleave["'],\s*["']contiguous["']""",
                "on_error": r"""["']raise["'],\s*["']skip["']""",
                "drop_last": r"""False,\s*True,\s*["']uneven["']""",
                "max_pixels": r"178956970"}
    for what, pattern in patterns.items():
        where = [str(p.relative_to(ROOT)) for p, t in texts.items() for _ in re.finditer(pattern, t)]
        assert len(where) <= 1, f"{what}'s list is written {len(where)} times: {where}"


class _StallingServer:
    """A real HTTP server (the standard library's) serving one file, whose GETs wait until
    `release` is set: a read that stalls until the test says so."""

    def __init__(self, data: bytes) -> None:
        import http.server
        import threading

        self.release = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _head(self, start, end, status):
                self.send_response(status)
                self.send_header("Content-Length", str(end - start))
                self.send_header("Accept-Ranges", "bytes")
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
                self.end_headers()

            def _range(self):
                r = self.headers.get("Range")
                if not r:
                    return 0, len(data), 200
                lo, _, hi = r.split("=", 1)[1].partition("-")
                return int(lo), min(len(data), int(hi) + 1 if hi else len(data)), 206

            def do_HEAD(self):
                self._head(*self._range())

            def do_GET(self):
                start, end, status = self._range()
                outer.release.wait(120)  # only a hang of the test itself outlasts this
                self._head(start, end, status)
                self.wfile.write(data[start:end])

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/stalled.jpg"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()


def test_timeout_names_the_batch_a_stalled_read_holds_and_the_epoch_goes_on(real):
    """The option added through the declaration alone (docs/development.md's worked example):
    a read that cannot finish (an HTTP server that answers only when the test lets it) makes
    next() raise BatchTimeout naming the batch; once the bytes come, the same iteration
    delivers it."""
    good = real_jpegs(real)[0]
    server = _StallingServer(good.read_bytes())
    try:
        fields = {"jpg": ls.Image(32, crop="center"), "cls": ls.Int()}
        loader = ls.Loader(ls.Files([(str(good), 0), (server.url, 1)]), fields=fields, batch_size=1, threads=1,
                           timeout=0.2)
        assert loader.spec.timeout == 0.2
        it = iter(loader)
        first = next(it)
        with pytest.raises(ls.BatchTimeout, match=r"no batch within timeout=0.2 s: batch 1 of this rank's epoch 0"
                           ) as e:
            next(it)
        assert isinstance(e.value, TimeoutError)
        server.release.set()  # the stalled read gets its bytes
        second = next(it)
        assert second["jpg"].equal(first["jpg"]) and second["cls"].tolist() == [1]
        with pytest.raises(StopIteration):
            next(it)
    finally:
        server.close()
    with pytest.raises(ls.ConfigError, match=r"timeout=-1: seconds >= 0"):
        ls.Loader(ls.Files([(str(good), 0)]), fields=fields, batch_size=1, timeout=-1)


def test_timeout_also_bounds_the_wait_for_a_mapped_batch(real):
    """map= runs in a thread of its own: a map that waits (here until the test lets it) is timed
    out the same way, and its batch delivered after."""
    import threading

    go = threading.Event()

    def slow_on_the_second(batch):
        if batch["cls"].tolist() == [1]:
            go.wait(120)
        return batch

    files = ls.Files([(str(p), i) for i, p in enumerate(real_jpegs(real)[:2])])
    loader = ls.Loader(files, fields={"jpg": ls.Image(32), "cls": ls.Int()}, batch_size=1, timeout=0.2,
                       map=slow_on_the_second)
    it = iter(loader)
    assert next(it)["cls"].tolist() == [0]
    with pytest.raises(ls.BatchTimeout, match="batch 1 of this rank's epoch 0"):
        next(it)
    go.set()
    assert next(it)["cls"].tolist() == [1]
