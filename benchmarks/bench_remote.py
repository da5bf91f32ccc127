#!/usr/bin/env python3
"""Reading from object storage against the same shards on local disk (issue 13; a benchmark, not
a test: it asserts nothing about speed).

The demo's 2000 real-photo JPEGs in 10 indexed tar shards, RandomResizedCrop(224) + flip, batch
64, T threads, shuffled, read from:
  local        the shards on local disk (page cache warm)
  s3           Ceph radosgw over loopback, indexed: ranged GETs of the members, fetched ahead
  s3-stream    the same objects streamed front to back (index="off")
  http         nginx over loopback, indexed
  s3-shaped    radosgw behind a shaping proxy: +LATENCY ms per request, a shared bandwidth cap
The servers run on the same 2 cores as the loader (and so does the shaping proxy): what they
cost is in the figures, unless --pin. Rounds are interleaved after a warm-up epoch per arm; per round the ratio
of each arm's samples/s to local's; median and range. Also: time to the first batch (a new
Loader, indexes read), the bytes fetched to resume half-way through an epoch, and the requests
an epoch makes (a shuffled one from one rank: 4 MiB blocks; the arm s3-rank0of2 reads rank 0's
half of the epoch as two ranks would, spans of its own members only; s3-rank0of2-cache the same
through a node-local cache emptied before every epoch: whole shards fetched once per node).

    .venv/bin/python benchmarks/bench_remote.py [--rounds 3] [--threads 2] [--latency-ms 10] [--mbit 400] [--pin]

With --pin the servers and the proxy run on the last core and the loader on the others, as if
the server were another machine.
"""

import argparse
import asyncio
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))

import loadscope as ls  # noqa: E402
from loadscope import _native, datasets  # noqa: E402
from loadscope.telemetry import tree_cpu_seconds  # noqa: E402


def shaping_proxy(listen_port, target_port, latency_s, bytes_per_s, ready):
    """A TCP proxy: each request chunk is held `latency_s` before it is forwarded, and every
    response byte passes one token bucket shared by all connections (a link's capacity)."""
    async def main():
        bucket = {"tokens": 0.0, "at": time.monotonic()}

        async def take(n):
            while True:
                now = time.monotonic()
                bucket["tokens"] = min(bytes_per_s * 0.05, bucket["tokens"] + (now - bucket["at"]) * bytes_per_s)
                bucket["at"] = now
                if bucket["tokens"] >= n:
                    bucket["tokens"] -= n
                    return
                await asyncio.sleep((n - bucket["tokens"]) / bytes_per_s)

        async def pipe(reader, writer, delay, shaped):
            try:
                while True:
                    data = await reader.read(16384)
                    if not data:
                        break
                    if delay:
                        await asyncio.sleep(delay)
                    if shaped:
                        await take(len(data))
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        async def handle(cr, cw):
            ur, uw = await asyncio.open_connection("127.0.0.1", target_port)
            await asyncio.gather(pipe(cr, uw, latency_s, False), pipe(ur, cw, 0, True))

        server = await asyncio.start_server(handle, "127.0.0.1", listen_port)
        ready.set()
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def epoch(shards, threads, batch, seed, loader_args=None, **kw):
    L = ls.Loader(ls.WebDataset(shards, **kw), fields={"jpg": ls.Image(224), "cls": ls.Int()}, batch_size=batch,
                  threads=threads, shuffle=True, seed=seed, **(loader_args or {}))
    n, t0, c0, r0 = 0, time.perf_counter(), tree_cpu_seconds(), _native.network_stats()["requests"]
    for b in L:
        n += len(b["cls"])
    return n / (time.perf_counter() - t0), (tree_cpu_seconds() - c0) / n, _native.network_stats()["requests"] - r0


def first_batch(shards, threads, batch, **kw):
    t0 = time.perf_counter()
    L = ls.Loader(ls.WebDataset(shards, **kw), fields={"jpg": ls.Image(224), "cls": ls.Int()}, batch_size=batch,
                  threads=threads, shuffle=True, seed=0)
    next(iter(L))
    return time.perf_counter() - t0


def resume_bytes(shards, threads, batch):
    L = ls.Loader(ls.WebDataset(shards), fields={"jpg": ls.Image(224), "cls": ls.Int()}, batch_size=batch,
                  threads=threads, shuffle=True, seed=0)
    half = len(L) // 2
    state = dict(L.state_dict(), batches=half)
    _native.reset_network_stats()
    R = ls.Loader(ls.WebDataset(shards), fields={"jpg": ls.Image(224), "cls": ls.Int()}, batch_size=batch,
                  threads=threads, shuffle=True, seed=0, prefetch=1)
    R.load_state_dict(state)
    t0 = time.perf_counter()
    next(iter(R))
    return time.perf_counter() - t0, _native.network_stats()["bytes"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--latency-ms", type=float, default=10.0)
    ap.add_argument("--mbit", type=float, default=400.0)
    ap.add_argument("--data", default=str(REPO / "data" / "demo"))
    ap.add_argument("--out", default=str(REPO / "results" / "bench_remote.json"))
    ap.add_argument("--pin", action="store_true",
                    help="servers and proxy on the last core, the loader on the others (as if the server were "
                         "another machine: the arms then differ in where the bytes come from, not in who shares "
                         "the loader's cores)")
    a = ap.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    if a.pin and len(cores) < 2:
        ap.error("--pin needs two cores or more")

    from servers import put_bucket, start_server, stop_server  # the servers the tests use

    datasets.ensure(a.data, quiet=True)
    local = sorted(str(p) for p in Path(a.data, "shards").glob("*.tar"))
    subprocess.run([sys.executable, "-m", "loadscope", "index", *local], check=True, capture_output=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench_remote-"))
    www = tmp / "www"
    shutil.copytree(Path(a.data, "shards"), www / "shards")
    s3dir, httpdir = tmp / "s3", tmp / "http"
    s3dir.mkdir(), httpdir.mkdir()
    proxy = None
    try:
        if a.pin:  # the daemons and the proxy inherit this affinity
            os.sched_setaffinity(0, {cores[-1]})
        s3 = start_server("s3-server.sh", s3dir)
        http = start_server("http-server.sh", httpdir, str(www))
        os.environ.update({k: v for k, v in s3.items() if k.startswith("AWS_")})
        put_bucket(s3, "bench", [(f"shards/{Path(p).name}", p) for p in local]
                   + [(f"shards/{Path(p).name}.idx", p + ".idx") for p in local])
        s3_urls = [f"s3://bench/shards/{Path(p).name}" for p in local]
        http_urls = [f"{http['LOADSCOPE_HTTP_URL']}/shards/{Path(p).name}" for p in local]
        # The shaped path: the same bucket through the proxy (SigV4 signs the proxy's host:port,
        # which is what radosgw then sees in Host).
        port = free_port()
        ready = multiprocessing.Event()
        proxy = multiprocessing.Process(target=shaping_proxy, daemon=True, args=(
            port, int(s3["AWS_ENDPOINT_URL"].rsplit(":", 1)[1]), a.latency_ms / 1000, a.mbit * 1e6 / 8, ready))
        proxy.start()
        ready.wait(30)
        shaped_endpoint = f"http://127.0.0.1:{port}"
        if a.pin:  # the loader's threads, made later, inherit this one
            os.sched_setaffinity(0, set(cores[:-1]))

        def s3_arm(endpoint, fresh_cache=None, loader_args=None, **kw):
            def run(seed):
                os.environ["AWS_ENDPOINT_URL"] = endpoint
                args = dict(loader_args or {})
                if fresh_cache is not None:
                    shutil.rmtree(fresh_cache, ignore_errors=True)
                    args["cache_dir"] = str(fresh_cache)
                try:
                    return epoch(s3_urls, a.threads, a.batch, seed, loader_args=args, **kw)
                finally:
                    os.environ["AWS_ENDPOINT_URL"] = s3["AWS_ENDPOINT_URL"]
            return run

        arms = {
            "local": lambda seed: epoch(local, a.threads, a.batch, seed),
            "s3": s3_arm(s3["AWS_ENDPOINT_URL"]),
            "s3-stream": s3_arm(s3["AWS_ENDPOINT_URL"], index="off"),
            "http": lambda seed: epoch(http_urls, a.threads, a.batch, seed),
            "s3-shaped": s3_arm(shaped_endpoint),
            "s3-rank0of2": s3_arm(s3["AWS_ENDPOINT_URL"], loader_args={"rank": 0, "world_size": 2}),
            # The same through a node-local cache that starts empty every epoch (a first epoch):
            # whole shards are fetched once per node, the ranks read them from local disk.
            "s3-rank0of2-cache": s3_arm(s3["AWS_ENDPOINT_URL"], loader_args={"rank": 0, "world_size": 2},
                                        fresh_cache=tmp / "cache"),
        }
        names = list(arms)
        for n in names:  # warm-up: page cache, server caches, connections
            arms[n](99)
        rows = {n: [] for n in names}
        for r in range(a.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for n in order:
                rows[n].append(arms[n](r))
                print(f"round {r} {n:10s} {rows[n][-1][0]:7.1f} samples/s, {rows[n][-1][1] * 1e3:.1f} ms CPU/sample, "
                      f"{rows[n][-1][2]} requests", flush=True)
        out = {"arms": {}, "machine": {"cpus": os.cpu_count(), "loader_cores": sorted(os.sched_getaffinity(0))},
               "args": vars(a)}
        for n in names:
            ratios = [x[0] / base[0] for x, base in zip(rows[n], rows["local"])]
            out["arms"][n] = {"samples_per_s": statistics.median(x[0] for x in rows[n]),
                              "cpu_ms_per_sample": statistics.median(x[1] for x in rows[n]) * 1e3,
                              "requests_per_epoch": statistics.median(x[2] for x in rows[n]),
                              "ratio_median": statistics.median(ratios), "ratio_range": [min(ratios), max(ratios)]}
        out["first_batch_s"] = {"local": statistics.median(first_batch(local, a.threads, a.batch) for _ in range(3)),
                                "s3": statistics.median(first_batch(s3_urls, a.threads, a.batch) for _ in range(3))}
        os.environ["AWS_ENDPOINT_URL"] = shaped_endpoint
        out["first_batch_s"]["s3-shaped"] = statistics.median(first_batch(s3_urls, a.threads, a.batch) for _ in range(3))
        os.environ["AWS_ENDPOINT_URL"] = s3["AWS_ENDPOINT_URL"]
        secs, fetched = resume_bytes(s3_urls, a.threads, a.batch)
        out["resume_half_way"] = {"first_batch_s": secs, "bytes_fetched": fetched,
                                  "dataset_bytes": sum(os.path.getsize(p) for p in local)}
        print(json.dumps(out, indent=1))
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(out, indent=1))
    finally:
        if proxy is not None:
            proxy.terminate()
        for script, d in (("s3-server.sh", s3dir), ("http-server.sh", httpdir)):
            try:
                stop_server(script, d)
            except Exception as e:  # noqa: BLE001 - report and go on stopping the other
                print(f"stopping {script}: {e}", file=sys.stderr)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
