"""Data-parallel training diagnosed: the all-reduce timed by a DDP communication hook, the step
taken apart per rank, gradient accumulation (a quarter of the all-reduces, the same gradients
as one joined batch), and ranks on emulated nodes whose link is a real, shaped network: the
measured all-reduce cannot beat what the link allows for the bytes the model's parameters
give, and nothing of the network is left behind."""

import json
import os
import subprocess

import pytest

from loadscope import ConfigError, bench
from loadscope.bench import nodes, scaling
from loadscope.bench.experiment import from_dict
from loadscope.telemetry.comm import summarize


def declared(demo, **over):
    raw = {"name": "scaling", "dataset": {"path": str(demo), "generate": False},
           "pipeline": {"batch_size": 8, "threads": 1},
           "step": {"compute": "model"}, "criteria": {"metric": "e2e_throughput"},
           "run": {"repetitions": 1, "samples": 32, "warmup_samples": 16, "check_samples": 16, "trace_batches": 0,
                   "warmup_round": False}}
    raw.update(over)
    return raw


def rows(out):
    return [json.loads(line) for line in open(out / "raw.jsonl")]


# --- the arithmetic, against hand-worked cases ---------------------------------------------

def test_a_backwards_buckets_give_busy_exposed_and_hidden_time():
    # bucket 1 handed over at 0 and done at 3; bucket 2 (the last, backward's compute done) at 2,
    # queued behind it, done at 5; a gap; nothing else. Busy: [0, 5]; exposed: 5 - 2.
    c = summarize([(0.0, 3.0, 100), (2.0, 5.0, 50)])
    assert (c.buckets, c.bytes, c.busy, c.exposed, c.hidden) == (2, 150, 5.0, 3.0, 2.0)
    c = summarize([(0.0, 1.0, 1), (2.0, 2.5, 1)])  # two disjoint all-reduces: busy is their union
    assert (c.busy, c.exposed) == (1.5, 0.5)
    assert summarize([]).buckets == 0


def test_the_slowest_ranks_lead_is_split_from_the_exposed_all_reduce():
    r0 = {"rank": 0, "e2e_seconds": 1.0, "step_parts": [
        {"samples": 4, "wait": 0.1, "h2d": 0.0, "compute": 0.5, "comm_exposed": 0.4, "allreduces": 1,
         "comm_bytes": 8, "comm_busy": 0.4, "last_ready": 10.0}]}
    r1 = {"rank": 1, "e2e_seconds": 1.0, "step_parts": [
        {"samples": 4, "wait": 0.1, "h2d": 0.0, "compute": 0.8, "comm_exposed": 0.1, "allreduces": 1,
         "comm_bytes": 8, "comm_busy": 0.1, "last_ready": 10.3}]}
    d = scaling.decompose([r0, r1])
    first, second = d["ranks"]
    assert first["parts"]["straggler_wait"] == pytest.approx(0.3) and first["parts"]["comm_exposed"] == pytest.approx(0.1)
    assert second["parts"]["straggler_wait"] == 0.0 and second["parts"]["comm_exposed"] == pytest.approx(0.1)
    assert d["sum"] == pytest.approx(1.0) and d["accounted"] == pytest.approx(1.0)
    # what backward() waited, the straggler's share included
    assert d["comm"]["exposed_per_step"] == pytest.approx((0.4 + 0.1) / 2)


def test_the_loss_split_adds_up_to_the_efficiency_lost():
    one = {"parts": {"wait": 0.1, "forward": 0.3, "backward": 0.4}, "per_rank_samples": 8}
    one["sum"] = sum(one["parts"].values())
    two = {"parts": {"wait": 0.2, "forward": 0.4, "backward": 0.5, "straggler_wait": 0.05, "comm_exposed": 0.25},
           "per_rank_samples": 8}
    two["sum"] = sum(two["parts"].values())
    loss = scaling._loss(two, one)
    efficiency = one["sum"] / two["sum"]  # weak scaling: the same per-rank batch
    assert sum(loss.values()) == pytest.approx(1 - efficiency)
    assert loss["comm_exposed"] == pytest.approx(0.25 / 1.4) and loss["data_wait"] == pytest.approx(0.1 / 1.4)


# --- declaring placement -------------------------------------------------------------------

@pytest.mark.parametrize("change, message", [
    ({"pipeline": {"world_size": 3, "nodes": 2}, "factor": {"name": "threads", "values": [1, 2]}},
     "world_size = 3 ranks do not spread evenly over nodes = 2"),
    ({"pipeline": {"world_size": 2, "link_mbit": 100}, "factor": {"name": "threads", "values": [1, 2]}},
     "no arm has nodes > 1"),
    ({"pipeline": {"world_size": 2, "nodes": 2, "storage": "remote"}, "factor": {"name": "threads", "values": [1, 2]},
      "dataset": {"path": "x", "url": "http://127.0.0.1:8080/p"}}, "through a forwarder to an s3:// endpoint"),
    ({"factor": {"name": "grad_accum", "values": [1, 2]}, "step": {"compute": "model", "grad_accum": 2}},
     r"\[step\] grad_accum is the factor"),
    ({"factor": {"name": "grad_accum", "values": [1, 2]}, "step": {"compute": "none"}},
     "compute = 'none' has none"),
    ({"factor": {"name": "threads", "values": [1, 2]}, "step": {"compute": "sleep", "compute_ms": 1, "model_mb": 4}},
     "model_mb sizes the built-in model"),
    ({"factor": {"name": "threads", "values": [1, 2]}, "step": {"compute": "sleep", "compute_ms": 1},
      "criteria": {"metric": "allreduces_per_sample"}}, "measured on a DDP model's all-reduce"),
])
def test_placement_and_accumulation_are_declared_consistently(demo, change, message):
    with pytest.raises(ConfigError, match=message):
        from_dict(declared(demo, **change))


def test_an_arm_of_world_size_may_say_on_how_many_nodes_and_nothing_else(demo):
    exp = from_dict(declared(demo, factor={"name": "world_size"},
                             arms=[{"world_size": 1}, {"world_size": 2, "nodes": 2}]))
    assert [(a.config["world_size"], a.config["nodes"]) for a in exp.arms] == [(1, 1), (2, 2)]
    with pytest.raises(ConfigError, match=r"sets batch_size: .* \(and in nodes, which say where the ranks run\)"):
        from_dict(declared(demo, factor={"name": "world_size"}, arms=[{"world_size": 1}, {"world_size": 2, "batch_size": 4}]))
    with pytest.raises(ConfigError, match="sets nodes: the arms may differ only in the declared factor 'threads';"):
        from_dict(declared(demo, pipeline={"world_size": 2}, factor={"name": "threads"},
                           arms=[{"threads": 1}, {"threads": 2, "nodes": 2}]))


def test_emulated_nodes_need_root_and_say_so(demo, tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    exp = from_dict(declared(demo, pipeline={"batch_size": 8, "threads": 1, "world_size": 2},
                             factor={"name": "nodes", "values": [1, 2]}))
    with pytest.raises(ConfigError, match="need root: network namespaces need CAP_SYS_ADMIN.*uid 1000"):
        bench.run(exp, str(tmp_path / "out"), quiet=True)
    assert not (tmp_path / "out").exists()  # refused before anything is written


# --- real ranks, a real network ------------------------------------------------------------

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="emulated nodes need root (CI runs as root)")


@needs_root
def test_namespaces_of_a_process_that_died_are_reaped():
    stale = f"{nodes.PREFIX}4999999-dead-n0"  # above any pid_max: no such process
    subprocess.run(["ip", "netns", "add", stale], check=True)
    try:
        assert stale in nodes.ours()
        nodes.reap()  # (or another test file's run beside, reaping as every run starts)
        assert stale not in nodes.ours()
    finally:
        subprocess.run(["ip", "netns", "del", stale], capture_output=True)


@needs_root
def test_scaling_onto_two_nodes_over_a_shaped_link(demo, tmp_path):
    link, model_mb = 20.0, 1.0
    exp = from_dict(declared(demo, pipeline={"batch_size": 8, "threads": 1, "link_mbit": link},
                             step={"compute": "model", "model_mb": model_mb}, factor={"name": "world_size"},
                             arms=[{"world_size": 1}, {"world_size": 2, "nodes": 2}]))
    summary = bench.run(exp, str(tmp_path / "out"), quiet=True)
    assert nodes.ours() == []  # every namespace (and its veths) removed
    assert summary["correctness"]["arms"]["world_size=2"]["ok"] is True
    two = [r for r in rows(tmp_path / "out") if r["arm"] == "world_size=2"]
    comm = two[0]["decomposition"]["comm"]
    from loadscope.bench.rep import _SmallCNN
    grad_bytes = sum(p.numel() * 4 for p in _SmallCNN(model_mb).parameters())
    # the head carries model_mb; the small CNN under it 23 KB more
    assert comm["bytes_per_step"] == grad_bytes and 0 < grad_bytes / 1e6 - model_mb < 0.03
    # Physics, not a speed threshold: a ring all-reduce of B bytes over W ranks sends
    # 2 (W - 1) / W x B through each rank's link, which cannot go faster than the link once
    # its token bucket, full after the pause between steps, has passed its share at once.
    floor = (2 * (2 - 1) / 2 * grad_bytes - nodes.bucket_bytes(link)) * 8 / (link * 1e6)
    assert floor > 0.25  # the bucket is a quarter of what crosses, not all of it
    assert comm["busy_per_step"] >= 0.95 * floor, (comm, floor)
    d = two[0]["decomposition"]
    assert d["accounted"] == pytest.approx(1.0, abs=0.05)  # the parts add up to the measured step
    sc = summary["scaling"]
    assert sc["reference"] == "world_size=1" and set(sc["arms"]["world_size=2"]["loss"]) == {
        "data_wait", "comm_exposed", "straggler_wait", "compute_inflation"}
    # the exposed all-reduce is most of what the second rank costs over a 20 Mbit/s link
    loss = sc["arms"]["world_size=2"]["loss"]
    assert loss["comm_exposed"] == max(loss.values())
    report = (tmp_path / "out" / "report.md").read_text()
    assert "### Scaling efficiency" in report and "scaling.png" in report
    topology = json.loads((tmp_path / "out" / "env.json").read_text())["topology"]
    assert topology == {"world_size=2": {"world_size": 2, "nodes": 2, "ranks_per_node": 1, "link_mbit": link, "link":
                                         "veth pairs to a bridge in network namespaces, tc tbf at 20 Mbit/s each way"}}
    assert "- world_size=2: 2 rank(s) on 2 node(s), 1 per node; veth pairs" in report
    assert (tmp_path / "out" / "plots" / "scaling.png").stat().st_size > 0


def test_accumulation_all_reduces_a_quarter_as_often_with_the_same_gradients(demo, tmp_path):
    exp = from_dict(declared(demo, pipeline={"batch_size": 4, "threads": 1, "world_size": 2},
                             factor={"name": "grad_accum", "values": [1, 4]}))
    summary = bench.run(exp, str(tmp_path / "out"), quiet=True)
    per = {r["arm"]: r["allreduces_per_sample"] for r in rows(tmp_path / "out")}
    assert per["grad_accum=4"] == pytest.approx(per["grad_accum=1"] / 4)
    grads = summary["correctness"]["gradients"]["grad_accum=4"]
    assert grads["ok"] is True and grads["micro_batches"] == 4, grads
    assert summary["global_batch"] == {"grad_accum=1": 8, "grad_accum=4": 32}


def test_strong_scaling_holds_the_global_batch(demo):
    exp = from_dict(declared(demo, pipeline={"batch_size": 16, "threads": 1},
                             factor={"name": "world_size", "values": [1, 2, 4], "scaling": "strong"}))
    assert [(a.config["world_size"], a.config["batch_size"]) for a in exp.arms] == [(1, 16), (2, 8), (4, 4)]
    assert {exp.global_batch(a.config) for a in exp.arms} == {16}
    with pytest.raises(ConfigError, match="over 3 ranks, which does not divide it"):
        from_dict(declared(demo, factor={"name": "world_size", "values": [1, 3], "scaling": "strong"}))
    with pytest.raises(ConfigError, match="scaling applies to the factor world_size"):
        from_dict(declared(demo, factor={"name": "threads", "values": [1, 2], "scaling": "strong"}))
    with pytest.raises(ConfigError, match="allowed are 'weak', 'strong'"):
        from_dict(declared(demo, factor={"name": "world_size", "values": [1, 2], "scaling": "linear"}))


@needs_root
def test_two_nodes_of_two_ranks_read_remote_shards_through_one_cache_per_node(demo, s3, tmp_path):
    from servers import put_bucket

    put_bucket(s3, "pernode")
    exp = from_dict(declared(demo, dataset={"path": str(demo), "generate": False, "url": "s3://pernode/demo"},
                             pipeline={"batch_size": 4, "threads": 1, "world_size": 4, "nodes": 2, "layout": "shards"},
                             step={"compute": "none"}, criteria={"metric": "throughput"},
                             factor={"name": "storage", "values": ["local", "remote-cache"]},
                             run={"repetitions": 1, "samples": 48, "warmup_samples": 8, "check_samples": 16,
                                  "trace_batches": 0, "warmup_round": False}))
    summary = bench.run(exp, str(tmp_path / "out"), quiet=True)
    assert [n for n in nodes.ours() if n.startswith(f"{nodes.PREFIX}{os.getpid()}-")] == []  # others' run beside
    # every rank's share, merged: the same samples, byte for byte, as the ranks reading local shards
    assert summary["correctness"]["arms"]["storage=remote-cache"]["ok"] is True
    cached = [r for r in rows(tmp_path / "out") if r["arm"] == "storage=remote-cache"][0]
    shard_bytes = sum(p.stat().st_size for p in (demo / "shards").iterdir() if p.suffix == ".tar")
    assert [n["node"] for n in cached["per_node"]] == [0, 1]
    for n in cached["per_node"]:
        assert [r["rank"] for r in n["ranks"]] == ([0, 1] if n["node"] == 0 else [2, 3])
        # Each node's cache holds the shards its ranks read (every rank touches every shard
        # here: batches of 4 interleave over shards of 25) and its ranks fetched each once.
        assert n["cache_bytes"] >= shard_bytes
        assert n["bytes"] <= 1.05 * n["cache_bytes"], n
    report = (tmp_path / "out" / "report.md").read_text()
    assert "node 0" in report and "node 1" in report


def test_emulated_nodes_forward_only_to_this_machines_loopback():
    assert nodes.loopback_endpoint("http://127.0.0.1:7480") == ("127.0.0.1", 7480)
    for url in ("https://s3.amazonaws.com", "http://10.0.0.5:7480", "http://minio.internal:9000"):
        with pytest.raises(ConfigError, match="loopback only"):
            nodes.loopback_endpoint(url)


@needs_root
def test_a_run_stopped_by_sigterm_leaves_no_namespace_and_no_rank(demo, tmp_path):
    import signal
    import sys
    import time

    raw = declared(demo, pipeline={"batch_size": 8, "threads": 1, "world_size": 2, "nodes": 2, "link_mbit": 1},
                   step={"compute": "model", "model_mb": 1}, factor={"name": "threads", "values": [1, 2]},
                   run={"repetitions": 2, "samples": 64, "warmup_samples": 16, "warmup_round": False})
    path = tmp_path / "slow.json"  # 1 MB all-reduces over 1 Mbit/s: 8 s a step, long enough to stop it mid-run
    path.write_text(json.dumps(raw))
    run = subprocess.Popen([sys.executable, "-m", "loadscope", "bench", "run", str(path), "--out", str(tmp_path / "out"),
                            "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 120  # only catches a hang: the namespaces appear within seconds
        while not [n for n in nodes.ours() if f"{nodes.PREFIX}{run.pid}-" in n]:
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()
            time.sleep(0.05)
        log = tmp_path / "out" / "logs" / "000.log"
        while "the end-to-end phase" not in (log.read_text() if log.exists() else ""):  # ranks mid-step
            assert run.poll() is None and time.monotonic() < deadline, run.communicate()
            time.sleep(0.05)
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        if run.poll() is None:
            run.kill()
    assert [n for n in nodes.ours() if f"{nodes.PREFIX}{run.pid}-" in n] == []
    ranks = subprocess.run(["pgrep", "-f", str(tmp_path / "out")], capture_output=True, text=True).stdout.split()
    assert ranks == []


@needs_root
def test_cpu_groups_left_by_a_process_that_died_are_reaped():
    from loadscope.bench import cluster

    if not os.path.isdir(cluster.CGROUP_CPU):
        pytest.skip("no cgroup v1 cpu controller here")
    name = f"{nodes.PREFIX}4999999-dead-n0"  # above any pid_max: a maker that no longer runs
    os.mkdir(os.path.join(cluster.CGROUP_CPU, name))
    mine = f"{nodes.PREFIX}{os.getpid()}-live-n0"  # this process's: kept
    os.mkdir(os.path.join(cluster.CGROUP_CPU, mine))
    try:
        cluster.reap()  # (or another test file's run beside, reaping as every run starts)
        assert not os.path.exists(os.path.join(cluster.CGROUP_CPU, name))
        assert os.path.isdir(os.path.join(cluster.CGROUP_CPU, mine))
    finally:
        for n in (name, mine):
            if os.path.isdir(os.path.join(cluster.CGROUP_CPU, n)):
                os.rmdir(os.path.join(cluster.CGROUP_CPU, n))
