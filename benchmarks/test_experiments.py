"""Every built-in experiment (benchmarks/experiments/*.toml) at a small size: it must be valid,
run to the end, pass its correctness checks and write its report, or be skipped with the
reason (CUDA experiments on machines without a GPU). Never a timing threshold: the figures of a
run this small mean nothing; `loadscope bench run` at the declared size is the benchmark.

    .venv/bin/python -m pytest benchmarks/ -q"""

import glob
import json
import os
from pathlib import Path

import pytest
import torch

from loadscope import bench, datasets

EXPERIMENTS = sorted(glob.glob(str(Path(__file__).parent / "experiments" / "*.toml")))


@pytest.fixture(scope="session")
def small_demo(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("demo") / "demo"
    datasets.generate(str(out), images=96, seed=0, shard_size=24, quiet=True, videos=0)
    return out


@pytest.fixture(scope="session")
def small_videos(tmp_path_factory) -> Path:
    """Four demo videos with soundtracks (the video and audio experiments' root)."""
    out = tmp_path_factory.mktemp("videos") / "demo"
    datasets.generate(str(out), images=1, seed=0, quiet=True, videos=4, video_shard_size=4, audio=True)
    return out


def test_every_experiment_is_listed():
    names = {Path(p).stem for p in EXPERIMENTS}
    assert {"loader", "threads", "prefetch", "batch_size", "pin_memory", "staging", "layout", "decode",
            "world_size", "peers", "storage", "remote-shards", "video", "audio", "remote-workers", "decode-video",
            "remote-workers-images"} <= names


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: Path(p).stem)
def test_experiment_runs_small_and_passes_its_checks(path, small_demo, tmp_path, request):
    exp = bench.load(path)
    dataset = dict(exp.raw.get("dataset", {}), path=str(small_demo), generate=False)
    if dataset.get("url"):  # object storage: the real S3 server of the tests, an empty bucket per experiment
        from servers import put_bucket

        put_bucket(request.getfixturevalue("s3"), exp.name)
        dataset["url"] = f"s3://{exp.name}/demo"
    raw = dict(exp.raw, dataset=dataset)
    if "root" in raw.get("pipeline", {}):  # video and audio: their factories read a folder of videos
        videos = str(request.getfixturevalue("small_videos"))
        raw.update(pipeline=dict(raw["pipeline"], root=videos), dataset={"path": videos})
    # No warm-up round: at this size it would only add a third to the run (the figures mean nothing).
    exp = bench.from_dict(raw, source=path)
    # Under CPU quotas (a trainer node of half a core decoding clips) a sample costs more: fewer.
    quota = any(a.config.get("node_cores") for a in exp.arms)
    exp = exp.with_overrides(repetitions=2, samples=16 if quota else 64, warmup_samples=8 if quota else 32,
                             check_samples=8 if quota else 16, trace_batches=2, warmup_round=False)
    summary = bench.run(exp, str(tmp_path / "out"), quiet=True)
    files = set(os.listdir(tmp_path / "out"))
    assert {"experiment.json", "summary.json", "report.md"} <= files
    if exp.needs_cuda() and not torch.cuda.is_available():
        assert summary["status"] == "skipped" and "needs CUDA" in summary["reason"]
        pytest.skip(summary["reason"])
    assert summary["status"] == "ok"
    assert {"env.json", "matrix.csv", "raw.jsonl", "plots"} <= files
    rows = [json.loads(line) for line in open(tmp_path / "out" / "raw.jsonl")]
    assert len([r for r in rows if not r["warmup"]]) == 2 * len(exp.arms)
    for arm, check in summary["correctness"]["arms"].items():
        assert check["ok"], f"{arm}: {check['detail']}"
    if exp.correctness_mode != "none":
        assert set(summary["correctness"]["arms"]) == {a.name for a in exp.arms[1:]}
    report = (tmp_path / "out" / "report.md").read_text()
    for arm, verdict in summary["verdicts"].items():
        assert f"**{arm}: {verdict['decision']}**" in report
    assert "## Hypotheses" in report and "experiment.effective.json" in report
    for arm in exp.arms[1:]:
        storage = arm.config.get("storage", "local")  # a user pipeline's config has neither key
        if arm.config.get("staging") == "local" or storage in ("remote-staged", "remote-cache"):
            st = summary["staging"][arm.name]  # the copy or the cache's first epoch is weighed
            assert st["staging_seconds"] > 0 and "break_even_epochs" in st
            assert "break-even after" in report
    for arm in exp.arms:  # what each arm fetched from object storage: in all, and while measured
        mine = [r for r in rows if r["arm"] == arm.name]
        storage = arm.config.get("storage", "local")
        if storage == "local":
            assert max(r["network_bytes_run"] for r in mine) == 0, arm.name
        else:
            assert min(r["network_bytes_run"] for r in mine) > 0, arm.name
        if storage in ("remote-cache", "remote-staged"):  # a warm cache or a copy: nothing
            assert max(r["network_bytes"] for r in mine) == 0, arm.name
        if storage == "remote-cache":
            fills = [r["staging"] for r in rows if r["arm"] == arm.name]
            assert all(f["kind"] == "cache" and f["bytes"] > 0 for f in fills)
    if any(a.config.get("storage", "local") != "local" for a in exp.arms):
        assert "object storage, measured phase" in report
    # Emulated nodes and Ray clusters are made for a repetition and gone after it.
    from loadscope.bench import cluster, nodes

    mine = f"{nodes.PREFIX}{os.getpid()}-"  # another experiment may run beside this one (make test-bench: -n 2)
    assert not [n for n in nodes.ours() + cluster.ours() if n.startswith(mine)]
    assert not glob.glob(f"/tmp/loadscope-ray-{os.getpid()}-*")
    for arm in exp.arms:
        if arm.config.get("ray_workers", 0) and arm.config.get("cpu_nodes"):
            b = summary["remote_bound"][arm.name]  # the bound predicted from the local arm, and the pool's share
            assert b["bound"] > 0 and b["share"] > 0 and b["trainer_cpu_share"] > 0
            assert f"capacity of the CPU nodes ({arm.name})" in report
            assert json.load(open(tmp_path / "out" / "env.json"))["topology"][arm.name]["cpu_nodes"] == arm.config["cpu_nodes"]
            quotas = [r["quotas"] for r in rows if r["arm"] == arm.name]
            assert all([q["cores"] for q in x] == [arm.config["node_cores"], arm.config["cpu_node_cores"]] for x in quotas)
