"""The framework recipes of docs/recipes.md, run as a user runs them, with 2 CPU ranks (gloo):
plain DDP and HF Accelerate under torchrun, PyTorch Lightning with its own DDP launcher. Each
rank writes the keys it trained on; every epoch must be split between the ranks with nothing
read twice (no double sharding) or left out, and the two epochs must differ (the epoch
advances)."""

import json
import subprocess
import sys
from pathlib import Path


RECIPES = Path(__file__).resolve().parents[2] / "examples" / "recipes"


def run(cmd, out):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)  # only catches a hang
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]


def check_split(ranks, samples, epochs=2):
    per_epoch = len(ranks[0]["keys"]) // epochs
    assert all(len(r["keys"]) == per_epoch * epochs for r in ranks)  # equal steps on every rank
    orders = []
    for e in range(epochs):
        seen = [[k for b in r["keys"][e * per_epoch:(e + 1) * per_epoch] for k in b] for r in ranks]
        assert not set(seen[0]) & set(seen[1])  # no sample on both ranks
        assert len(set(seen[0]) | set(seen[1])) == samples  # none left out
        orders.append(seen[0])
    if epochs > 1:
        assert orders[0] != orders[1]  # a new order each epoch


def torchrun(script, demo, out, *extra):
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
            str(RECIPES / script), "--data", str(demo / "folder"), "--out", str(out), *extra]


def test_plain_ddp_recipe(demo, tmp_path):
    ranks = run(torchrun("ddp.py", demo, tmp_path), tmp_path)
    assert [r["world"] for r in ranks] == [2, 2] and ranks[0]["batches"] == 8  # 120 samples / 2 ranks / 8
    assert all(r["trained"] for r in ranks)  # the optimizer moved the weights the loop used
    check_split(ranks, 120)


def test_accelerate_recipe_does_not_shard_twice(demo, tmp_path):
    import accelerate  # noqa: F401  (requirements-dev.txt installs it: a missing one fails here)
    ranks = run(torchrun("accelerate_train.py", demo, tmp_path), tmp_path)
    assert all(r["prepare_returned_it"] for r in ranks)  # prepare() leaves a loadscope Loader alone
    assert all(r["trained"] for r in ranks)
    check_split(ranks, 120, epochs=1)


def test_lightning_recipe_with_its_own_ddp_launcher(demo, tmp_path):
    import lightning  # noqa: F401  (requirements-dev.txt installs it)
    cmd = [sys.executable, str(RECIPES / "lightning_train.py"), "--data", str(demo / "folder"), "--out", str(tmp_path),
           "--devices", "2"]
    ranks = run(cmd, tmp_path)
    assert [r["world"] for r in ranks] == [2, 2]
    check_split(ranks, 120)
    # Lightning sets the epoch through loader.sampler.set_epoch before each epoch's iterator:
    # its epoch e is the loader's epoch e (not e + 1 after the iterator it makes and drops).
    import loadscope as ls
    for r in ranks:
        want = []
        for epoch in range(2):  # the recipe's loader (common.make_loader), this rank's share
            ref = ls.Loader(ls.Folder(demo / "folder"), fields={"cls": ls.Int()}, batch_size=8, shuffle=True, seed=0,
                            threads=1, rank=r["rank"], world_size=2)
            ref.set_epoch(epoch)
            want += [list(b["__key__"]) for b in ref]
        assert r["keys"] == want
