"""Telemetry numbers against independent measurements: what a slow consumer and a slow decode
look like, PSS against psutil, bytes against file sizes, a trace that parses and nests, the
DataLoader watcher's per-worker figures."""

import json
import logging
import os
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
    L = loader(demo)
    for _ in L:
        time.sleep(0.05)  # a training step far slower than decoding 16 small images
    t = L.telemetry().to_dict()
    assert t["loop"]["data_wait_share"] < 0.1
    assert t["queue"]["occupancy"] > 0.5
    active = t["active_seconds"]
    assert t["queue"]["back_pressure_seconds"] > 0.5 * active
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
    e = t["memory"]["engine"]
    assert e["pool_bytes"] >= 2 * 16 * 3 * 64 * 64 + 16 * 8  # prefetch blocks of pixels and labels
    assert e["scratch_bytes"] > 0
    workers = [th for th in t["threads"] if th["role"].startswith("worker")]
    assert len(workers) == 2 and all(th["cpu_seconds"] > 0 for th in workers)
    proc_cpu = sum(psutil.Process().cpu_times()[:2])
    assert sum(th["cpu_seconds"] for th in t["threads"]) <= proc_cpu + 0.05


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
    lines = [json.loads(l) for l in path.read_text().splitlines()]
    assert len(lines) >= 3
    samples = [r["snapshot"]["samples"] for r in lines]
    assert samples == sorted(samples) and samples[-1] == 120
    assert sum(r["interval"]["samples"] for r in lines) == 120  # deltas add up
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


def test_telemetry_off_measures_nothing_and_loads_the_same(demo):
    on, off = loader(demo), loader(demo, telemetry=False)
    a = [b["jpg"] for b in on]
    b = [b["jpg"] for b in off]
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    t = off.telemetry().to_dict()
    assert t["stages"] == {} and t["loop"]["batches"] == 0 and t["samples"] == 0
    with pytest.raises(ls.ConfigError, match="tracing needs telemetry=True"):
        off.start_trace("/tmp/x.json")


def test_video_decode_time_is_its_own_kind(demo_videos):
    rows = [json.loads(l) for l in (demo_videos / "videos.jsonl").read_text().splitlines()]
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
    w = ls.telemetry.watch(dl, interval=0.05)
    n = 0
    for x, _ in w:
        n += x.shape[0]
    t = w.telemetry()
    w.close()
    assert n == t["samples"] == 120
    assert t["loop"]["batches"] == 8
    workers = [p for p in t["processes"] if p["role"] == "worker"]
    assert len(workers) == t["workers"] == 2
    for p in workers:
        ref = psutil.Process(p["pid"]).memory_full_info()
        assert p["pss"] > 0 and abs(p["rss"] - ref.rss) < 0.2 * ref.rss
    assert t["memory"]["total_pss"] == sum(p["pss"] for p in t["processes"])
    assert t["loop"]["data_wait_share"] is not None


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
