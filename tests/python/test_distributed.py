"""Data-parallel splitting, exact resume, shard indexes, convert and staging
(docs/distributed.md). The multi-process tests start 2 and 3 ranks with torchrun's variables and
a gloo group, with an all-reduce per step: unequal batch counts would hang them (the timeout
turns that into a failure)."""

import collections
import json
import os
import signal
import socket
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest
import torch

import loadscope as ls
from loadscope import _native, shards, stage

HERE = Path(__file__).resolve().parent
UNEVEN = [7, 30, 13, 45, 25]  # samples per shard: 120 in all, as the demo fixture


@pytest.fixture(scope="module")
def layouts(demo, tmp_path_factory):
    """The demo's 120 samples as a folder, a file list, plain tar shards of uneven sizes and the
    same shards with indexes."""
    rows = [json.loads(line) for line in (demo / "manifest.jsonl").read_text().splitlines()]
    assert len(rows) == sum(UNEVEN)
    base = tmp_path_factory.mktemp("layouts")
    tars, indexed = [], []
    for d, out in ((base / "tar", tars), (base / "indexed", indexed)):
        d.mkdir()
        start = 0
        for i, n in enumerate(UNEVEN):
            path = d / f"part-{i}.tar"
            with tarfile.open(path, "w") as tf:
                for r in rows[start:start + n]:
                    key = Path(r["path"]).stem
                    tf.add(demo / r["path"], arcname=f"{key}.jpg")
                    data = str(r["cls"]).encode()
                    info = tarfile.TarInfo(f"{key}.cls")
                    info.size = len(data)
                    tf.addfile(info, __import__("io").BytesIO(data))
            start += n
            out.append(str(path))
    shards.index(indexed)
    return {"folder": str(demo / "folder"), "manifest": str(demo / "manifest.jsonl"), "tars": tars,
            "indexed": indexed}


def make_source(layout, spec):
    if layout == "folder":
        return ls.Folder(spec["folder"])
    if layout == "list":
        return ls.FileList(spec["manifest"])
    return ls.WebDataset(spec["tars"] if layout == "tar" else spec["indexed"])


def padding(n, world):  # torch.utils.data.DistributedSampler's: total_size - n
    sampler = torch.utils.data.DistributedSampler(range(n), num_replicas=world, rank=0, shuffle=False)
    return sampler.total_size - n


def check_split(per_rank_epochs, reference_keys, world, drop_last=False):
    """per_rank_epochs[r][e] = list of batches (lists of keys) of rank r in epoch e."""
    n = len(reference_keys)
    for e in range(len(per_rank_epochs[0])):
        counts = {len(per_rank_epochs[r][e]) for r in range(world)}
        assert len(counts) == 1, f"epoch {e}: ranks got different batch counts {counts}"
        seen = collections.Counter(k for r in range(world) for b in per_rank_epochs[r][e] for k in b)
        if drop_last:
            assert max(seen.values()) == 1 and set(seen) <= set(reference_keys)
        else:
            assert set(seen) == set(reference_keys), "some samples were lost"
            assert sum(seen.values()) == n + padding(n, world)
            assert sum(c - 1 for c in seen.values()) == padding(n, world)
    if len(per_rank_epochs[0]) > 1:  # shuffled: another epoch, another split
        assert per_rank_epochs[0][0] != per_rank_epochs[0][1]


def reference(layout, spec):
    loader = ls.Loader(make_source(layout, spec), fields={"cls": ls.Int()}, batch_size=8, threads=1)
    return [k for b in loader for k in b["__key__"]]


# --- the epoch's geometry ---------------------------------------------------------------------

@pytest.mark.parametrize("world", [1, 2, 3, 8])
def test_padding_matches_distributed_sampler_and_counts_are_equal(world):
    for n in list(range(0, 40)) + [999, 1000, 1001]:
        for batch in (1, 4, 7):
            padded = torch.utils.data.DistributedSampler(range(n), num_replicas=world, rank=0, shuffle=False) \
                if n else None
            batches, length, pad, drawn, _ = _native.epoch_geometry(n, batch, world, False)
            assert batches % world == 0
            assert pad == padding(n, world) and length == n + pad
            if padded is not None:
                assert drawn == len(padded)  # DistributedSampler's num_samples, padding included
            # Per rank, the samples that are not padding: all of them once across the ranks.
            real = [_native.epoch_geometry(n, batch, world, False, r)[4] for r in range(world)]
            assert sum(real) == n
            batches_d, length_d, _, _, _ = _native.epoch_geometry(n, batch, world, True)
            assert length_d == n // (world * batch) * world * batch and batches_d % world == 0
            # "uneven" is DistributedSampler(drop_last=True), batched per rank as its DataLoader does.
            dropped = torch.utils.data.DistributedSampler(range(n), num_replicas=world, rank=0, shuffle=False,
                                                          drop_last=True) if n >= world else None
            batches_u, length_u, pad_u, drawn_u, real_u = _native.epoch_geometry(n, batch, world, "uneven")
            want = len(dropped) if dropped is not None else 0
            assert pad_u == 0 and drawn_u == real_u == want and length_u == want * world
            assert batches_u // world == len(torch.utils.data.BatchSampler(range(want), batch, drop_last=False))
    # one rank: DataLoader's batching
    assert _native.epoch_geometry(10, 4, 1, False)[:2] == (3, 10)
    assert _native.epoch_geometry(10, 4, 1, True)[:2] == (2, 8)
    assert _native.epoch_geometry(10, 4, 1, "uneven")[:2] == (3, 10)


# --- ranks in one process (explicit rank and world_size) ------------------------------------------

@pytest.mark.parametrize("layout", ["folder", "list", "tar", "indexed"])
@pytest.mark.parametrize("world", [2, 3])
def test_ranks_cover_the_epoch_once_with_equal_batch_counts(layouts, layout, world):
    ref = reference(layout, layouts)
    per_rank = []
    for r in range(world):
        loader = ls.Loader(make_source(layout, layouts), fields={"cls": ls.Int()}, batch_size=8, shuffle=True,
                           seed=5, threads=2, rank=r, world_size=world)
        epochs = []
        for e in range(2):
            loader.set_epoch(e)
            epochs.append([list(b["__key__"]) for b in loader])
        assert len(loader) == len(epochs[0])
        per_rank.append(epochs)
    check_split(per_rank, ref, world)


def test_drop_last_gives_whole_steps_only(layouts):
    ref = reference("list", layouts)
    per_rank = [[[list(b["__key__"]) for b in ls.Loader(ls.FileList(layouts["manifest"]), fields={"cls": ls.Int()},
                                                         batch_size=16, drop_last=True, rank=r, world_size=3)]]
                for r in range(3)]
    check_split(per_rank, ref, 3, drop_last=True)
    assert all(len(b) == 16 for p in per_rank for b in p[0])  # 120 // 48 = 2 steps of 3 x 16


def epoch_slots(layout, spec, world, part, drop_last=False, shuffle=True, fields=None, **source_kw):
    """Each rank's batches, as (keys, positions, field values) per batch."""
    out = []
    for r in range(world):
        source = ls.WebDataset(spec[layout], **source_kw) if source_kw else make_source(layout, spec)
        loader = ls.Loader(source, fields=fields or {"cls": ls.Int()}, batch_size=8,
                           shuffle=shuffle, seed=4, threads=2, rank=r, world_size=world, drop_last=drop_last,
                           partition=part)
        out.append([(list(b["__key__"]), b["__index__"].tolist(), {k: b[k] for k in loader.fields}) for b in loader])
    return out


@pytest.mark.parametrize("layout,shuffle,world", [("list", True, 2), ("indexed", True, 3), ("tar", False, 2),
                                                  ("list", True, 7)])  # 7: 6 padded samples, a short last row
@pytest.mark.parametrize("drop_last", [False, True, "uneven"])
def test_contiguous_ranks_take_their_own_stretch_of_the_same_epoch(layouts, layout, shuffle, world, drop_last):
    """Note [ranks reading contiguous blocks]: rank r's full batches are the r-th block of the
    epoch's full batches (interleave's batches, dealt differently), its last-row batch is the
    one interleave gives it, and every sample keeps its position and its random draws."""
    fields = {"jpg": ls.Image(24, crop="random_resized", flip=0.5), "cls": ls.Int()}
    inter = epoch_slots(layout, layouts, world, "interleave", drop_last, shuffle, fields)
    contig = epoch_slots(layout, layouts, world, "contiguous", drop_last, shuffle, fields)
    assert [len(r) for r in contig] == [len(r) for r in inter] and len({len(r) for r in inter}) == 1
    epoch = [inter[k % world][k // world] for k in range(world * len(inter[0]))]  # the epoch's batches in order
    full = sum(1 for _, pos, _ in epoch if len(pos) == 8) // world * world if drop_last != "uneven" else None
    if full is None:  # uneven: the full rows are those before the epoch's last row of short batches
        full = len(epoch) if len(epoch[-1][1]) == 8 else len(epoch) - world
    per = full // world
    for r in range(world):
        want = epoch[r * per:(r + 1) * per] + ([epoch[full + r]] if len(epoch) > full else [])
        assert [b[0] for b in contig[r]] == [b[0] for b in want], (r, [b[1][0] for b in contig[r]])
        for (_, pos, got), (_, pos_i, ref) in zip(contig[r], want):
            assert pos == pos_i
            assert torch.equal(got["jpg"], ref["jpg"]) and torch.equal(got["cls"], ref["cls"])


def test_a_map_that_draws_from_its_batch_sees_the_epochs_batch_under_both_partitions(layouts):
    """map= callables with wants_position (ls.mixup_cutmix) draw from (epoch, batch_index): the
    index is the epoch's batch, so the same batch gets the same draws whichever rank reads it."""
    def seen(part):
        got = {}

        def record(batch, *, epoch, batch_index):
            got[tuple(batch["__key__"])] = (epoch, batch_index)
            return batch
        record.wants_position = True
        for r in range(3):
            loader = ls.Loader(ls.FileList(layouts["manifest"]), fields={"cls": ls.Int()}, batch_size=8, shuffle=True,
                               seed=3, rank=r, world_size=3, partition=part, map=record)
            loader.set_epoch(2)
            for _ in loader:
                pass
        return got

    inter = seen("interleave")
    assert seen("contiguous") == inter and sorted(i for _, i in inter.values()) == list(range(15))


def test_contiguous_ranks_read_their_own_shards(layouts):
    """In shard order, interleaved ranks each read from (almost) every shard; contiguous ranks
    from their own stretch of them (two ranks share at most the shard at their boundary)."""
    def shards_read(part):
        return [{k.split(":")[0] for keys, _, _ in rank for k in keys}
                for rank in epoch_slots("indexed", layouts, 3, part, shuffle=False)]

    inter = shards_read("interleave")
    assert all(len(s) >= len(UNEVEN) - 1 for s in inter), inter  # the 7-sample shard is one batch
    contig = shards_read("contiguous")
    assert sum(len(s) for s in contig) <= len(UNEVEN) + 2, contig
    assert set().union(*contig) == set(layouts["indexed"])


def test_a_contiguous_step_mixes_more_shards_under_a_shard_shuffle(layouts):
    """Shard order plus a small shuffle buffer: interleaved ranks' step is W neighbouring
    batches (few shards); contiguous ranks' step is W batches from distant stretches."""
    def same_shard_pairs(part):
        ranks = epoch_slots("indexed", layouts, 3, part, shuffle=True, shuffle_buffer=16)
        shares = []
        for j in range(len(ranks[0])):
            step = collections.Counter(k.split(":")[0] for r in ranks for k in r[j][0])
            n = sum(step.values())
            shares.append(sum(c * (c - 1) for c in step.values()) / (n * (n - 1)))
        return sum(shares) / len(shares)

    inter, contig = same_shard_pairs("interleave"), same_shard_pairs("contiguous")
    print(f"same-shard pairs per step: interleave {inter:.3f}, contiguous {contig:.3f}")
    assert contig < 0.75 * inter, (contig, inter)


@pytest.mark.parametrize("part", ["interleave", "contiguous"])
def test_dataloader_workers_split_a_contiguous_ranks_share(layouts, part):
    kw = dict(fields={"cls": ls.Int()}, batch_size=8, rank=1, world_size=2, partition=part)
    mine = [list(b["__key__"]) for b in ls.Loader(ls.WebDataset(layouts["indexed"]), **kw)]
    dl = torch.utils.data.DataLoader(ls.Dataset(ls.WebDataset(layouts["indexed"]), **kw), batch_size=None,
                                     num_workers=2)
    assert [list(b["__key__"]) for b in dl] == mine


def test_partition_is_checked_and_kept_by_a_resume(layouts):
    src = ls.WebDataset(layouts["indexed"])
    with pytest.raises(ls.ConfigError, match="partition='blocks': allowed are 'interleave' .* and 'contiguous'"):
        ls.Loader(src, fields={"cls": ls.Int()}, batch_size=4, partition="blocks")

    def make(part, r=1):
        return ls.Loader(ls.WebDataset(layouts["indexed"]), fields={"cls": ls.Int()}, batch_size=4, shuffle=True,
                         seed=9, rank=r, world_size=3, partition=part)

    whole = [list(b["__key__"]) for b in make("contiguous")]
    a = make("contiguous")
    it = iter(a)
    head = [list(next(it)["__key__"]) for _ in range(3)]
    state = a.state_dict()
    assert state["partition"] == "contiguous"
    with pytest.raises(ls.ConfigError, match="partition: saved 'contiguous', here 'interleave'"):
        make("interleave").load_state_dict(state)
    b = make("contiguous")
    b.load_state_dict(state)
    assert head + [list(x["__key__"]) for x in b] == whole
    old = {k: v for k, v in make("interleave").state_dict().items() if k != "partition"}  # saved before partition
    make("interleave").load_state_dict(dict(old, batches=2))


@pytest.mark.parametrize("world", [2, 3])
def test_what_dataloader_code_reads_from_a_loader_under_ranks(layouts, world):
    """len(loader), len(loader.sampler), loader.dataset and drop_last='uneven', against what a
    DataLoader with DistributedSampler gives; padded samples are marked by __index__."""
    n = 113  # a prime: divides by neither the ranks nor ranks x batch
    ref = reference("list", layouts)[:n]
    manifest = Path(layouts["manifest"]).parent / "first113.jsonl"
    manifest.write_text("".join(Path(layouts["manifest"]).read_text().splitlines(keepends=True)[:n]))
    for drop_last in (False, "uneven"):
        sampler = torch.utils.data.DistributedSampler(range(n), num_replicas=world, rank=0, shuffle=False,
                                                      drop_last=drop_last == "uneven")
        real_seen = collections.Counter()
        for r in range(world):
            loader = ls.Loader(ls.FileList(manifest), fields={"cls": ls.Int()}, batch_size=8, drop_last=drop_last,
                               rank=r, world_size=world)
            assert len(loader.dataset) == n
            batches = list(loader)
            assert len(batches) == len(loader) == -(-len(sampler) // 8)  # the DataLoader's len over its sampler
            drawn = sum(len(b["__key__"]) for b in batches)
            assert drawn == len(sampler)  # padding included, as DistributedSampler's num_samples
            real = [k for b in batches for k, i in zip(b["__key__"], b["__index__"].tolist()) if i < len(loader.dataset)]
            assert len(real) == len(loader.sampler) and loader.sampler.padding == drawn - len(real)
            real_seen.update(real)
        if drop_last == "uneven":
            assert sum(real_seen.values()) == len(sampler) * world == n - n % world
            assert max(real_seen.values()) == 1 and set(real_seen) == set(ref[:n - n % world])  # the tail dropped
        else:
            assert real_seen == collections.Counter(ref)  # every sample exactly once, padding aside
    with pytest.raises(ls.ConfigError, match="'uneven'"):
        ls.Loader(ls.FileList(manifest), fields={"cls": ls.Int()}, batch_size=8, drop_last="partial")
    # The classic ImageNet script's remainder: the samples DistributedSampler(drop_last=True)
    # left out, evaluated on every rank through Subset(val_loader.dataset, ...) and a DataLoader.
    fields = {"jpg": ls.Image(32, crop="center", resize=36), "cls": ls.Int()}
    whole = [b for b in ls.Loader(ls.FileList(manifest), fields=fields, batch_size=8, output=("jpg", "cls"))]
    images, labels = torch.cat([b[0] for b in whole]), torch.cat([b[1] for b in whole])
    val = ls.Loader(ls.FileList(manifest), fields=fields, batch_size=8, output=("jpg", "cls"), drop_last="uneven",
                    rank=world - 1, world_size=world)
    rest = range(len(val.sampler) * world, len(val.dataset))
    aux = list(torch.utils.data.DataLoader(torch.utils.data.Subset(val.dataset, rest), batch_size=4))
    assert len(rest) == n % world and sum(len(b[1]) for b in aux) == len(rest)
    for k, (x, y) in zip(rest, [(x, y) for b in aux for x, y in zip(*b)]):
        assert torch.equal(x, images[k]) and y == labels[k]
    assert torch.equal(val.dataset[-1][0], images[-1]) and val.dataset[0][1] == labels[0]
    with pytest.raises(IndexError):
        val.dataset[n]
    folder = ls.Loader(ls.Folder(layouts["folder"]), fields={"cls": ls.Int()}, batch_size=8)
    assert folder.dataset.classes == folder.source.classes and len(folder.dataset.class_to_idx) > 1


def test_the_ranks_interleave_into_the_single_process_stream(layouts):
    """Batch k of the epoch goes to rank k % W: ranks in turn give the one-process order."""
    single = [list(b["__key__"]) for b in ls.Loader(ls.WebDataset(layouts["indexed"]), fields={"cls": ls.Int()},
                                                    batch_size=8, shuffle=True, seed=2)]
    ranks = [[list(b["__key__"]) for b in ls.Loader(ls.WebDataset(layouts["indexed"]), fields={"cls": ls.Int()},
                                                    batch_size=8, shuffle=True, seed=2, rank=r, world_size=3)]
             for r in range(3)]
    merged = [ranks[k % 3][k // 3] for k in range(len(single))]
    assert merged == single  # 120 = 15 batches of 8: no padding here


def test_dataloader_workers_split_a_ranks_share(layouts):
    mine = [list(b["__key__"]) for b in ls.Loader(ls.FileList(layouts["manifest"]), fields={"cls": ls.Int()},
                                                  batch_size=8, rank=1, world_size=2)]
    ds = ls.Dataset(ls.FileList(layouts["manifest"]), fields={"cls": ls.Int()}, batch_size=8, rank=1, world_size=2)
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    got = [list(b["__key__"]) for b in dl]
    assert got == mine and len(dl) == len(mine)


def test_rank_arguments_fail_early(layouts, monkeypatch):
    src = ls.FileList(layouts["manifest"])
    with pytest.raises(ls.ConfigError, match="give both rank and world_size"):
        ls.Loader(src, fields={"cls": ls.Int()}, batch_size=4, rank=1)
    with pytest.raises(ls.ConfigError, match="rank"):
        ls.Loader(src, fields={"cls": ls.Int()}, batch_size=4, rank=2, world_size=2)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    loader = ls.Loader(src, fields={"cls": ls.Int()}, batch_size=4)
    assert (loader.rank, loader.world_size, loader.rank_from) == (1, 2, "environment")
    with pytest.raises(ls.ConfigError, match="index='off'"):
        ls.Loader(ls.WebDataset(layouts["tars"], index="off"), fields={"cls": ls.Int()}, batch_size=4)


# --- several processes, torch.distributed with gloo ----------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(script: str, args: list, world: int, out: Path) -> list:
    """Runs tests/python/`script` as `world` ranks with torchrun's variables (each joins a gloo
    group), with `args` and then `out`; returns each rank's JSON from `out`.<rank>.json."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(world))
    procs = [subprocess.Popen([sys.executable, str(HERE / script), *args, str(out)],
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(world)]
    try:
        outs = [p.communicate(timeout=240)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert all(p.returncode == 0 for p in procs), "\n".join(outs)
    return [json.loads(Path(f"{out}.{r}.json").read_text()) for r in range(world)]


@pytest.mark.parametrize("world", [2, 3])
def test_gloo_ranks_split_every_layout_evenly(layouts, tmp_path, world):
    spec = dict(layouts, layouts=["folder", "list", "tar", "indexed"], batch_size=8)
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    results = run_ranks("_dist_worker.py", [str(tmp_path / "spec.json")], world, tmp_path / "out")
    for layout in spec["layouts"]:
        per_rank = [res["layouts"][layout]["epochs"] for res in results]
        check_split(per_rank, reference(layout, layouts), world)
        for res in results:
            info = res["layouts"][layout]
            assert info["world"] == world and info["from"] == "torch.distributed"
            assert info["len"] == len(info["epochs"][0])
            assert info["gather"]["ranks"] == list(range(world)) and 0 <= info["gather"]["straggler"] < world


def test_a_validate_under_two_ranks_gives_the_single_process_mean(layouts, tmp_path):
    """docs/recipes.md's validate(): 113 images over 2 ranks of batch 8 (so one padded sample):
    each rank sums the losses of its real samples, divides by len(sampler), the all-reduce
    adds the ranks up, and the mean is the one process's over the whole set."""
    manifest = Path(layouts["manifest"]).parent / "val113.jsonl"  # its paths are relative to the demo
    manifest.write_text("".join(Path(layouts["manifest"]).read_text().splitlines(keepends=True)[:113]))
    world = 2
    res = run_ranks("_dist_validate.py", [str(manifest)], world, tmp_path / "out")
    assert [r["world"] for r in res] == [world, world] and sum(r["sampler"] for r in res) == 113
    assert sum(r["padding"] for r in res) == padding(113, world) == 1 and res[0]["batches"] == res[1]["batches"]
    single = res[0]["single"]
    assert single > 0 and res[1]["single"] == single
    for r in res:
        assert r["ddp"] == pytest.approx(single, rel=1e-9)


def test_straggler_is_the_rank_that_waited_longest():
    from loadscope.telemetry import format_ranks

    ranks = [{"rank": r, "host": "h", "samples_per_s": 100.0, "wait_seconds": w, "data_wait_share": 0.1,
              "wait_p99": 0.01, "first_batch_last_epoch": 0.1} for r, w in enumerate([0.5, 4.0, 0.6])]
    straggler = ls.telemetry.ranks._straggler(ranks)
    assert straggler["rank"] == 1 and straggler["vs_median"] == pytest.approx(4.0 / 0.6)
    assert "straggler: rank 1" in format_ranks(ranks, straggler)


# --- exact resume -----------------------------------------------------------------------------

RESUME = textwrap.dedent("""
    import hashlib, json, os, signal, sys
    import loadscope as ls
    spec = json.loads(sys.argv[1])
    src = ls.WebDataset(spec["shards"]) if spec["layout"] != "list" else ls.FileList(spec["manifest"])
    loader = ls.Loader(src, fields={"jpg": ls.Image(32, flip=0.5)}, batch_size=8, shuffle=True, seed=11,
                       threads=spec["threads"])
    def digest(b):
        return hashlib.blake2b(b["jpg"].numpy().tobytes() + "|".join(b["__key__"]).encode(), digest_size=8).hexdigest()
    out = []
    if spec["mode"] == "first":  # run N batches, save the state, die
        it = iter(loader)
        for _ in range(spec["n"]):
            out.append(digest(next(it)))
        json.dump({"digests": out, "state": loader.state_dict()}, open(spec["path"], "w"))
        os.kill(os.getpid(), signal.SIGKILL)
    if spec["mode"] == "resume":
        loader.load_state_dict(json.load(open(spec["path"]))["state"])
    for epoch in range(2):  # the rest of the epoch, then the next one
        out += [digest(b) for b in loader]
        out.append("end of epoch")
        if spec["mode"] == "resume" and loader.telemetry().to_dict()["loop"]["first_batch_last_epoch"] is not None and epoch == 0:
            out.append("first batch after resume measured")
    json.dump(out, open(spec["path"] + "." + spec["mode"], "w"))
""")


@pytest.mark.parametrize("layout", ["list", "indexed", "tar"])
def test_resume_after_a_kill_continues_with_the_same_batches(layouts, tmp_path, layout):
    spec = {"layout": layout, "manifest": layouts["manifest"],
            "shards": layouts["indexed"] if layout == "indexed" else layouts["tars"], "path": str(tmp_path / "s.json")}

    def run(mode, threads, **kw):
        r = subprocess.run([sys.executable, "-c", RESUME, json.dumps(dict(spec, mode=mode, threads=threads, **kw))],
                           capture_output=True, text=True, timeout=120)
        return r

    whole = run("whole", 2)
    assert whole.returncode == 0, whole.stderr
    expected = json.loads(Path(spec["path"] + ".whole").read_text())
    killed = run("first", 2, n=6)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    first = json.loads(Path(spec["path"]).read_text())
    state = first["state"]
    assert state["epoch"] == 0 and state["batches"] == 6 and len(json.dumps(state)) < 400  # small
    resumed = run("resume", 1)  # another thread count
    assert resumed.returncode == 0, resumed.stderr
    got = json.loads(Path(spec["path"] + ".resume").read_text())
    assert "first batch after resume measured" in got
    got.remove("first batch after resume measured")
    assert first["digests"] + got == expected


def test_resume_state_is_checked(layouts):
    src = ls.FileList(layouts["manifest"])
    a = ls.Loader(src, fields={"cls": ls.Int()}, batch_size=8, shuffle=True, seed=1)
    it = iter(a)
    next(it)
    next(it)
    state = a.state_dict()
    assert (state["epoch"], state["batches"], state["version"]) == (0, 2, 1)
    b = ls.Loader(src, fields={"cls": ls.Int()}, batch_size=16, shuffle=True, seed=1)
    with pytest.raises(ls.ConfigError, match="batch_size: saved 8, here 16"):
        b.load_state_dict(state)
    with pytest.raises(ls.ConfigError, match="version"):
        a.load_state_dict(dict(state, version=99))
    c = ls.Loader(src, fields={"cls": ls.Int()}, batch_size=8, shuffle=True, seed=1, rank=0, world_size=2)
    with pytest.raises(ls.ConfigError, match="world size can resume only at an epoch boundary"):
        c.load_state_dict(state)
    c.load_state_dict(dict(state, batches=0, world_size=1))  # an epoch boundary: fine
    rest = [list(x["__key__"]) for x in it]
    d = ls.Loader(src, fields={"cls": ls.Int()}, batch_size=8, shuffle=True, seed=1)
    d.load_state_dict(state)
    assert [list(x["__key__"]) for x in d] == rest


# --- indexes, convert, staging ------------------------------------------------------------------

def test_index_reads_headers_like_tarfile_and_the_order_is_the_streams(layouts):
    ix = _native.index_shard(layouts["tars"][1])
    with tarfile.open(layouts["tars"][1]) as tf:
        members = [m for m in tf.getmembers() if m.isfile()]
    flat = [(f"{k}.{name}", off, size) for i, k in enumerate(ix.keys()) for name, off, size in ix.members(i)]
    assert flat == [(m.name, m.offset_data, m.size) for m in members]
    for shuffle in (False, True):
        a = [list(b["__key__"]) for b in ls.Loader(ls.WebDataset(layouts["tars"], index="off"), fields={"jpg": ls.Bytes()},
                                                   batch_size=8, shuffle=shuffle, seed=3)]
        b = [list(b["__key__"]) for b in ls.Loader(ls.WebDataset(layouts["tars"], index="scan"), fields={"jpg": ls.Bytes()},
                                                   batch_size=8, shuffle=shuffle, seed=3)]
        assert a == b


def test_bad_indexes_and_gzip_shards_fail_clearly(layouts, tmp_path):
    shard = tmp_path / "s.tar"
    shard.write_bytes(Path(layouts["tars"][0]).read_bytes())
    shards.index([str(shard)])
    with open(shard, "ab") as f:
        f.write(b"\0" * 512)
    with pytest.raises(ls.ConfigError, match="is stale"):
        ls.Loader(ls.WebDataset([str(shard)]), fields={"cls": ls.Int()}, batch_size=4)
    Path(str(shard) + ".idx").write_text("loadscope-tar-index 1\ntar_bytes 5\n")
    with pytest.raises(ls.ConfigError, match="s.tar.idx line 3: expected 'fingerprint HEX'"):
        ls.Loader(ls.WebDataset([str(shard)]), fields={"cls": ls.Int()}, batch_size=4)
    good = Path(str(shard) + ".idx")
    shards.index([str(shard)], force=True)
    head = good.read_text().splitlines()[:3]
    for body, words in ((["samples 1000000000000000", "a\tjpg\t0\t10"], "says 1000000000000000 samples, holds 1"),
                        (["samples 1", "a\tjpg\t200\t18446744073709551516"], "lies past the end")):
        good.write_text("\n".join(head + body) + "\n")
        with pytest.raises(ls.ConfigError, match=words):  # found by review: an allocation failure, an overflow
            ls.Loader(ls.WebDataset([str(shard)]), fields={"cls": ls.Int()}, batch_size=4)
    gz = tmp_path / "g.tar.gz"
    import gzip
    gz.write_bytes(gzip.compress(Path(layouts["tars"][0]).read_bytes()))
    with pytest.raises(ls.ConfigError, match="gzip-compressed, so it cannot be indexed"):
        ls.Loader(ls.WebDataset([str(gz)]), fields={"cls": ls.Int()}, batch_size=4, rank=0, world_size=2)
    with pytest.raises(ls.ReadError, match="gzip-compressed"):
        _native.index_shard(str(gz))
    cut = tmp_path / "cut.tar"
    cut.write_bytes(Path(layouts["tars"][0]).read_bytes()[:5000])
    with pytest.raises(ls.ReadError, match="truncated"):
        shards.index([str(cut)])


def test_convert_then_read_preserves_every_samples_bytes(layouts, tmp_path):
    src = ls.FileList(layouts["manifest"])
    r = shards.convert(src, str(tmp_path / "out"), shard_bytes=1 << 20, quiet=True)
    assert len(r["shards"]) > 2 and r["samples"] == 120
    assert all(os.path.exists(s + ".idx") for s in r["shards"])
    rows = [json.loads(line) for line in Path(layouts["manifest"]).read_text().splitlines()]
    got = [b for batch in ls.Loader(ls.WebDataset(r["shards"]), fields={"jpg": ls.Bytes(), "cls": ls.Int()},
                                    batch_size=16) for b in zip(batch["jpg"], batch["cls"].tolist())]
    assert len(got) == 120
    for row, (jpg, cls) in zip(rows, got):
        assert jpg == (Path(layouts["manifest"]).parent / row["path"]).read_bytes() and cls == row["cls"]
    with pytest.raises(ls.ConfigError, match="choose an empty directory"):
        shards.convert(src, str(tmp_path / "out"), quiet=True)


def test_staging_interrupted_and_restarted_ends_verified(layouts, tmp_path):
    src = Path(layouts["indexed"][0]).parent
    dst = tmp_path / "staged"
    seen = []

    def stop_after_three(rec):
        seen.append(rec)
        if len(seen) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        stage.stage(str(src), str(dst), threads=1, progress=stop_after_three)
    (dst / ("part-4.tar" + stage.PARTIAL)).write_bytes(b"half a copy")  # what a kill mid-file leaves
    again = stage.stage(str(src), str(dst), threads=2)
    # the interrupted run recorded what it finished (3, or 4 if the pool had started the next)
    assert 3 <= again["skipped"] <= 4 and again["copied"] == again["files"] - again["skipped"] and again["files"] == 10
    for f in src.iterdir():
        assert (dst / f.name).read_bytes() == f.read_bytes()
    with open(dst / "part-0.tar", "r+b") as f:  # damage a staged file: --verify finds it
        f.seek(600)
        f.write(b"XX")
    assert stage.stage(str(src), str(dst))["copied"] == 0
    fixed = stage.stage(str(src), str(dst), verify=True)
    assert fixed["copied"] == 1 and (dst / "part-0.tar").read_bytes() == (src / "part-0.tar").read_bytes()
    staged = ls.Loader(ls.WebDataset(sorted(str(p) for p in dst.glob("*.tar"))), fields={"cls": ls.Int()}, batch_size=8)
    assert sum(len(b["__key__"]) for b in staged) == 120  # the staged shards read through their indexes
    with pytest.raises(ls.ConfigError, match="inside the source"):
        stage.stage(str(src), str(src / "sub"))


def test_cli_index_convert_stage(layouts, tmp_path):
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "loadscope", *args], capture_output=True, text=True, timeout=120)

    r = cli("convert", layouts["manifest"], str(tmp_path / "c"), "--shard-size", "2MB")
    assert r.returncode == 0 and "120 samples" in r.stdout, r.stderr
    r = cli("index", str(tmp_path / "c" / "shard-{000000..000001}.tar"))
    assert r.returncode == 0 and "index current" in r.stdout, r.stderr
    r = cli("stage", str(tmp_path / "c"), str(tmp_path / "s"))
    assert r.returncode == 0 and "copied" in r.stdout, r.stderr
    r = cli("convert", str(tmp_path / "missing.jsonl"), str(tmp_path / "d"))
    assert r.returncode != 0 and "missing.jsonl" in r.stderr


def test_each_rank_resumes_its_own_share(layouts):
    def make(r):
        return ls.Loader(ls.WebDataset(layouts["indexed"]), fields={"cls": ls.Int()}, batch_size=4, shuffle=True,
                         seed=9, rank=r, world_size=3)

    for r in range(3):
        whole = [list(b["__key__"]) for b in make(r)]
        a = make(r)
        it = iter(a)
        head = [list(next(it)["__key__"]) for _ in range(4)]
        b = make(r)
        b.load_state_dict(a.state_dict())
        assert head + [list(x["__key__"]) for x in b] == whole


def test_padded_samples_are_marked_by_their_index(layouts):
    world = 7  # 120 = 17 * 7 + 1: DistributedSampler would pad 6
    idx = [i for r in range(world) for b in ls.Loader(ls.FileList(layouts["manifest"]), fields={"cls": ls.Int()},
                                                      batch_size=8, rank=r, world_size=world)
           for i in b["__index__"].tolist()]
    assert sorted(i for i in idx if i >= 120) == list(range(120, 126)) and padding(120, world) == 6
    assert sorted(i for i in idx if i < 120) == list(range(120))


# --- found by review ------------------------------------------------------------------------------

def _keys_of(loop):
    return [list(b["__key__"]) for b in loop]


@pytest.mark.parametrize("pattern", ["break", "set_epoch", "no_set_epoch", "inside"])
def test_checkpoint_kill_resume_equals_keep_running(layouts, pattern):
    """Note [state after a loop]: in each pattern training loops use, a loader made anew from
    the state saved at a checkpoint gives what the uninterrupted loader gives next."""
    def make():
        return ls.Loader(ls.FileList(layouts["manifest"]), fields={"cls": ls.Int()}, batch_size=8, shuffle=True,
                         seed=4)

    steps = 4  # of the 15 batches of an epoch

    def train_epoch(loader, epoch, save):
        """One epoch of the pattern; `save` is called where that loop checkpoints."""
        if pattern == "set_epoch":
            loader.set_epoch(epoch)
        got = []
        for step, b in enumerate(loader):
            got.append(list(b["__key__"]))
            if pattern == "inside" and epoch == 1 and step == 2:
                save()  # a checkpoint in the middle of an epoch
            if pattern != "no_set_epoch" and pattern != "inside" and step + 1 == steps:
                break
        if pattern != "inside":
            save()  # after the epoch's loop, as most loops do
        return got

    keep = make()
    uninterrupted = [train_epoch(keep, e, lambda: None) for e in range(4)]

    saved = {}
    first = make()
    for e in range(2):
        train_epoch(first, e, lambda e=e: saved.setdefault(e, first.state_dict()))
    state = saved[1]
    resumed = make()
    resumed.load_state_dict(state)
    if pattern == "inside":  # the rest of epoch 1, then epochs 2 and 3
        rest = train_epoch(resumed, 1, lambda: None)
        assert rest == uninterrupted[1][3:]
        assert (state["epoch"], state["batches"]) == (1, 3)
    else:  # epochs 2 and 3
        assert (state["epoch"], state["batches"]) == (2, 0)
    assert [train_epoch(resumed, e, lambda: None) for e in (2, 3)] == uninterrupted[2:]
    assert uninterrupted[2] != uninterrupted[3]  # epochs differ: the test can tell them apart


def test_state_follows_the_open_loop_and_a_closed_one_points_at_the_next_epoch(layouts):
    def make():
        return ls.Loader(ls.FileList(layouts["manifest"]), fields={"cls": ls.Int()}, batch_size=8, shuffle=True, seed=4)

    a = make()
    it = iter(a)
    for _ in range(5):
        next(it)
    assert (a.state_dict()["epoch"], a.state_dict()["batches"]) == (0, 5)  # open: the rest of epoch 0
    it.close()
    assert (a.state_dict()["epoch"], a.state_dict()["batches"]) == (1, 0)  # closed: the next epoch
    for _ in a:
        pass
    assert (a.state_dict()["epoch"], a.state_dict()["batches"]) == (2, 0)


def test_an_iterator_dropped_before_its_first_batch_gives_its_epoch_back(layouts):
    """Note [an iteration that gave nothing]: Lightning makes an iterator to check a loader and
    drops it; that must not cost an epoch (its epoch 0 would read the loader's epoch 1)."""
    def make():
        return ls.Loader(ls.FileList(layouts["manifest"]), fields={"cls": ls.Int()}, batch_size=8, shuffle=True, seed=4)

    whole = _keys_of(make())
    a = make()
    iter(a)  # made and dropped at once, as a framework's check does
    assert a.epoch == 0 and (a.state_dict()["epoch"], a.state_dict()["batches"]) == (0, 0)
    assert _keys_of(a) == whole  # epoch 0, not 1
    b = make()
    b.load_state_dict(dict(b.state_dict(), batches=3))
    it = iter(b)
    it.close()  # closed before a batch: the resume point stays
    assert (b.state_dict()["epoch"], b.state_dict()["batches"]) == (0, 3) and _keys_of(b) == whole[3:]
    c = make()
    for i, _ in enumerate(c):
        if i == 0:
            break  # a batch was handed out: the epoch is used (Note [state after a loop])
    assert c.epoch == 1


@pytest.mark.parametrize("n,world,batch", [(3, 8, 4), (5, 16, 2), (1, 3, 1)])
def test_fewer_samples_than_ranks_still_gives_every_rank_its_batches(tmp_path, n, world, batch):
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("".join(json.dumps({"path": f"x{i}.jpg", "cls": i}) + "\n" for i in range(n)))
    counts, seen = set(), collections.Counter()
    for r in range(world):
        loader = ls.Loader(ls.FileList(manifest), fields={"cls": ls.Int()}, batch_size=batch, rank=r, world_size=world)
        got = [b["cls"].tolist() for b in loader]
        counts.add(len(got))
        assert len(got) == len(loader)
        seen.update(c for b in got for c in b)
    assert counts == {1} and set(seen) == set(range(n)) and sum(seen.values()) == n + padding(n, world)


def test_resume_arguments_that_cannot_apply_are_refused_or_dropped(layouts, caplog):
    src = ls.FileList(layouts["manifest"])
    a = ls.Loader(src, fields={"cls": ls.Int()}, batch_size=8)
    with pytest.raises(ls.ConfigError, match=r"state\['batches'\] = 1000000, but an epoch has 15 batches"):
        a.load_state_dict(dict(a.state_dict(), batches=10**6))
    with pytest.raises(ls.ConfigError) as e:
        a.load_state_dict(dict(a.state_dict(), batches=3, seed=9))
    assert "world size" not in str(e.value)  # only the seed differs
    a.load_state_dict(dict(a.state_dict(), epoch=2, batches=3))
    a.set_epoch(2)  # the saved epoch: the resume point stays
    assert len(list(a)) == 12
    a.load_state_dict(dict(a.state_dict(), epoch=2, batches=3))
    a.set_epoch(5)  # another epoch: it starts from its beginning, and the log says why
    assert "resume point (batch 3) is dropped" in caplog.text
    assert len(list(a)) == 15


def test_straggler_with_two_ranks_and_without_telemetry():
    from loadscope.telemetry import format_ranks
    from loadscope.telemetry.ranks import _straggler

    two = [{"rank": 0, "wait_seconds": 1.0}, {"rank": 1, "wait_seconds": 3.0}]
    assert _straggler(two)["rank"] == 1 and _straggler(two)["vs_median"] == pytest.approx(1.5)
    off = [dict(r, telemetry=False, host="h", samples_per_s=None, data_wait_share=None, wait_p99=None,
                first_batch_last_epoch=None) for r in two]
    s = _straggler(off)
    assert s["rank"] is None and "none named (telemetry is off" in format_ranks(off, s)


def test_convert_and_stage_refuse_paths_that_would_corrupt_their_input(layouts, tmp_path):
    import shutil as sh

    folder = tmp_path / "f"
    sh.copytree(Path(layouts["folder"]), folder)
    with pytest.raises(ls.ConfigError, match="lies inside the folder it converts"):
        shards.convert(ls.Folder(folder), str(folder / "out"), quiet=True)
    link = tmp_path / "link"
    link.symlink_to(folder)
    with pytest.raises(ls.ConfigError, match="inside the source"):
        stage.stage(str(link), str(folder / "copy"))
    with pytest.raises(ls.ConfigError, match="is not a path inside"):
        stage.stage(str(folder), str(tmp_path / "s"), files=["cat/../../secret"])
    (folder / "notes.partial").write_text("a dataset file that happens to end in .partial")
    staged = stage.stage(str(folder), str(tmp_path / "s2"))
    assert (tmp_path / "s2" / "notes.partial").read_text().startswith("a dataset file")
    assert staged["files"] == sum(1 for p in folder.rglob("*") if p.is_file())
    r = subprocess.run([sys.executable, "-m", "loadscope", "convert", str(tmp_path / "nope"), str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "is not a folder or a .jsonl/.csv file list" in r.stderr
