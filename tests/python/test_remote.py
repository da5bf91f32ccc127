"""Reading from object storage against real servers started by the tests: S3 (Ceph's radosgw,
which checks every signature) and HTTP(S) (nginx, with Range, 503 throttling and a CA made
here). Files are put there with the curl CLI, not with loadscope's own client, and every
remote read is compared with the same files read locally."""

import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import loadscope as ls
from loadscope import _native, shards
from servers import curl_s3, put_bucket

SECRET_ENV = "AWS_SECRET_ACCESS_KEY"


def digest(source, fields=None, **kw):
    """What a loader yields, reduced to one hash, with keys relative to their shard (the shard's
    own name differs between local and remote)."""
    fields = fields or {"jpg": ls.Image(48), "cls": ls.Int()}
    h = hashlib.sha256()
    n = 0
    for b in ls.Loader(source, fields=fields, batch_size=kw.pop("batch_size", 8), threads=2, seed=5, **kw):
        keys = [k.rsplit("/", 1)[-1].split(":")[-1] for k in b["__key__"]]
        h.update(repr(keys).encode())
        for name in fields:
            v = b[name]
            h.update(v.numpy().tobytes() if hasattr(v, "numpy") else repr(v).encode())
        n += len(keys)
    return h.hexdigest(), n


@pytest.fixture(scope="module")
def s3_demo(s3_server, demo):
    """The demo shards, uploaded once per module to s3://demo-shards/."""
    shards = sorted((demo / "shards").glob("*.tar"))
    put_bucket(s3_server, "demo-shards", [(f"train/{p.name}", p) for p in shards])
    return shards


def test_s3_shards_read_exactly_like_the_same_shards_on_disk(s3, s3_demo):
    urls = [f"s3://demo-shards/train/{p.name}" for p in s3_demo]
    local = [str(p) for p in s3_demo]
    for index in ("off", "scan"):
        for shuffle in (False, True):
            want = digest(ls.WebDataset(local, index=index), shuffle=shuffle)
            _native.reset_network_stats()
            assert digest(ls.WebDataset(urls, index=index), shuffle=shuffle) == want, (index, shuffle)
            assert _native.network_stats()["requests"] > 0
    # Indexes written to S3 by the CLI, then read ranges of exactly the members needed.
    rc = subprocess.run([os.sys.executable, "-m", "loadscope", "index", "s3://demo-shards/train/"],
                        capture_output=True, text=True, timeout=300)
    assert rc.returncode == 0, rc.stderr
    assert rc.stdout.count("indexed") == len(urls)
    for shuffle, most in ((False, 1.1), (True, 2.0)):
        _native.reset_network_stats()
        assert digest(ls.WebDataset(urls), shuffle=shuffle) == digest(ls.WebDataset(local, index="scan"), shuffle=shuffle)
        stats = _native.network_stats()
        shard_bytes = sum(p.stat().st_size for p in s3_demo)
        # Ranged reads of the members, a few neighbours' bytes between them, and the indexes:
        # in shard order about the shards once, shuffled at most twice (io/prefetch.h).
        assert 0 < stats["bytes"] <= most * shard_bytes, (shuffle, stats["bytes"], shard_bytes)


def test_s3_ranks_split_evenly_and_resume_exactly(s3, s3_demo):
    urls = [f"s3://demo-shards/train/{p.name}" for p in s3_demo]
    total = 0
    for world in (2, 3):
        counts = []
        for rank in range(world):
            L = ls.Loader(ls.WebDataset(urls), fields={"cls": ls.Int()}, batch_size=4, rank=rank, world_size=world,
                          shuffle=True, seed=1)
            counts.append(sum(1 for _ in L))
        assert len(set(counts)) == 1, (world, counts)
        total = counts[0]
    assert total > 0
    fields = {"jpg": ls.Image(32), "cls": ls.Int()}
    full = [b["jpg"].numpy().tobytes() for b in ls.Loader(ls.WebDataset(urls), fields=fields, batch_size=4, seed=2)]
    first = ls.Loader(ls.WebDataset(urls), fields=fields, batch_size=4, seed=2)
    it = iter(first)
    for _ in range(5):
        next(it)
    state = first.state_dict()
    it.close()
    resumed = ls.Loader(ls.WebDataset(urls), fields=fields, batch_size=4, seed=2)
    resumed.load_state_dict(state)
    assert [b["jpg"].numpy().tobytes() for b in resumed] == full[5:]


def test_wrong_credentials_a_missing_bucket_and_key_fail_early_without_the_secret(s3, s3_demo, monkeypatch):
    url = f"s3://demo-shards/train/{s3_demo[0].name}"
    monkeypatch.setenv(SECRET_ENV, "not-the-secret-XYZZY")
    with pytest.raises(ls.ConfigError) as e:
        ls.WebDataset(url)
    msg = str(e.value)
    assert "403" in msg and "SignatureDoesNotMatch" in msg, msg
    assert "environment (AWS_ACCESS_KEY_ID ...e-test)" in msg  # the key id masked, the secret absent
    assert "XYZZY" not in msg
    monkeypatch.setenv(SECRET_ENV, s3[SECRET_ENV])
    with pytest.raises(ls.ConfigError, match="NoSuchBucket"):
        ls.WebDataset("s3://no-such-bucket/a.tar")
    with pytest.raises(ls.ConfigError, match="not found: s3://demo-shards/train/nope.tar"):
        ls.WebDataset("s3://demo-shards/train/nope.tar")
    with pytest.raises(ls.ConfigError, match="credentials in a URL are refused"):
        ls.WebDataset("https://user:pw@example.com/a.tar")
    with pytest.raises(ls.ConfigError, match="allowed are http://, https://, s3:// and local paths"):
        ls.WebDataset("gs://bucket/a.tar")
    with pytest.raises(ls.ConfigError, match="query string") as e:
        ls.WebDataset("https://h.example/a.tar?X-Amz-Signature=abcdef0123")
    assert "abcdef0123" not in str(e.value)


def test_a_shard_rewritten_during_an_epoch_is_reported_not_mixed(s3, demo, tmp_path):
    shards = sorted((demo / "shards").glob("*.tar"))[:2]
    put_bucket(s3, "changing", [(p.name, p) for p in shards])
    urls = [f"s3://changing/{p.name}" for p in shards]
    L = ls.Loader(ls.WebDataset(urls, index="scan"), fields={"jpg": ls.Bytes()}, batch_size=4, threads=1, prefetch=1)
    it = iter(L)
    next(it)
    # Same size, other bytes: only the ETag tells.
    other = tmp_path / "other.tar"
    data = bytearray(shards[1].read_bytes())
    data[-1024] ^= 0xFF
    other.write_bytes(bytes(data))
    put_bucket(s3, "changing", [(shards[1].name, other)])
    with pytest.raises(ls.ReadError, match="changed while it was being read"):
        for _ in it:
            pass


@pytest.fixture(scope="module")
def http_demo(http_server, http_root, demo):
    """The demo shards (with local indexes) and manifest files served over HTTP."""
    dst = http_root / "demo"
    if not dst.exists():
        shutil.copytree(demo, dst)
        for p in sorted((dst / "shards").glob("*.tar")):
            shards.index([str(p)])
    return dst


def test_http_and_https_shards_match_local_and_tls_is_verified(http_server, http_demo, monkeypatch):
    local = sorted(str(p) for p in (http_demo / "shards").glob("*.tar"))
    want = digest(ls.WebDataset(local), shuffle=True)
    base = http_server["LOADSCOPE_HTTP_URL"]
    urls = [f"{base}/demo/shards/{os.path.basename(p)}" for p in local]
    assert digest(ls.WebDataset(urls), shuffle=True) == want
    assert digest(ls.WebDataset(urls, index="off"), shuffle=True) == want
    tls = [u.replace(base, http_server["LOADSCOPE_HTTPS_URL"]) for u in urls]
    monkeypatch.delenv("LOADSCOPE_CA_BUNDLE", raising=False)
    _native.remote_configure_ca("")
    with pytest.raises(ls.ConfigError, match="certificate"):
        ls.WebDataset(tls)
    _native.remote_configure_ca(http_server["LOADSCOPE_HTTP_CA"])
    try:
        assert digest(ls.WebDataset(tls), shuffle=True) == want
    finally:
        _native.remote_configure_ca("")


def test_without_the_debian_ca_bundle_ssl_cert_file_is_trusted(http_server, http_demo):
    """A carried libcurl looks for Debian's CA bundle; on another distribution that file is not
    there (hidden here in a mount namespace) and SSL_CERT_FILE names the bundle instead."""
    default = "/etc/ssl/certs/ca-certificates.crt"
    if os.geteuid() != 0 or not os.path.exists(default) or shutil.which("unshare") is None:
        pytest.skip("needs root, unshare and Debian's CA bundle")
    url = f"{http_server['LOADSCOPE_HTTPS_URL']}/demo/shards/{sorted(os.listdir(http_demo / 'shards'))[0]}"
    code = (f"import loadscope as ls; print(sum(len(b['cls']) for b in ls.Loader(ls.WebDataset([{url!r}]), "
            "fields={'cls': ls.Int()}, batch_size=5)))")
    env = {k: v for k, v in os.environ.items() if k not in ("LOADSCOPE_CA_BUNDLE", "CURL_CA_BUNDLE", "AWS_CA_BUNDLE")}

    def run(**extra):
        return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                               f'mount --bind /dev/null {default} && exec "$0" -c "$1"', sys.executable, code],
                              capture_output=True, text=True, timeout=120, env={**env, **extra})

    trusted = run(SSL_CERT_FILE=http_server["LOADSCOPE_HTTP_CA"])
    assert trusted.returncode == 0, trusted.stderr[-2000:]
    assert int(trusted.stdout) > 0
    untrusted = run()  # the test CA is in no bundle on this machine: verification must fail
    assert untrusted.returncode != 0 and "certificate" in untrusted.stderr


def test_a_remote_manifest_naming_remote_files_matches_the_local_one(http_server, http_demo):
    local = ls.FileList(http_demo / "manifest.jsonl")
    remote = ls.FileList(f"{http_server['LOADSCOPE_HTTP_URL']}/demo/manifest.jsonl")
    assert len(remote) == len(local)
    fields = {"jpg": ls.Image(40)}
    assert digest(remote, fields=fields) == digest(local, fields=fields)


def test_an_experiment_reads_its_arms_from_http_checked_against_local(http_server, http_demo, tmp_path):
    """The A/B harness's storage factor on an HTTP prefix: the remote and cached arms read the
    same samples with the same pixels as the local files (the runner's identical check), the
    cached arm fetches nothing while measured; files missing at the prefix are named before
    anything runs (an HTTP server cannot be uploaded to)."""
    from loadscope import bench

    base = http_server["LOADSCOPE_HTTP_URL"]
    raw = {"name": "http-storage", "dataset": {"path": str(http_demo), "generate": False, "url": f"{base}/demo"},
           "pipeline": {"batch_size": 16, "layout": "files"},
           "factor": {"name": "storage", "values": ["local", "remote", "remote-cache"]},
           "run": {"repetitions": 1, "samples": 32, "warmup_samples": 16, "check_samples": 16, "trace_batches": 0,
                   "warmup_round": False}}
    summary = bench.run(bench.from_dict(raw), str(tmp_path / "out"), quiet=True)
    assert summary["status"] == "ok"
    for arm, check in summary["correctness"]["arms"].items():
        assert check["ok"], f"{arm}: {check['detail']}"
    storage = summary["storage"]
    assert storage["storage=local"]["network_bytes_run"] == 0
    assert storage["storage=remote"]["network_bytes"] > 0
    assert storage["storage=remote-cache"]["network_bytes"] == 0 < storage["storage=remote-cache"]["network_bytes_run"]
    raw["dataset"]["url"] = f"{base}/nothing-here"
    with pytest.raises(ls.ConfigError, match=r"nothing-here/\S+ is missing \(an http\(s\):// prefix cannot"):
        bench.run(bench.from_dict(raw), str(tmp_path / "out2"), quiet=True)


def test_configured_retries_outlast_the_reload_every_loader_makes(demo, monkeypatch):
    """remote_configure's attempts and stall survive the environment reload each Loader makes
    (they were reset to the default 8, which made the throttling test below flaky); a variable
    the environment sets explicitly still wins."""
    monkeypatch.delenv("LOADSCOPE_REMOTE_ATTEMPTS", raising=False)
    monkeypatch.delenv("LOADSCOPE_REMOTE_STALL", raising=False)
    _native.remote_configure(max_attempts=30, backoff_base=0.05, backoff_cap=0.5, stall_seconds=7, connect_timeout=10)
    try:
        ls.Loader(ls.Folder(demo / "folder"), fields={"cls": ls.Int()}, batch_size=8)
        env = _native.remote_environment()
        assert (env["max_attempts"], env["stall_seconds"]) == (30, 7)
        monkeypatch.setenv("LOADSCOPE_REMOTE_ATTEMPTS", "5")
        ls.Loader(ls.Folder(demo / "folder"), fields={"cls": ls.Int()}, batch_size=8)
        env = _native.remote_environment()
        assert (env["max_attempts"], env["stall_seconds"]) == (5, 7)
        monkeypatch.delenv("LOADSCOPE_REMOTE_ATTEMPTS")  # the environment's 5 does not linger
        ls.Loader(ls.Folder(demo / "folder"), fields={"cls": ls.Int()}, batch_size=8)
        env = _native.remote_environment()
        assert (env["max_attempts"], env["stall_seconds"]) == (30, 7)
    finally:
        monkeypatch.delenv("LOADSCOPE_REMOTE_ATTEMPTS", raising=False)
        _native.remote_configure(max_attempts=8, backoff_base=0.1, backoff_cap=5.0, stall_seconds=30, connect_timeout=10)


def test_503s_from_a_throttling_server_are_retried_and_lose_nothing(http_server, http_demo, monkeypatch):
    local = sorted(str(p) for p in (http_demo / "shards").glob("*.tar"))
    base = http_server["LOADSCOPE_HTTP_URL"] + "/throttled"
    urls = [f"{base}/demo/shards/{os.path.basename(p)}" for p in local]
    want = digest(ls.WebDataset(local), batch_size=2)
    # Small spans and many connections: far more than 20 requests a second.
    monkeypatch.setenv("LOADSCOPE_REMOTE_CONNECTIONS", "16")
    _native.reset_network_stats()
    _native.remote_configure(max_attempts=30, backoff_base=0.05, backoff_cap=0.5, stall_seconds=30, connect_timeout=10)
    try:
        got = digest(ls.WebDataset(urls), batch_size=2)
    finally:
        _native.remote_configure(max_attempts=8, backoff_base=0.1, backoff_cap=5.0, stall_seconds=30, connect_timeout=10)
    assert got == want
    assert _native.network_stats()["retries_server"] > 0


def test_1000_samples_under_10_percent_injected_503s_lose_and_repeat_nothing(http_server, http_root, demo):
    """One request in ten answered 503 by nginx (/flaky/), over an epoch of 1000 samples read
    as one file each (a manifest: a request per sample) and as indexed shards by two ranks
    (spans of each rank's own members): every sample arrives exactly once, with the pixels of
    the same files read from disk, and the retries are counted."""
    import json
    import tarfile

    root = http_root / "flaky-1000"
    jpegs = sorted((demo / "folder").rglob("*.jpg"))
    if not root.exists():
        (root / "files").mkdir(parents=True)
        (root / "shards").mkdir()
        with open(root / "manifest.jsonl", "w") as m:
            for i in range(1000):
                name = f"files/{i:06d}.jpg"
                shutil.copyfile(jpegs[i % len(jpegs)], root / name)
                m.write(json.dumps({"path": name, "cls": i % 7}) + "\n")
        for s in range(10):
            with tarfile.open(root / "shards" / f"part-{s:02d}.tar", "w") as t:
                for i in range(s * 100, s * 100 + 100):
                    t.add(root / "files" / f"{i:06d}.jpg", arcname=f"{i:06d}.jpg")
                    info = tarfile.TarInfo(f"{i:06d}.cls")
                    data = str(i % 7).encode()
                    info.size = len(data)
                    t.addfile(info, io.BytesIO(data))
            shards.index([str(root / "shards" / f"part-{s:02d}.tar")])
    base = http_server["LOADSCOPE_HTTP_URL"] + "/flaky/flaky-1000"
    local_shards = [str(root / "shards" / f"part-{s:02d}.tar") for s in range(10)]
    remote_shards = [f"{base}/shards/part-{s:02d}.tar" for s in range(10)]
    _native.remote_configure(max_attempts=12, backoff_base=0.01, backoff_cap=0.2, stall_seconds=30, connect_timeout=10)
    try:
        _native.reset_network_stats()
        want, n = digest(ls.FileList(root / "manifest.jsonl"))
        assert n == 1000
        assert digest(ls.FileList(f"{base}/manifest.jsonl")) == (want, 1000)
        files = _native.network_stats()
        assert files["failures"] == 0 and files["retries_server"] >= 30, files  # ~10% of > 1000 requests
        keys = []
        for rank in (0, 1):
            for b in ls.Loader(ls.WebDataset(remote_shards), fields={"jpg": ls.Image(48), "cls": ls.Int()},
                               batch_size=8, threads=2, seed=5, rank=rank, world_size=2):
                keys += [k.split(":")[-1] for k in b["__key__"]]
            assert len(keys) == len(set(keys)) == 500 * (rank + 1)
            want_rank = digest(ls.WebDataset(local_shards), rank=rank, world_size=2)
            assert digest(ls.WebDataset(remote_shards), rank=rank, world_size=2) == want_rank
        assert sorted(keys) == [f"{i:06d}" for i in range(1000)]
        after = _native.network_stats()
        assert after["failures"] == 0 and after["retries_server"] > files["retries_server"]
    finally:
        _native.remote_configure(max_attempts=8, backoff_base=0.1, backoff_cap=5.0, stall_seconds=30, connect_timeout=10)


class CuttingProxy:
    """A TCP proxy in front of the HTTP server that cuts every `every`-th response after
    `after` bytes (the connection closes mid-body), or refuses connections while `down`."""

    def __init__(self, port: int, after: int = 3000, every: int = 2):
        self.target = port
        self.after, self.every = after, every
        self.count = 0
        self.down = False
        self.live = []  # open sockets, closed by go_down()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def go_down(self):
        """Refuses new connections and closes the open ones (kept-alive connections included)."""
        self.down = True
        for sock in list(self.live):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _accept(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            if self.down:
                c.close()
                continue
            self.count += 1
            threading.Thread(target=self._serve, args=(c, self.count % self.every == 0), daemon=True).start()

    def _serve(self, client, cut):
        upstream = socket.create_connection(("127.0.0.1", self.target))
        self.live += [client, upstream]
        def pump(src, dst, limit):
            sent = 0
            try:
                while True:
                    data = src.recv(65536)
                    if not data:
                        break
                    if limit is not None and sent + len(data) > limit:
                        dst.sendall(data[: max(0, limit - sent)])
                        break
                    dst.sendall(data)
                    sent += len(data)
            except OSError:
                pass
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        threading.Thread(target=pump, args=(client, upstream, None), daemon=True).start()
        pump(upstream, client, self.after if cut else None)
        client.close()
        upstream.close()


def test_cut_responses_and_an_outage_are_resumed_without_losing_or_repeating(http_server, http_demo):
    local = sorted(str(p) for p in (http_demo / "shards").glob("*.tar"))
    port = int(http_server["LOADSCOPE_HTTP_URL"].rsplit(":", 1)[1])
    proxy = CuttingProxy(port, after=50000, every=1)  # every connection cut after 50 kB
    urls = [f"http://127.0.0.1:{proxy.port}/demo/shards/{os.path.basename(p)}" for p in local]
    for index in ("auto", "off"):
        want = digest(ls.WebDataset(local, index=index))
        _native.reset_network_stats()
        assert digest(ls.WebDataset(urls, index=index)) == want, index
        stats = _native.network_stats()
        assert stats["resumed"] > 0 and stats["retries_network"] > 0, stats
    # An outage in the middle of an epoch: connections refused for a second, then back.
    proxy.every = 10**9
    fields = {"jpg": ls.Image(48), "cls": ls.Int()}
    want = [b["jpg"].numpy().tobytes() for b in ls.Loader(ls.WebDataset(local), fields=fields, batch_size=4, threads=1)]
    L = ls.Loader(ls.WebDataset(urls), fields=fields, batch_size=4, threads=1, prefetch=1)
    got = []
    before = _native.network_stats()["retries_network"]
    for i, b in enumerate(L):
        got.append(b["jpg"].numpy().tobytes())
        if i == 2:
            proxy.go_down()
            threading.Timer(1.0, lambda: setattr(proxy, "down", False)).start()
    assert got == want
    assert _native.network_stats()["retries_network"] > before  # the outage was met, and outlived
    # A loader left while its server is down stops without waiting out the retries.
    L = ls.Loader(ls.WebDataset(urls), fields=fields, batch_size=4, threads=1, prefetch=2)
    it = iter(L)
    next(it)
    proxy.go_down()
    it.close()
    del it, L
    proxy.down = False


def test_a_batch_larger_than_the_in_flight_budget_still_loads(http_server, http_demo, monkeypatch):
    local = sorted(str(p) for p in (http_demo / "shards").glob("*.tar"))
    urls = [f"{http_server['LOADSCOPE_HTTP_URL']}/demo/shards/{os.path.basename(p)}" for p in local]
    monkeypatch.setenv("LOADSCOPE_REMOTE_INFLIGHT", "100000")  # 100 kB: a batch of 32 is ~10x that
    # One rank reads 4 MiB blocks ahead; two ranks read spans of their own members only.
    for shuffle, world in ((False, 1), (True, 1), (True, 2)):
        kw = dict(batch_size=32, shuffle=shuffle, rank=world - 1, world_size=world)
        assert digest(ls.WebDataset(urls), **kw) == digest(ls.WebDataset(local), **kw), (shuffle, world)


def test_a_remote_gzip_shard_of_several_members_reads_whole(http_server, http_root, demo):
    import gzip

    data = (demo / "shards/train-000000.tar").read_bytes()
    cut = len(data) // 3 // 512 * 512
    (http_root / "m.tar.gz").write_bytes(gzip.compress(data[:cut]) + gzip.compress(data[cut:]) + b"\0" * 512)
    url = f"{http_server['LOADSCOPE_HTTP_URL']}/m.tar.gz"
    want = digest(ls.WebDataset(str(demo / "shards/train-000000.tar"), index="off"))
    assert digest(ls.WebDataset(url, index="off")) == want


def test_dataloader_workers_forked_after_the_parent_read_remote_data(http_server, http_demo):
    import torch

    local = sorted(str(p) for p in (http_demo / "shards").glob("*.tar"))
    urls = [f"{http_server['LOADSCOPE_HTTP_URL']}/demo/shards/{os.path.basename(p)}" for p in local]
    args = dict(fields={"jpg": ls.Image(32), "cls": ls.Int()}, batch_size=8, threads=1)
    ds = ls.Dataset(ls.WebDataset(urls), **args)
    first = [b["cls"].tolist() for b in torch.utils.data.DataLoader(ds, batch_size=None)]  # parent: fetch pool, connections
    ctx = torch.multiprocessing.get_context("fork")
    forked = [b["cls"].tolist() for b in torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
                                                                      multiprocessing_context=ctx)]
    assert forked == first and first


def test_a_remote_video_is_read_by_ranges_and_matches_the_local_file(http_server, http_root, demo_videos, real):
    dst = http_root / "videos"
    dst.mkdir(exist_ok=True)
    # A demo video and a real one (torchcodec's NASA clip, 13 s of H.264).
    for src in (sorted((demo_videos / "videos").rglob("*.mp4"))[0], real / "torchcodec/test/resources/nasa_13013.mp4"):
        shutil.copy(src, dst / src.name)
        url = f"{http_server['LOADSCOPE_HTTP_URL']}/videos/{src.name}"
        manifests = []
        for name, path in (("local", dst / src.name), ("remote", url)):
            manifests.append(http_root / f"{src.stem}.{name}.jsonl")
            manifests[-1].write_text(f'{{"path": "{path}"}}\n')
        fields = {"mp4": ls.VideoClip(frames=4, size=32)}
        a = [b["mp4"].numpy().tobytes() for b in ls.Loader(ls.FileList(manifests[0]), fields=fields, batch_size=1)]
        _native.reset_network_stats()
        b = [b["mp4"].numpy().tobytes() for b in ls.Loader(ls.FileList(manifests[1]), fields=fields, batch_size=1)]
        assert a == b and a, src.name
        stats = _native.network_stats()
        assert stats["requests"] >= 2 and stats["bytes"] > 0  # a HEAD, then ranges


def test_a_clip_of_a_remote_mp4_fetches_its_gops_not_the_file(http_server, http_root, video_720p):
    """Issue 14 over a network: the MP4 is indexed from its header; the clip (5.5 s to 6.5 s of
    10) fetches the blocks of the GOPs it decodes. nginx's access log counts the bytes."""
    dst = http_root / "video720"
    dst.mkdir(exist_ok=True)
    shutil.copy(video_720p, dst / "v.mp4")
    manifests = {}
    for name, path in (("local", dst / "v.mp4"), ("remote", f"{http_server['LOADSCOPE_HTTP_URL']}/video720/v.mp4")):
        manifests[name] = http_root / f"video720.{name}.jsonl"
        manifests[name].write_text(json.dumps({"path": str(path), "t": 5.5}) + "\n")
    fields = {"mp4": ls.VideoClip(32, frames=16, stride=2, start="t")}
    log = Path(http_server["dir"]) / "access.log"
    before = log.read_text().count("\n")
    local = next(iter(ls.Loader(ls.FileList(manifests["local"]), fields=fields, batch_size=1)))
    _native.reset_network_stats()
    L = ls.Loader(ls.FileList(manifests["remote"]), fields=fields, batch_size=1)
    remote = next(iter(L))
    assert local["mp4"].equal(remote["mp4"]) and local["mp4.time"].equal(remote["mp4.time"])
    # combined format: ... "GET /video720/v.mp4 HTTP/1.1" 206 <body bytes> ...
    sent = sum(int(line.split('"')[2].split()[1]) for line in log.read_text().splitlines()[before:]
               if "/video720/v.mp4" in line)
    size = video_720p.stat().st_size
    assert 0 < sent < size / 2, (sent, size)  # two GOPs of five, fetched in 1 MiB blocks, and the header
    assert _native.network_stats()["bytes"] == sent == L.telemetry().to_dict()["video"]["bytes"]


def test_the_secret_appears_in_no_output(s3, s3_demo, tmp_path, capsys):
    urls = [f"s3://demo-shards/train/{p.name}" for p in s3_demo]
    L = ls.Loader(ls.WebDataset(urls), fields={"jpg": ls.Image(32), "cls": ls.Int()}, batch_size=8)
    L.start_trace(tmp_path / "trace.json")
    for _ in L:
        pass
    trace = L.stop_trace()
    outputs = [repr(L), repr(L.state_dict()), str(L.telemetry().summary()), L.telemetry().to_prometheus(),
               Path(trace).read_text(), repr(_native.remote_environment()), repr(_native.network_stats())]
    from loadscope.bench import env as bench_env
    outputs.append(repr(bench_env.record(None, [])))
    summary = L.telemetry().summary()
    assert "network:" in summary and "requests" in summary  # the network stage is reported
    try:
        ls.WebDataset("s3://demo-shards/train/missing-one.tar")
    except ls.ConfigError as e:
        outputs.append(str(e))
    captured = capsys.readouterr()
    outputs += [captured.out, captured.err]
    secret = s3[SECRET_ENV]
    for text in outputs:
        assert secret not in text


def test_stage_copies_an_s3_prefix_verified_and_restartable(s3, s3_demo, tmp_path):
    dst = tmp_path / "nvme"
    cmd = [os.sys.executable, "-m", "loadscope", "stage", "s3://demo-shards/train/", str(dst)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    for p in s3_demo:
        assert (dst / p.name).read_bytes() == p.read_bytes()
    objects = len(_native.remote_list("s3://demo-shards/train/"))  # the shards, and indexes if written
    assert f"{objects} copied" in r.stdout
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "0 copied" in again.stdout and f"{objects} already staged" in again.stdout
    # The staged copy reads like the bucket.
    urls = [f"s3://demo-shards/train/{p.name}" for p in s3_demo]
    assert digest(ls.WebDataset(sorted(str(p) for p in dst.glob("*.tar")), index="off")) == \
        digest(ls.WebDataset(urls, index="off"))
    bad = subprocess.run([os.sys.executable, "-m", "loadscope", "stage", "s3://demo-shards/nothing-here/", str(dst)],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1 and "no objects under s3://demo-shards/nothing-here/" in bad.stderr


def test_a_node_local_cache_serves_later_epochs_and_other_processes(s3, s3_demo, tmp_path):
    urls = [f"s3://demo-shards/train/{p.name}" for p in s3_demo]
    cache = tmp_path / "cache"
    want = digest(ls.WebDataset([str(p) for p in s3_demo], index="scan"), shuffle=True)
    _native.reset_network_stats()
    assert digest(ls.WebDataset(urls, index="scan"), shuffle=True, cache_dir=cache) == want
    first = _native.network_stats()
    # Every shard once (and its .idx, where the index test has written one).
    assert len(urls) <= first["cache_misses"] <= 2 * len(urls)
    assert first["cache_bytes_fetched"] >= sum(p.stat().st_size for p in s3_demo)
    L = ls.Loader(ls.WebDataset(urls, index="scan"), fields={"jpg": ls.Image(48)}, batch_size=8, cache_dir=cache)
    _native.reset_network_stats()
    for _ in L:
        pass
    assert _native.network_stats()["bytes"] == 0  # a warm epoch reads nothing from the network
    # Another process on the node: metadata only (HEADs, 16 KiB fingerprints), no shard again.
    code = ("import loadscope as ls, sys; from loadscope import _native as n; "
            f"L = ls.Loader(ls.WebDataset({urls!r}, index='scan'), fields={{'cls': ls.Int()}}, batch_size=8, "
            f"cache_dir={str(cache)!r}); sum(1 for _ in L); s = n.network_stats(); "
            "print(s['cache_misses'], s['bytes'])")
    r = subprocess.run([os.sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    misses, fetched = map(int, r.stdout.split())
    assert misses == 0 and fetched <= 32 * 1024 * len(urls)


def test_a_cache_too_small_for_one_pass_is_an_error_not_a_thrash(s3, s3_demo, tmp_path):
    urls = [f"s3://demo-shards/train/{p.name}" for p in s3_demo]
    largest = max(p.stat().st_size for p in s3_demo)
    with pytest.raises(ls.ReadError, match="more than cache_limit"):
        digest(ls.WebDataset(urls, index="off"), cache_dir=tmp_path / "tiny", cache_limit=largest // 2)
    L = ls.Loader(ls.WebDataset(urls, index="off"), fields={"cls": ls.Int()}, batch_size=8,
                  cache_dir=tmp_path / "small", cache_limit=2 * largest)
    assert sum(1 for _ in L) > 0  # one pass fits: shards are evicted as the pass moves on
    with pytest.raises(ls.ReadError, match="below what one pass over the data needs"):
        sum(1 for _ in L)  # the second pass would fetch everything again
    with pytest.raises(ls.ConfigError, match="cache_limit needs a cache_dir"):
        ls.Loader(ls.WebDataset(urls), fields={"cls": ls.Int()}, batch_size=8, cache_limit="1GB")


def test_a_file_larger_than_a_part_goes_up_in_parts_and_reads_back_whole(s3, tmp_path, monkeypatch):
    """put_file (convert's and the harness's uploads) sends a file larger than
    LOADSCOPE_REMOTE_PART_SIZE as an S3 multipart upload: radosgw gives the object a multipart
    ETag ("<md5 of the parts' md5s>-<parts>", computed here too) and the curl CLI downloads the
    same bytes."""
    put_bucket(s3, "parts")
    part = 5 << 20
    data = os.urandom(3 * part + 12345)
    src = tmp_path / "big.bin"
    src.write_bytes(data)
    monkeypatch.setenv("LOADSCOPE_REMOTE_PART_SIZE", str(part))
    _native.remote_reload_environment()
    try:
        _native.remote_put_file("s3://parts/big.bin", str(src))
        size, etag = _native.remote_stat("s3://parts/big.bin")
        md5s = b"".join(hashlib.md5(data[i:i + part]).digest() for i in range(0, len(data), part))
        assert size == len(data) and etag.strip('"') == hashlib.md5(md5s).hexdigest() + "-4"
        got = tmp_path / "got.bin"
        assert curl_s3(s3, "-o", str(got), f"{s3['AWS_ENDPOINT_URL']}/parts/big.bin") == "200"
        assert got.read_bytes() == data
        with pytest.raises(ls.ReadError, match="NoSuchBucket"):  # the first request (initiate) fails
            _native.remote_put_file("s3://no-such-bucket-here/big.bin", str(src))
        monkeypatch.setenv("LOADSCOPE_REMOTE_PART_SIZE", str(part - 1))
        with pytest.raises(ls.ConfigError, match="at least 5 MiB"):
            _native.remote_reload_environment()
    finally:
        monkeypatch.delenv("LOADSCOPE_REMOTE_PART_SIZE")
        _native.remote_reload_environment()


def test_convert_writes_indexed_shards_into_s3_that_read_like_the_folder(s3, demo, tmp_path):
    out = "s3://converted/train"
    assert curl_s3(s3, "-X", "PUT", f"{s3['AWS_ENDPOINT_URL']}/converted") in ("200", "409")
    r = subprocess.run([os.sys.executable, "-m", "loadscope", "convert", str(demo / "folder"), out, "--shard-size", "1MB"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    objects = _native.remote_list(out + "/")
    shards = [u for u in objects if u.endswith(".tar")]
    assert len(shards) > 1 and sorted(objects) == sorted(shards + [u + ".idx" for u in shards])
    fields = {"jpg": ls.Image(40), "cls": ls.Int()}
    want = [b["jpg"].numpy().tobytes() for b in ls.Loader(ls.Folder(demo / "folder"), fields=fields, batch_size=10)]
    got = [b["jpg"].numpy().tobytes() for b in ls.Loader(ls.WebDataset(shards), fields=fields, batch_size=10)]
    assert got == want
    again = subprocess.run([os.sys.executable, "-m", "loadscope", "convert", str(demo / "folder"), out],
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 1 and "already holds shard-* objects" in again.stderr


def _wait_until_refused(endpoint, restart, timeout=120.0):
    """Returns once nothing accepts connections at `endpoint` (the timeout only catches a hang)."""
    import socket
    import time
    from urllib.parse import urlsplit

    u = urlsplit(endpoint)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection((u.hostname, u.port), timeout=1).close()
        except OSError:
            return
        assert restart.poll() is None, "the restart ended before the server was seen down"
        time.sleep(0.01)
    raise AssertionError(f"{endpoint} still accepts connections {timeout:g} s after the kill")


def test_radosgw_killed_and_restarted_mid_epoch_loses_and_repeats_nothing(s3, s3_demo):
    from conftest import REPO

    urls = [f"s3://demo-shards/train/{p.name}" for p in s3_demo]
    fields = {"jpg": ls.Image(40), "cls": ls.Int()}
    L = ls.Loader(ls.WebDataset(urls, index="scan"), fields=fields, batch_size=4, threads=1, prefetch=1, shuffle=True,
                  world_size=2, rank=0)  # two ranks: spans fetched per batch, so the restart is met mid-epoch
    L0 = ls.Loader(ls.WebDataset([str(p) for p in s3_demo], index="scan"), fields=fields, batch_size=4, threads=1,
                   shuffle=True, world_size=2, rank=0)
    want = [b["jpg"].numpy().tobytes() for b in L0]
    before = _native.network_stats()["retries_network"]
    got, restart = [], None
    for i, b in enumerate(L):
        got.append(b["jpg"].numpy().tobytes())
        if i == 3:  # the server dies (SIGKILL) and comes back while the epoch goes on
            restart = subprocess.Popen(["bash", str(REPO / "scripts" / "s3-server.sh"), "restart-rgw", s3["dir"]],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            # Go on only once it is down: on a busy machine the kill could otherwise come after
            # the loader has fetched the rest of the epoch, and the outage would never be met.
            _wait_until_refused(s3["AWS_ENDPOINT_URL"], restart)
    assert restart is not None and restart.wait(timeout=120) == 0, restart.stderr.read() if restart else ""
    assert got == want
    assert _native.network_stats()["retries_network"] > before  # the dead server was met


# --- settings per source (ls.Remote) -------------------------------------------------------------


def test_sources_with_their_own_settings_read_side_by_side_in_one_process(s3_server, s3_demo, demo, tmp_path,
                                                                           monkeypatch):
    """The process's environment reaches no server (no endpoint, no credentials); two Remote
    settings with the real endpoint and two profiles of one credentials file, one right and one
    wrong, read side by side: the right one gives exactly the local data (shards, and a manifest
    whose rows are s3:// URLs), the wrong one fails naming its own profile, in the same process
    and while the other loader is running; a pickled source reads in a fresh process."""
    import pickle

    for k in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_SESSION_TOKEN",
              "AWS_PROFILE", "AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.aws/credentials either
    _native.remote_reload_environment()
    creds = tmp_path / "credentials"
    creds.write_text(f"[right]\naws_access_key_id = {s3_server['AWS_ACCESS_KEY_ID']}\n"
                     f"aws_secret_access_key = {s3_server[SECRET_ENV]}\n"
                     f"[wrong]\naws_access_key_id = {s3_server['AWS_ACCESS_KEY_ID']}\n"
                     "aws_secret_access_key = not-the-secret-QUUX\n")
    ep, region = s3_server["AWS_ENDPOINT_URL"], s3_server["AWS_REGION"]
    right = ls.Remote(endpoint=ep, region=region, profile="right", credentials_file=creds, attempts=2)
    wrong = ls.Remote(endpoint=ep, region=region, profile="wrong", credentials_file=creds, attempts=1)
    assert right.tag != wrong.tag and "profile 'right'" in right.credentials
    urls = [f"s3://demo-shards/train/{p.name}" for p in s3_demo]
    want = digest(ls.WebDataset([str(p) for p in s3_demo]))
    assert digest(ls.WebDataset(urls, remote=right)) == want
    with pytest.raises(ls.ConfigError) as e:
        ls.WebDataset(urls, remote=wrong)
    msg = str(e.value)
    assert "403" in msg and "SignatureDoesNotMatch" in msg and "profile 'wrong'" in msg, msg
    assert "QUUX" not in msg and "s3://demo-shards/train/" in msg and "+r" not in msg  # the name as given

    # A local manifest whose rows are s3:// URLs: the rows are read with the source's settings.
    jpegs = sorted((demo / "folder").rglob("*.jpg"))[:12]
    put_bucket(s3_server, "demo-shards", [(f"img/{i:02d}.jpg", p) for i, p in enumerate(jpegs)])
    (tmp_path / "local.jsonl").write_text("".join(json.dumps({"path": str(p), "cls": i}) + "\n"
                                                  for i, p in enumerate(jpegs)))
    (tmp_path / "s3.jsonl").write_text("".join(json.dumps({"path": f"s3://demo-shards/img/{i:02d}.jpg", "cls": i}) + "\n"
                                               for i in range(len(jpegs))))
    fields = {"jpg": ls.Image(48), "cls": ls.Int()}

    def pixels(source, **kw):
        return [(b["jpg"].numpy().tobytes(), b["cls"].tolist())
                for b in ls.Loader(source, fields=fields, batch_size=4, threads=2, seed=5, **kw)]

    assert pixels(ls.FileList(tmp_path / "s3.jsonl", cache_dir=None, remote=right)) == \
        pixels(ls.FileList(tmp_path / "local.jsonl", cache_dir=None))
    # Both loaders at once: the right one keeps reading while the wrong one fails on its rows.
    running = iter(ls.Loader(ls.WebDataset(urls, remote=right), fields=fields, batch_size=8, threads=2))
    next(running)
    failing = ls.Loader(ls.FileList(tmp_path / "s3.jsonl", cache_dir=None, remote=wrong), fields=fields,
                        batch_size=4, threads=2)
    with pytest.raises(ls.ReadError) as e:
        list(failing)
    assert "403" in e.value.reason and "profile 'wrong'" in e.value.reason, e.value.reason
    assert sum(1 for _ in running) > 0

    # A copy in a fresh process (a spawned DataLoader worker) registers the same settings there.
    blob = tmp_path / "source.pickle"
    blob.write_bytes(pickle.dumps(ls.WebDataset(urls, remote=right)))
    code = ("import pickle, sys, loadscope as ls; src = pickle.load(open(sys.argv[1], 'rb'));"
            "print(sum(len(b['__key__']) for b in ls.Loader(src, fields={'cls': ls.Int()}, batch_size=8)))")
    out = subprocess.run([sys.executable, "-c", code, str(blob)], capture_output=True, text=True, timeout=300,
                         env={k: v for k, v in os.environ.items() if not k.startswith("AWS_")})
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.strip()) == want[1]


def test_bad_remote_settings_say_what_is_allowed(tmp_path):
    with pytest.raises(ls.ConfigError, match="Remote.endpoint='localhost:7480': an http:// or https:// URL"):
        ls.Remote(endpoint="localhost:7480")
    with pytest.raises(ls.ConfigError, match="Remote.attempts must be an int in \\[1, 100\\]"):
        ls.Remote(attempts=0)
    with pytest.raises(ls.ConfigError, match="Remote.credentials_file=.*: no such file"):
        ls.Remote(profile="x", credentials_file=tmp_path / "nope")
    (tmp_path / "c").write_text("[a]\naws_access_key_id = K\naws_secret_access_key = S\n")
    with pytest.raises(ls.ConfigError, match="Remote: no access key and secret in profile 'b' in"):
        ls.Remote(profile="b", credentials_file=tmp_path / "c")
    with pytest.raises(ls.ConfigError, match="WebDataset\\(remote=\\): a loadscope.Remote"):
        ls.WebDataset("s3://b/a.tar", remote={"endpoint": "http://x"})


def holds_exactly(cache, shards):
    """The node cache directory holds one copy of each shard, byte for byte, and nothing else."""
    for p in shards:
        copies = list(cache.glob(f"*-{p.name}"))
        assert len(copies) == 1 and copies[0].read_bytes() == p.read_bytes(), (cache, p.name)
    assert len(list(cache.glob("*.tar"))) == len(shards)


def test_each_loader_keeps_its_objects_in_its_own_node_cache(s3, s3_demo, tmp_path, monkeypatch):
    """Loader(cache_dir=) is the loader's, not the process's: two loaders of one process,
    iterated in turn, keep the shards each reads in its own directory (byte for byte the shards
    on disk); a third without cache_dir fetches through none (the process has none); all three
    yield the local batches, and a source's own Remote(cache_dir=) wins over the loader's."""
    monkeypatch.delenv("LOADSCOPE_CACHE_DIR", raising=False)
    monkeypatch.delenv("LOADSCOPE_CACHE_LIMIT", raising=False)
    urls = [f"s3://demo-shards/train/{p.name}" for p in s3_demo]
    fields = {"jpg": ls.Image(48), "cls": ls.Int()}

    def batches(loader):
        return [b["jpg"].numpy().tobytes() + b["cls"].numpy().tobytes() for b in loader]

    def local(paths):
        return batches(ls.Loader(ls.WebDataset([str(p) for p in paths], index="scan"), fields=fields, batch_size=8))

    want = local(s3_demo)
    a = ls.Loader(ls.WebDataset(urls, index="scan"), fields=fields, batch_size=8, cache_dir=tmp_path / "a")
    b = ls.Loader(ls.WebDataset(urls[:2], index="scan"), fields=fields, batch_size=8, cache_dir=tmp_path / "b",
                  cache_limit="1GB")
    plain = ls.Loader(ls.WebDataset(urls, index="scan"), fields=fields, batch_size=8)
    got_b = batches(b)  # made last, read first: no "last loader made" decides
    assert batches(a) == want
    assert got_b == local(s3_demo[:2])
    _native.reset_network_stats()
    assert batches(plain) == want
    assert _native.network_stats()["cache_misses"] == 0 and _native.network_stats()["bytes"] > 0
    holds_exactly(tmp_path / "a", s3_demo)
    holds_exactly(tmp_path / "b", s3_demo[:2])
    assert _native.remote_cache_settings()[0] == ""  # the process's cache: none, untouched
    own = ls.Loader(ls.WebDataset(urls[:1], index="scan", remote=ls.Remote(cache_dir=tmp_path / "own")),
                    fields=fields, batch_size=8, cache_dir=tmp_path / "loader")
    assert batches(own) == local(s3_demo[:1])
    assert len(list((tmp_path / "own").glob("*.tar"))) == 1 and not list((tmp_path / "loader").glob("*.tar"))


def test_each_source_keeps_its_objects_in_its_own_node_cache(s3, s3_demo, tmp_path, monkeypatch):
    """Remote(cache_dir=) per source: two sources in one process cache the shards they read in
    their own directories (byte for byte the shards on disk), the process's cache (none here)
    gets nothing, and the batches are the local ones."""
    monkeypatch.delenv("LOADSCOPE_CACHE_DIR", raising=False)
    monkeypatch.delenv("LOADSCOPE_CACHE_LIMIT", raising=False)
    urls = [f"s3://demo-shards/train/{p.name}" for p in s3_demo]
    want = digest(ls.WebDataset([str(p) for p in s3_demo]))
    a = ls.Remote(cache_dir=tmp_path / "a")
    b = ls.Remote(cache_dir=tmp_path / "b", cache_limit="1GB")
    assert digest(ls.WebDataset(urls, remote=a)) == want
    assert digest(ls.WebDataset(urls[:2], remote=b)) == digest(ls.WebDataset([str(p) for p in s3_demo[:2]]))
    holds_exactly(tmp_path / "a", s3_demo)
    holds_exactly(tmp_path / "b", s3_demo[:2])
    assert _native.remote_cache_settings()[0] == ""  # the process's cache: none, untouched
    with pytest.raises(ls.ConfigError, match="Remote.cache_limit needs a cache_dir"):
        ls.Remote(cache_limit="1GB")
