"""Telemetry numbers against independent measurements: what a slow consumer and a slow decode
look like, PSS against psutil, bytes against file sizes, a trace that parses and nests, the
DataLoader watcher's per-worker figures."""

import json
import logging
import time

import psutil
import pytest
import torch

import loadscope as ls


def loader(demo, **kw):
    args = dict(fields={"jpg": ls.Image(64, flip=0.5), "cls": ls.Int()}, batch_size=16, threads=2, prefetch=2)
    args.update(kw)
    return ls.Loader(ls.Folder(demo / "folder"), **args)


def test_slow_consumer_shows_back_pressure_not_data_wait(demo):
    # 15 steps of 150 ms against decodes of 8 small images: the loop's only real wait is the
    # epoch's first batch, far under the 10% the verdict allows even on a loaded machine.
    L = loader(demo, batch_size=8)
    for _ in L:
        time.sleep(0.15)
    t = L.telemetry().to_dict()
    assert t["loop"]["data_wait"]["count"] == 15
    assert t["loop"]["data_wait"]["total"] < t["queue"]["back_pressure_seconds"]
    assert t["loop"]["data_wait_share"] < 0.1
    assert t["queue"]["occupancy"] > 0.5
    assert "compute-bound" in L.telemetry().verdict()


def test_slow_decode_shows_data_wait_not_back_pressure(demo):
    # One thread, big decodes (no DCT scaling, large output) and a consumer that does nothing.
    L = loader(demo, fields={"jpg": ls.Image(448, crop="resize", dct_scaling=False)}, threads=1)
    for _ in L:
        pass
    t = L.telemetry().to_dict()
    assert t["loop"]["data_wait_share"] > 0.8
    assert t["queue"]["back_pressure_seconds"] < 0.05 * t["active_seconds"]
    assert t["queue"]["occupancy"] < 0.2
    assert "input-bound" in L.telemetry().verdict()
    # The loop's data wait and the engine's consumer wait measure the same blocking.
    assert t["queue"]["consumer_wait"]["total"] <= t["loop"]["data_wait"]["total"]


def test_stage_counts_bytes_and_failures(demo, real, tmp_path):
    L = loader(demo)
    for _ in L:
        pass
    t = L.telemetry().to_dict()
    on_disk = sum(p.stat().st_size for p in (demo / "folder").rglob("*.jpg"))
    assert t["stages"]["read"]["image"]["bytes"] == on_disk
    assert t["stages"]["read"]["image"]["items"] == 120
    assert t["stages"]["decode"]["image"]["items"] == t["stages"]["augment"]["image"]["items"] == 120
    assert t["stages"]["decode"]["other"]["items"] == 120  # the labels
    assert t["io"]["engine_bytes"] == on_disk
    # Shards: the planner reads every member; bytes equal the members' sizes.
    W = ls.Loader(ls.WebDataset(str(demo / "shards/train-{000000..000004}.tar")), fields={"jpg": ls.Image(32)}, batch_size=30)
    for _ in W:
        pass
    import tarfile

    members = 0
    for shard in (demo / "shards").glob("*.tar"):
        with tarfile.open(shard) as t:
            members += sum(m.size for m in t.getmembers())
    assert W.telemetry()["stages"]["read"]["source"]["bytes"] == members
    # A corrupt image is a decode failure of kind image.
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "bad.jpg").write_bytes((real / "vision/test/assets/damaged_jpeg/corrupt.jpg").read_bytes())
    (tmp_path / "x" / "good.jpg").write_bytes(next((demo / "folder").rglob("*.jpg")).read_bytes())
    B = ls.Loader(ls.Folder(tmp_path), fields={"jpg": ls.Image(32)}, batch_size=2, on_error="skip", error_budget=None)
    list(B)
    tb = B.telemetry().to_dict()
    assert tb["stages"]["decode"]["image"]["failures"] == 1 and tb["failures"] == 1


def test_pss_agrees_with_psutil_and_cpu_adds_up(demo):
    L = loader(demo)
    for _ in L:
        pass
    t = L.telemetry().to_dict()
    ref = psutil.Process().memory_full_info()
    assert abs(t["memory"]["pss"] - ref.pss) <= 0.05 * ref.pss
    assert abs(t["memory"]["rss"] - ref.rss) <= 0.05 * ref.rss
    assert t["memory"]["rss_peak"] >= t["memory"]["rss"] * 0.95
    workers = [th for th in t["threads"] if th["role"].startswith("worker")]
    assert len(workers) == 2 and all(th["cpu_seconds"] > 0 for th in workers)
    proc_cpu = sum(psutil.Process().cpu_times()[:2])
    assert sum(th["cpu_seconds"] for th in t["threads"]) <= proc_cpu + 0.05


def test_engine_memory_is_a_live_gauge(demo):
    import gc

    L = loader(demo)
    it = iter(L)
    held = [next(it) for _ in range(3)]
    e = L.telemetry()["memory"]["engine"]
    block = 16 * 3 * 64 * 64 + 16 * 8
    assert e["pool_bytes"] >= 2 * block  # blocks in flight and held by `held`
    assert e["scratch_bytes"] > 0        # the workers' decoders and resamplers
    del it, held
    gc.collect()
    e = L.telemetry()["memory"]["engine"]
    assert e["pool_bytes"] == 0 and e["scratch_bytes"] == 0  # epoch over, tensors gone


def test_time_to_first_batch(demo):
    t0 = time.monotonic()
    L = loader(demo)
    time.sleep(0.2)
    it = iter(L)
    next(it)
    elapsed = time.monotonic() - t0
    t = L.telemetry().to_dict()
    first = t["loop"]["first_batch_after_create"]
    assert 0.2 <= first <= elapsed
    assert t["loop"]["first_batch_last_epoch"] < first - 0.15
    assert t["first_batch_last_epoch"] <= t["loop"]["first_batch_last_epoch"]


def test_trace_is_valid_json_with_well_nested_spans(demo, tmp_path):
    L = loader(demo)
    L.start_trace(tmp_path / "run.trace.json")
    for _ in L:
        time.sleep(0.002)
    path = L.stop_trace()
    trace = json.loads(open(path).read())
    events = trace["traceEvents"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"training loop", "planner", "consumer", "worker 0", "worker 1"} <= names
    spans = [e for e in events if e["ph"] == "X"]
    assert sum(e["name"] == "sample" for e in spans) == 120
    assert sum(e["name"] == "next()" for e in spans) == 8
    by_lane = {}
    for e in spans:
        assert e["dur"] >= 0 and e["ts"] >= 0
        by_lane.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"]))
    for lane in by_lane.values():  # within a lane, spans are disjoint or nested
        stack = []
        for start, end in sorted(lane, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= start + 1e-3:
                stack.pop()
            assert not stack or end <= stack[-1] + 1e-3, "partly overlapping spans"
            stack.append(end)
    assert any(e["ph"] == "C" for e in events)  # queue depth counter


def test_exports_summary_json_prometheus_and_reports(demo, tmp_path, caplog):
    L = loader(demo)
    path = tmp_path / "reports.jsonl"
    L.report_every(0.05, to=str(path))
    for _ in L:
        time.sleep(0.04)
    L.stop_reports()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) >= 3
    samples = [r["snapshot"]["samples"] for r in lines]
    assert samples == sorted(samples) and samples[-1] == 120
    final = lines[-1]["snapshot"]
    # every counter's deltas add up to its total, the first interval included
    for key in ("samples", "stages.decode.image.items", "stages.decode.image.busy.total", "io.engine_bytes",
                "loop.wait_seconds", "queue.back_pressure_seconds", "threads.worker 0.cpu_seconds"):
        total = sum(r["interval"].get(key, 0) for r in lines)
        node = final
        if key.startswith("threads."):
            node = next(t["cpu_seconds"] for t in final["threads"] if t["role"] == "worker 0")
        else:
            for part in key.split("."):
                node = node[part]
        assert total == pytest.approx(node, rel=1e-9, abs=1e-9), key
    assert len(path.read_text()) < 40000 * len(lines)  # no queue-depth ring in reports
    snap = L.telemetry()
    assert json.loads(snap.to_json())["samples"] == 120
    text = snap.summary()
    for word in ("samples/s", "data wait", "queue:", "decode", "memory:", "cpu:", "storage:", "transfer: off"):
        assert word in text
    prom = snap.to_prometheus()
    assert "loadscope_samples_total 120" in prom
    for line in prom.splitlines():
        assert line.startswith("#") or line.split()[-1].replace(".", "").replace("e-", "").replace("-", "").isdigit()
    got = []
    L.report_every(0.05, to=got.append)
    list(L)
    L.stop_reports()
    assert got and "interval" in got[-1]
    with caplog.at_level(logging.INFO, logger="t"):
        L.report_every(0.05, to=logging.getLogger("t"))
        list(L)
        L.stop_reports()
    assert any("loadscope telemetry" in r.message for r in caplog.records)


def test_data_wait_share_counts_every_wait(demo):
    """A loop that does nothing but next() waits nearly all of its time; every next() that gave
    a batch is one wait, each epoch's first (the restart) included."""
    L = loader(demo, fields={"jpg": ls.Image(160, crop="resize", dct_scaling=False)}, threads=1)
    for _ in range(2):
        for _ in L:
            pass
    loop = L.telemetry()["loop"]
    assert loop["data_wait"]["count"] == 2 * 8  # 120 images in batches of 16, two epochs
    assert loop["data_wait_share"] > 0.95


def test_reports_survive_a_failing_sink_and_end_with_a_final_report(demo, caplog):
    calls = []

    def flaky(report):
        calls.append(report)
        if len(calls) == 1:
            raise OSError("disk full")

    L = loader(demo)
    with caplog.at_level(logging.WARNING, logger="loadscope"):
        L.report_every(0.03, to=flaky)
        for _ in L:
            time.sleep(0.03)
        n = len(calls)
        del L  # garbage collection stops the reporter with a final report
    import gc

    gc.collect()
    assert n >= 3 and len(calls) >= n
    assert calls[-1]["snapshot"]["samples"] == 120
    assert sum("could not be written" in r.message for r in caplog.records) == 1


def test_telemetry_off_measures_nothing_and_loads_the_same(demo):
    on, off = loader(demo), loader(demo, telemetry=False)
    a = [b["jpg"] for b in on]
    b = [b["jpg"] for b in off]
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    t = off.telemetry().to_dict()
    assert t["stages"] == {} and t["loop"]["batches"] == 0 and t["samples"] == 0
    assert t["enabled"] is False and "off" in off.telemetry().summary()
    with pytest.raises(ls.ConfigError, match="tracing needs telemetry=True"):
        off.start_trace("/tmp/x.json")


def test_video_decode_time_is_its_own_kind(demo_videos):
    rows = [json.loads(line) for line in (demo_videos / "videos.jsonl").read_text().splitlines()]
    L = ls.Loader(ls.FileList(demo_videos / "videos.jsonl"), fields={"mp4": ls.VideoClip(32, frames=4, stride=2)}, batch_size=3)
    list(L)
    st = L.telemetry()["stages"]
    assert st["decode"]["video"]["items"] == len(rows) and st["augment"]["video"]["items"] == len(rows)
    assert "image" not in st["decode"]


def test_watch_measures_a_torch_dataloader_and_each_worker(demo):
    from torchvision.datasets import ImageFolder
    import torchvision.transforms as T

    ds = ImageFolder(str(demo / "folder"), transform=T.Compose([T.RandomResizedCrop(64), T.PILToTensor()]))
    dl = torch.utils.data.DataLoader(ds, batch_size=16, num_workers=2, persistent_workers=True)
    import subprocess

    bystander = subprocess.Popen(["sleep", "30"])  # a child that is not a DataLoader worker
    try:
        with ls.telemetry.watch(dl, interval=0.05) as w:
            n = 0
            for x, _ in w:
                n += x.shape[0]
                time.sleep(0.1)  # let the sampler see the workers mid-epoch
            t = w.telemetry()
    finally:
        bystander.kill()
    assert n == t["samples"] == 120
    assert t["loop"]["batches"] == 8
    workers = [p for p in t["processes"] if p["role"] == "worker"]
    assert len(workers) == t["workers"] == 2  # exactly the DataLoader's workers
    assert bystander.pid not in [p["pid"] for p in workers]
    for p in workers:
        ref = psutil.Process(p["pid"]).memory_full_info()
        assert p["pss"] > 0 and abs(p["rss"] - ref.rss) < 0.2 * ref.rss
    assert t["memory"]["total_pss"] == sum(p["pss"] for p in t["processes"])
    assert t["loop"]["data_wait_share"] is not None
    assert not any(th.name == "loadscope-watch" for th in __import__("threading").enumerate())
    # Non-persistent workers exit after each epoch: their CPU stays counted.
    dl2 = torch.utils.data.DataLoader(ds, batch_size=16, num_workers=2)
    with ls.telemetry.watch(dl2, interval=0.05) as w2:
        for _ in range(2):
            for _ in w2:
                time.sleep(0.05)
        t2 = w2.telemetry()
    assert t2["workers"] == 0
    gone = [p for p in t2["processes"] if p["role"] == "worker"]
    assert len(gone) == 4 and all(not p["alive"] and p["cpu_seconds"] > 0 for p in gone)


def test_device_argument_fails_early_with_what_is_allowed(demo):
    with pytest.raises(ls.ConfigError, match="allowed are 'cpu', 'cuda', 'cuda:N'"):
        loader(demo, device="tpu")
    with pytest.raises(ls.ConfigError, match="a Dataset yields CPU batches"):
        ls.Dataset(ls.Folder(demo / "folder"), fields={"jpg": ls.Image(64)}, batch_size=4, device="cuda")
    if not torch.cuda.is_available():
        with pytest.raises(ls.ConfigError, match="is_available"):
            loader(demo, device="cuda")
    assert loader(demo, device="cpu").device is None


def test_gpu_decoder_arguments_fail_early():
    from loadscope.gpu import JpegDecoder

    with pytest.raises(ls.ConfigError, match="allowed are 'random_resized', 'center', 'resize'"):
        JpegDecoder(64, crop="zoom")
    with pytest.raises(ls.ConfigError, match="flip applies to crop='random_resized' only"):
        JpegDecoder(64, crop="center", flip=0.5)
    with pytest.raises(ls.ConfigError, match="CUDA device"):
        JpegDecoder(64, device="cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ls.ConfigError, match="needs CUDA"):
            JpegDecoder(64)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_transfer_pinned_timed_and_overlapped(demo):
    L = loader(demo, device="cuda")
    out = []
    for b in L:
        assert b["jpg"].is_cuda and b["cls"].is_cuda
        out.append(b["jpg"].sum().item())
    t = L.telemetry().to_dict()["transfer"]
    assert t["enabled"] and t["batches"] == 8 and t["pinned"] and t["pinned_bytes"] > 0
    assert t["bandwidth_gbps"] > 0.5
    ref = [b["jpg"].sum().item() for b in loader(demo)]
    assert out == ref


def test_a_bad_report_interval_on_a_watched_loop_is_a_config_error():
    """The watcher's argument check raises loadscope's ConfigError, listing what is allowed (it
    once imported the error from a module that does not exist and raised ModuleNotFoundError)."""
    with ls.telemetry.watch(iter(range(3))) as w:
        for bad in (0, -1.0, True, "10"):
            with pytest.raises(ls.ConfigError, match=r"report_every\(seconds=.*must be a number > 0"):
                w.report_every(bad)


def test_a_watched_dataloader_and_a_loader_print_with_the_same_ruler(demo, tmp_path):
    """watch(dl).telemetry() is a Snapshot shaped like a Loader's: the summaries have the same
    lines for what both measure, and to_dict(), to_prometheus(), report_every work alike."""
    from torchvision.datasets import ImageFolder
    import torchvision.transforms as T

    ds = ImageFolder(str(demo / "folder"), transform=T.Compose([T.RandomResizedCrop(64), T.PILToTensor()]))
    dl = torch.utils.data.DataLoader(ds, batch_size=16, num_workers=2)
    reports = tmp_path / "dl.jsonl"
    with ls.telemetry.watch(dl, interval=0.05) as w:
        w.report_every(3600, to=str(reports))
        for i, _ in enumerate(w):
            if i == 4:
                break
        watched = w.telemetry(sample=True)
    L = loader(demo)
    for i, _ in enumerate(L):
        if i == 4:
            break
    own = L.telemetry()

    def heads(summary):
        return [line.split(":")[0] if not line.startswith("  ->") else "->" for line in summary.splitlines()]

    hw, hl = heads(watched.summary()), heads(own.summary())
    assert hw == ["watched DataLoader telemetry", "training loop", "->", "memory", "cpu"]
    assert [h for h in hl if h in hw or h == "loadscope telemetry"] == ["loadscope telemetry"] + hw[1:]
    dw, dl_ = watched.to_dict(), own.to_dict()
    for key in ("samples", "batches", "active_seconds", "uptime"):
        assert isinstance(dw[key], (int, float)) and isinstance(dl_[key], (int, float))
    assert dw["samples"] == dw["batches"] * 16 == 5 * 16
    assert set(dw["loop"]) == set(dl_["loop"])
    for key in ("rss", "pss", "pss_peak", "rss_peak", "cgroup_peak", "mem_available"):
        assert key in dw["memory"] and key in dl_["memory"]
    assert dw["memory"]["pss"] == sum(p["pss"] for p in dw["processes"]) > 0
    assert 0 < dw["cpu"]["cores"] and dw["cpu"]["workers_seconds"] > 0
    assert ls.telemetry.Snapshot(dw).summary() == watched.summary()  # from its dict, as for a Loader
    prom = watched.to_prometheus()
    assert "loadscope_samples_total 80" in prom and 'loadscope_cpu_seconds_total{process="workers"}' in prom
    after = w.telemetry().to_dict()  # after the with block: the last figures stay
    assert after["memory"]["pss_peak"] and after["cpu"]["workers_seconds"] > 0
    assert [p["role"] for p in after["processes"]].count("worker") == 2
    final = [json.loads(x) for x in reports.read_text().splitlines()]
    assert len(final) == 1 and final[0]["interval"]["samples"] == 80  # the last report, on close()
