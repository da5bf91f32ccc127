"""Batches made by loadscope workers on Ray (loadscope.ray.Workers): the same batches, byte for
byte, as the local loader's — random crops and ColorJitter, video clips, two trainer ranks on
one pool, two epochs, a mid-epoch resume in a new process that joins the running cluster — and
faults that lose nothing: a worker killed mid-epoch (its batches made again, counted), every
worker killed (a clear error after the pool's wait), a bad sample (on_error as locally). A real
Ray cluster, started here on this machine's cores."""

import inspect
import pickle
import subprocess
import sys
import time

import pytest

import loadscope as ls
from test_spec import batch_hash, batch_hashes as hashes  # one definition of what "the same batches" is

import ray  # requirements-dev.txt installs it: a missing Ray fails here, it is never skipped


@pytest.fixture(scope="module")
def cluster():
    # Four slots: two for the module's shared pool, two for a test's own (a fifth worker cannot
    # be placed while they live: the all-workers-lost test takes the freed ones away).
    ray.init(num_cpus=4, resources={"slot": 4}, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


def real_jpegs(real):
    return sorted(p for p in (real / "exif-orientation-examples").glob("*.jpg"))


def image_spec(real, repeat=1, **kw):
    files = ls.Files([(str(p), i % 3) for i, p in enumerate(real_jpegs(real) * repeat)])
    image = ls.Image(64, crop="random_resized", flip=0.5, color=ls.ColorJitter(0.4, 0.4, 0.4, 0.1))
    return ls.Spec(files, fields={"jpg": image, "cls": ls.Int()}, batch_size=3, shuffle=True, seed=7, **kw)


_pools = []
_shared = []


def pool(**kw):
    p = ls.ray.Workers(2, resources={"slot": 1}, **kw)
    _pools.append(p)
    return p


@pytest.fixture(scope="module")
def shared(cluster):
    """Two workers the tests that kill none share (starting workers is most of their time)."""
    p = ls.ray.Workers(2, resources={"slot": 1})
    _shared.append(p)
    yield p
    for a in p.actors():
        ray.kill(a)
    _shared.clear()


@pytest.fixture(autouse=True)
def end_pools():
    """Each test's workers end with it: the next one's are placed on the slots they held."""
    yield
    for p in _pools:
        for a in p.actors():
            ray.kill(a)
    _pools.clear()
    # Until every slot but the shared pool's is free again (Ray ends a killed actor soon after).
    held = sum(len(p.actors()) for p in _shared)
    if not ray.is_initialized():  # a test of its own cluster (emulated nodes)
        return
    deadline = time.monotonic() + 120  # a hang guard only
    while ray.available_resources().get("slot", 0) < 4 - held and time.monotonic() < deadline:
        time.sleep(0.1)


def test_two_workers_make_the_local_batches_of_random_crops_and_color_jitter(cluster, real):
    spec = image_spec(real)
    local = hashes(ls.Loader(spec))
    workers = pool()
    remote = ls.Loader(spec, workers=workers)
    assert len(remote) == len(ls.Loader(spec))
    assert hashes(remote) == local and len(local) == 2 * len(remote) and len(set(local)) == len(local)
    # Each worker made its share (batch j from worker j % 2), on its own process.
    pids = ray.get([a.where.remote() for a in workers.actors()])
    assert len({p["pid"] for p in pids}) == 2
    # Telemetry across the pool (this loader's use of it so far): what each worker made and
    # spent, what crossed to the trainer.
    snap = remote.telemetry()
    w = snap["workers"]
    assert (w["n"], w["alive"], w["lost"], w["remade_batches"]) == (2, 2, 0, 0)
    assert w["received_batches"] == 2 * len(remote) and w["received_samples"] == 2 * len(spec.source)
    assert w["bytes_per_sample"] == 64 * 64 * 3 + 8 + 8  # the image, cls and __index__: the batch's bytes
    shares = [2 * sum(1 for j in range(len(remote)) if j % 2 == i) for i in (0, 1)]  # batch j from worker j % 2
    assert [r["delivered_batches"] for r in w["per_worker"]] == shares
    assert all(r["made_samples"] > 0 and r["cpu_seconds"] > 0 and "decode" in r["stages"] for r in w["per_worker"])
    assert {r["pid"] for r in w["per_worker"]} == {p["pid"] for p in pids}
    assert w["wait_seconds"] + w["transfer_seconds"] > 0 and 0 < w["in_flight_mean"] <= w["in_flight_limit"]
    assert "workers (Ray): 2 of 2 alive on 1 node(s), 0 lost" in snap.summary()
    # Two trainer ranks sharing the pool: each gets its local rank's batches.
    for rank in (0, 1):
        assert hashes(ls.Loader(spec, rank=rank, world_size=2, workers=workers)) == \
            hashes(ls.Loader(spec, rank=rank, world_size=2))
    assert len(workers.actors()) == 2  # shared, not started again


def test_two_workers_make_the_local_video_clips(shared, real, tmp_path):
    videos = [real / "vision/test/assets/videos/SOX5yA1l24A.mp4", real / "vision/test/assets/videos/R6llTwEh07w.mp4"]
    files = ls.Files([(str(p), i) for i, p in enumerate(videos)] * 2, label="cls")
    spec = ls.Spec(files, fields={"mp4": ls.VideoClip(48, frames=4, stride=3, position="random"), "cls": ls.Int()},
                   batch_size=1, shuffle=True, seed=3)
    local = hashes(ls.Loader(spec))
    assert len(local) == 8
    remote = ls.Loader(spec, workers=shared)
    remote.start_trace(tmp_path / "trace.json")
    assert hashes(remote) == local
    # The trace has each worker's threads as rows of their own, on the trainer's clock: within
    # the trainer's training-loop spans (a round trip estimates each worker's clock).
    import json

    events = json.load(open(remote.stop_trace()))["traceEvents"]
    lanes = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "thread_name"}
    spans = [e for e in events if e.get("ph") == "X"]
    theirs = [e for e in spans if lanes[e["tid"]].startswith("worker ")]
    assert {lanes[e["tid"]].split(":")[0] for e in theirs} == {"worker 0", "worker 1"}
    loop = [e for e in spans if lanes[e["tid"]] == "training loop"]
    assert loop and min(e["ts"] for e in loop) - 50e3 <= min(e["ts"] for e in theirs)
    assert max(e["ts"] + e["dur"] for e in theirs) <= max(e["ts"] + e["dur"] for e in loop) + 50e3


# Joins the running cluster (RAY_ADDRESS), resumes from a saved state, and hashes the rest of
# that epoch and the next one.
CHILD = ("import hashlib, pickle, sys\nimport loadscope as ls\n" + inspect.getsource(batch_hash)
         + inspect.getsource(hashes)) + """
spec, state = pickle.load(open(sys.argv[1], "rb"))
loader = ls.Loader(spec, workers=ls.ray.Workers(2, resources={"slot": 1}))
loader.load_state_dict(state)
print("\\n".join(batch_hashes(loader, epochs=(state["epoch"], state["epoch"] + 1))))
"""


def test_a_mid_epoch_resume_in_a_new_process_continues_with_the_local_batches(cluster, shared, real, tmp_path):
    spec = image_spec(real)
    uninterrupted = hashes(ls.Loader(spec), epochs=(1, 2))
    remote = ls.Loader(spec, workers=shared)
    remote.set_epoch(1)
    it = iter(remote)
    for _ in range(2):
        next(it)
    state = remote.state_dict()
    assert state["epoch"] == 1 and state["batches"] == 2
    it.close()  # the child brings its own workers, on the two free slots
    (tmp_path / "job.pkl").write_bytes(pickle.dumps((spec, state)))
    r = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "job.pkl")], capture_output=True, text=True,
                       timeout=600, env={**__import__("os").environ, "RAY_ADDRESS": cluster})
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == uninterrupted[2:]


def test_a_worker_killed_mid_epoch_loses_nothing_and_its_batches_are_made_again(cluster, real):
    spec = image_spec(real, repeat=8, threads=1)  # 24 batches: the killed worker owes most of its share
    local = hashes(ls.Loader(spec), epochs=(0,))
    workers = pool(in_flight=1)
    loader = ls.Loader(spec, workers=workers)
    got = []
    for i, b in enumerate(loader):
        got.append(batch_hash(b))
        if i == 1:
            ray.kill(workers.actors()[1])
    assert got == local  # no gap, no duplicate, no reorder
    stats = loader.stats()
    assert stats["workers_lost"] == 1 and stats["remade_batches"] >= 1
    w = loader.telemetry()["workers"]
    assert (w["lost"], w["alive"], w["remade_batches"]) == (1, 1, stats["remade_batches"])
    assert "worker 1" in w["lost_notes"][0]
    assert [r["alive"] for r in w["per_worker"]] == [True, False]
    assert sum(r["delivered_samples"] for r in w["per_worker"]) == w["received_samples"] == len(spec.source)


@ray.remote(resources={"slot": 2}, num_cpus=0)
class Blocker:
    def ready(self):
        return True


def test_every_worker_lost_is_a_clear_error_after_the_pools_wait(shared, real):
    from loadscope._ray_pool import pool_state

    pool_state(shared).start()  # the shared pool holds two slots, whatever ran before
    # 12 batches: more than the 5 that can exist before the kill (the 1 taken, and n * in_flight
    # = 4 requested ahead); with 3, every one could arrive first and the epoch end without error.
    spec = image_spec(real, repeat=4)
    workers = pool(wait=10)  # time to start two workers (torch imported) on 2 busy cores, too
    it = iter(ls.Loader(spec, workers=workers))
    next(it)
    for a in workers.actors():
        ray.kill(a)
    # Their slots are taken before Ray could place new workers there (the shared pool holds
    # the other two).
    blocker = Blocker.remote()
    assert ray.get(blocker.ready.remote(), timeout=120)
    with pytest.raises(ls.ray.WorkersLost, match=r"every remote worker died and none could be placed again within "
                                                 r"wait=10 s; lost: worker \d"):
        for _ in it:
            pass
    ray.kill(blocker)


def test_a_bad_sample_on_a_worker_follows_on_error_as_locally(shared, real, tmp_path):
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(real_jpegs(real)[0].read_bytes()[:300])
    files = ls.Files([(str(p), 0) for p in real_jpegs(real)[:4]] + [(str(bad), 1)])
    spec = ls.Spec(files, fields={"jpg": ls.Image(32), "cls": ls.Int()}, batch_size=2)
    with pytest.raises(ls.DecodeError, match="broken.jpg"):
        for _ in ls.Loader(spec, workers=shared):
            pass
    skip = spec.replace(on_error="skip")
    remote = ls.Loader(skip, workers=shared)  # the same workers: a loader of another spec each
    assert hashes(remote, epochs=(0,)) == hashes(ls.Loader(skip), epochs=(0,))
    assert [s["key"] for s in remote.stats()["skipped"]] == [str(bad)]


def test_without_ray_the_error_names_the_extra(real):
    code = ("import sys; sys.modules['ray'] = None\nimport loadscope as ls\n"
            f"files = ls.Files([({str(real_jpegs(real)[0])!r}, 0)])\n"
            "try:\n    ls.Loader(files, fields={'jpg': ls.Image(32)}, batch_size=1, workers=ls.ray.Workers(2))\n"
            "except ls.ConfigError as e:\n    print(e)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "needs Ray: pip install 'loadscope[ray]'" in r.stdout, r.stderr


def test_workers_that_cannot_be_placed_are_a_clear_error_after_the_pools_wait(cluster, real):
    loader = ls.Loader(image_spec(real), workers=ls.ray.Workers(2, resources={"gpu-less-node": 1}, wait=2))
    with pytest.raises(ls.ray.WorkersLost, match=r"2 of 2 workers could not be placed within wait=2 s: each asks "
                                                 r"for \{'CPU': 1, 'gpu-less-node': 1\}; the cluster has free"):
        next(iter(loader))


def test_workers_arguments_are_checked_with_what_is_allowed():
    with pytest.raises(ls.ConfigError, match=r"Workers\(n=0\): an int >= 1"):
        ls.ray.Workers(0)
    with pytest.raises(ls.ConfigError, match="workers='ray': allowed are 'local', or loadscope.ray.Workers"):
        ls.Spec(ls.Files([("/x.jpg", 0)]), fields={"jpg": ls.Image(8)}, batch_size=1, workers="ray")


# On the trainer node of an emulated cluster: the batches through a pool of two workers, one
# per CPU node; after two, it waits until the test has killed a CPU node.
NODE_CHILD = ("import hashlib, json, pickle, sys\nimport loadscope as ls\n" + inspect.getsource(batch_hash)) + """
spec = pickle.load(open(sys.argv[1], "rb"))
workers = ls.ray.Workers(2, resources={"cpunode": 1}, in_flight=1)
loader = ls.Loader(spec, workers=workers)
got = []
for i, b in enumerate(loader):
    got.append(batch_hash(b))
    if i == 1:
        import ray
        print("PLACED", json.dumps([w["node"] for w in ray.get([a.where.remote() for a in workers.actors()])]), flush=True)
        sys.stdin.readline()
w = loader.telemetry()["workers"]
print("RESULT", json.dumps({"hashes": got, "stats": {k: loader.stats()[k] for k in ("workers_lost", "remade_batches")},
                  "lost": w["lost"], "alive": w["alive"], "notes": w["lost_notes"]}), flush=True)
"""


def running(pid):
    """A process that still runs (a zombie, waiting for its parent to reap it, runs no more)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="emulated nodes need root (CI runs as root)")
def test_a_cpu_node_killed_with_its_raylet_and_worker_loses_nothing(real, tmp_path):
    """Two emulated CPU nodes (namespaces, CPU quotas, a shaped link) and the trainer node, a
    real Ray cluster across them started by the harness's own code (bench/cluster.py); every
    process of one CPU node killed mid-epoch: the batches are still the local ones, each once,
    and nothing of the cluster is left afterwards."""
    import glob
    import json
    import os

    from loadscope.bench import cluster as cl
    from loadscope.bench import nodes

    spec = image_spec(real, repeat=6, threads=1)  # 22 batches
    local = hashes(ls.Loader(spec), epochs=(0,))
    (tmp_path / "spec.pkl").write_bytes(pickle.dumps(spec))
    config = {"cpu_nodes": 2, "ray_workers": 2, "ray_worker_cpus": 1, "node_cores": 0.5, "cpu_node_cores": 0.7,
              "link_mbit": 1000}
    with cl.Cluster(config, dict(os.environ)) as where:
        folder = where.folder
        errors = open(tmp_path / "child.err", "w+")  # a file, not a pipe: nothing to fill while the test reads stdout
        child = subprocess.Popen(where.command(0, [sys.executable, "-c", NODE_CHILD, str(tmp_path / "spec.pkl")]),
                                 env={**os.environ, **where.environ(0)}, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=errors, text=True)
        try:
            # Ray may print lines of its own (a lost node's warnings) beside the child's.
            line = ""
            for line in child.stdout:
                if line.startswith("PLACED "):
                    break
            placed = json.loads(line[len("PLACED "):]) if line.startswith("PLACED ") else None
            assert placed is not None and len(set(placed)) == 2, (tmp_path / "child.err").read_text()[-3000:]
            victims = where.quotas[2].pids()  # CPU node 2: its raylet, its worker, Ray's agents
            assert victims
            for pid in victims:
                os.kill(pid, 9)
            child.stdin.write("go\n")
            child.stdin.flush()
            out, _ = child.communicate(timeout=240)  # a hang guard only, inside pytest's own
        finally:
            if child.poll() is None:
                child.kill()
            errors.close()
        assert child.returncode == 0, (tmp_path / "child.err").read_text()[-3000:]
        result = next((x for x in out.splitlines() if x.startswith("RESULT ")), None)
        assert result, out[-3000:]
        got = json.loads(result[len("RESULT "):])
        assert got["hashes"] == local  # every batch once, in order, the local bytes
        assert got["stats"]["workers_lost"] == 1 and got["stats"]["remade_batches"] >= 1
        assert (got["lost"], got["alive"]) == (1, 1)
        every = [p for q in where.quotas for p in q.pids()]  # the head, the live CPU node
        assert every
    # Nothing left: namespaces, cgroups, Ray's folders, processes (this process's: another run's
    # may be alive beside it).
    mine = f"{nodes.PREFIX}{os.getpid()}-"
    assert not [n for n in nodes.ours() + cl.ours() if n.startswith(mine)] and not os.path.exists(folder)
    assert not glob.glob(f"/sys/fs/cgroup/cpuacct/{mine}*")
    assert not [p for p in victims + every if running(p)]
