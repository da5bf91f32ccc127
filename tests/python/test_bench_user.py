"""The harness on the user's own pipeline (part 8): a throwaway training repository made here —
a map-style Dataset with torchvision transforms, DataLoader and loadscope factories, a model
step — run as experiment arms, as a baseline and through the pytest plugin.

References: the samples each arm must deliver are the demo dataset's files in ImageFolder order
(sorted paths); the bytes a pipeline reads are at least the files' sizes on disk; process
cleanup is checked in /proc, independently of the harness's own bookkeeping."""

import json
import os
import re
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from loadscope import ConfigError, bench
from loadscope.bench import stats, user
from loadscope.bench.experiment import from_dict

DATA = '''
import glob
import os
import time

import torch
import torchvision.transforms as T
from PIL import Image


class Images(torch.utils.data.Dataset):
    """What a training repo has: files in ImageFolder order, PIL, torchvision transforms."""

    def __init__(self, root, size=32, flip=False, reverse=False, delay=0.0):
        self.delay = delay
        self.paths = sorted(glob.glob(os.path.join(root, "folder", "*", "*.jpg")))
        if reverse:
            self.paths = self.paths[::-1]
        classes = sorted({os.path.basename(os.path.dirname(p)) for p in self.paths})
        self.labels = [classes.index(os.path.basename(os.path.dirname(p))) for p in self.paths]
        tf = [T.Resize(size), T.CenterCrop(size)] + ([T.RandomHorizontalFlip(1.0)] if flip else [])
        self.tf = T.Compose(tf + [T.PILToTensor()])

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        if self.delay:
            time.sleep(self.delay)
        with Image.open(self.paths[i]) as im:
            x = self.tf(im.convert("RGB"))
        return x, self.labels[i], os.path.basename(self.paths[i])


class Jittered(Images):
    """A random brightness from torch's global generator: in the main process with num_workers=0."""

    def __getitem__(self, i):
        x, y, name = super().__getitem__(i)
        return (x.float() * (0.8 + 0.4 * torch.rand(1))).clamp(0, 255).to(torch.uint8), y, name


def make_loader(root, batch_size=8, num_workers=0, pin_memory=False, prefetch_factor=2, persistent_workers=False,
                size=32, flip=False, reverse=False, distributed=False, shuffle=False, jitter=False, delay=0.0):
    ds = (Jittered if jitter else Images)(root, size, flip, reverse, delay)
    sampler = None
    if distributed and torch.distributed.is_initialized():
        sampler = torch.utils.data.distributed.DistributedSampler(ds, shuffle=False)
    kw = dict(prefetch_factor=prefetch_factor, persistent_workers=persistent_workers) if num_workers else {}
    return torch.utils.data.DataLoader(ds, batch_size=batch_size, num_workers=num_workers, pin_memory=pin_memory,
                                       sampler=sampler, shuffle=shuffle if sampler is None else None, **kw)


def make_dataset(root, **kw):
    """A mistake users make: the Dataset instead of a DataLoader over it."""
    return Images(root)


def none_ids(batch):
    return None


def make_other_loader(root, **kw):
    """A pipeline that yields other samples: the correctness check must catch it."""
    return make_loader(root, reverse=True, **kw)


class Tuples:
    """A loadscope Loader yielding (images, labels, names) like the DataLoader above."""

    def __init__(self, loader):
        self.loader = loader

    def set_epoch(self, e):
        self.loader.set_epoch(e)

    def __iter__(self):
        for b in self.loader:
            yield b["jpg"], b["cls"], [os.path.basename(k) for k in b["__key__"]]


def make_loadscope_loader(root, batch_size=8, num_workers=0, pin_memory=False, prefetch_factor=2,
                          persistent_workers=False, size=32, flip=False, reverse=False, distributed=False):
    import loadscope as ls

    image = ls.Image(size, crop="center", resize=size, flip=1.0 if flip else 0.0)
    return Tuples(ls.Loader(ls.Folder(os.path.join(root, "folder")), fields={"jpg": image, "cls": ls.Int()},
                            batch_size=batch_size, threads=max(1, num_workers), prefetch=prefetch_factor))


def ids(batch):
    return batch[2]


def exploding_factory(root, **kw):
    raise RuntimeError("factory exploded")


def exploding_ids(batch):
    raise KeyError("no ids here")
'''

TRAIN = '''
import os
import time

import torch


def build(ctx):
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                torch.nn.Flatten(), torch.nn.Linear(8, 10))
    if ctx.world_size > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    return {"model": model, "opt": torch.optim.SGD(model.parameters(), lr=0.01), "ctx": ctx, "steps": 0}


def step(state, batch):
    x, y = batch[0], batch[1]
    ctx = state["ctx"]
    loss = torch.nn.functional.cross_entropy(state["model"](x.float() / 255), y % 10) / ctx.grad_accum
    loss.backward()
    if ctx.boundary:
        state["opt"].step()
        state["opt"].zero_grad()
        state["steps"] += 1
    log = os.environ.get("MYTRAIN_STEP_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"{ctx.micro_step} {int(ctx.boundary)} {len(y)}\\n")


def exploding_step(state, batch):
    raise ValueError("step exploded")


def hanging_step(state, batch):
    time.sleep(3600)
'''


@pytest.fixture(scope="module")
def repo(training_repo) -> Path:
    return training_repo("trainrepo", "mytrain", {"data": DATA, "train": TRAIN,
                                                  "broken": "import no_such_module_anywhere\n"})


def experiment(repo, factor, values, **over):
    return from_dict(declared(repo, factor, values, **over))


def declared(repo, factor, values, **over):
    raw = {"name": "u", "training_repo": str(repo),
           "pipeline": {"factory": "mytrain.data:make_loader", "root": "data", "sample_ids": "mytrain.data:ids"},
           "factor": {"name": factor, "values": values},
           "run": {"repetitions": 2, "samples": 32, "warmup_samples": 8, "check_samples": 16, "trace_batches": 0,
                   "warmup_round": False, "timeout_s": 120.0}}
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(raw.get(k), dict):
            raw[k] = dict(raw[k], **v)
        else:
            raw[k] = v
    if factor == "factory":  # the factor's values are the factories
        del raw["pipeline"]["factory"]
    return raw


def first_names(demo, n):
    """The reference: the first n samples in ImageFolder order are the sorted paths."""
    import glob

    return [os.path.basename(p) for p in sorted(glob.glob(str(demo / "folder" / "*" / "*.jpg")))][:n]


# --- validation, before anything runs ----------------------------------------------------------

def test_a_factory_argument_it_does_not_take_is_refused_with_what_it_takes(repo, tmp_path):
    exp = experiment(repo, "num_workrs", [0, 2])
    with pytest.raises(ConfigError, match=r"arm num_workrs=0: \[pipeline\] factory = 'mytrain.data:make_loader' does "
                                          r"not take num_workrs; it accepts root, batch_size, num_workers"):
        bench.run(exp, str(tmp_path / "out"), quiet=True)


def test_an_import_error_in_user_code_names_the_key_and_shows_the_users_traceback(repo, tmp_path):
    exp = experiment(repo, "factory", ["mytrain.data:make_loader", "mytrain.broken:make"])
    with pytest.raises(ConfigError) as e:
        bench.run(exp, str(tmp_path / "out"), quiet=True)
    msg = str(e.value)
    assert "arm factory=make: [pipeline] factory = 'mytrain.broken:make': importing mytrain.broken failed" in msg
    assert "No module named 'no_such_module_anywhere'" in msg and "broken.py" in msg  # the user's traceback
    exp = experiment(repo, "factory", ["mytrain.data:make_loader", "mytrain.data:make_nothing"])
    with pytest.raises(ConfigError, match="mytrain.data has no 'make_nothing'; its callables are .*make_loadscope_loader"):
        bench.run(exp, str(tmp_path / "out2"), quiet=True)


@pytest.mark.parametrize("change, message", [
    ({"step": {"compute": "model"}}, "use your own step"),
    ({"step": {"setup": "mytrain.train:build"}}, "give function = 'package.module:step' too"),
    ({"step": {"function": "mytrain.train:step", "compute": "sleep", "compute_ms": 1}}, "cannot be combined"),
    ({"pipeline": {"factory": "mytrain.data:make_loader", "world_size": 0}}, r"world_size = 0: must be an integer >=1"),
    ({"dataset": {"path": "data", "generate": True}}, "only path"),
    ({"gate": "yes"}, "gate = 'yes': true or false"),
    ({"requires": ["tpu"]}, "requires = \\['tpu'\\]: a list of 'cuda'"),
])
def test_bad_user_experiments_fail_early(repo, change, message):
    with pytest.raises(ConfigError, match=message):
        experiment(repo, "num_workers", [0, 2], **change)
    with pytest.raises(ConfigError, match="say how to read batches and are not factors"):
        experiment(repo, "sample_ids", ["a:b", "c:d"])


def test_arms_may_set_how_to_read_their_batches_but_nothing_else(repo):
    raw = {"name": "u", "pipeline": {"root": "data"}, "factor": {"name": "factory"},
           "arms": [{"factory": "mytrain.data:make_loader", "sample_ids": "mytrain.data:ids"},
                    {"factory": "mytrain.data:make_loadscope_loader", "batch_size_of": "x:y"}]}
    exp = from_dict(raw)
    assert exp.user and exp.correctness_mode == "tolerance"
    assert exp.arms[1].config["batch_size_of"] == "x:y" and "sample_ids" not in exp.arms[1].config
    raw["arms"][1]["num_workers"] = 2
    with pytest.raises(ConfigError, match="sets num_workers: the arms may differ only in the declared factor 'factory'"):
        from_dict(raw)


def test_a_relative_training_repo_is_relative_to_the_experiment_file(repo):
    (repo / "experiments").mkdir(exist_ok=True)
    p = repo / "experiments" / "w.toml"
    p.write_text('name = "w"\ntraining_repo = ".."\n[pipeline]\nfactory = "mytrain.data:make_loader"\n'
                 '[factor]\nname = "num_workers"\nvalues = [0, 2]\n')
    exp = bench.load(str(p))
    assert exp.training_repo == str(repo) and exp.raw["training_repo"] == str(repo)  # absolute for the rerun file
    assert exp.factory_kwargs(exp.arms[1].config) == {"num_workers": 2}


def test_batches_of_any_shape_are_read_by_walking_them():
    import torch

    batch = {"img": torch.zeros(4, 3, 2, 2, dtype=torch.uint8), "meta": {"y": torch.arange(4)},
             "names": ["a", "b", "c", "d"], "stats": torch.zeros(7)}
    assert user.samples_in(batch) == 4
    got = user.leaves(batch, 4)
    assert [p for p, _ in got] == ["['img']", "['meta']['y']"]  # not the names, not a tensor of another length
    assert user.describe(got) == ["['img'] uint8 [3, 2, 2]", "['meta']['y'] int64 []"]
    other = {"img": batch["img"].clone(), "meta": {"y": torch.arange(4)}}
    other["img"][2, 0, 0, 0] = 1  # one pixel of sample 2
    sums = [user.sample_checksum(got, i) for i in range(4)]
    sums2 = [user.sample_checksum(user.leaves(other, 4), i) for i in range(4)]
    assert [a == b for a, b in zip(sums, sums2)] == [True, True, False, True]
    assert user.samples_in((torch.zeros(5, 2), [1, 2])) == 5 and user.default_ids({"__key__": ["k1", "k2"]}) == ["k1", "k2"]


# --- arms from the user's code --------------------------------------------------------------------

@pytest.mark.parametrize("factor, values, baseline", [
    ("num_workers", [0, 2], {}),
    ("prefetch_factor", [2, 4], {"num_workers": 1}),
    ("persistent_workers", [False, True], {"num_workers": 1}),
    ("pin_memory", [False, True], {}),  # without CUDA the DataLoader does not pin: same data either way
    ("batch_size", [8, 16], {}),
])
def test_every_dataloader_setting_can_be_the_factor_and_the_arms_agree(repo, demo, tmp_path, factor, values, baseline):
    # warm-up and measured samples in whole batches of every arm: the arms measure the same samples
    exp = experiment(repo, factor, values, pipeline=baseline, run={"warmup_samples": 16})
    assert exp.correctness_mode == "identical"
    if factor == "batch_size":  # a warm-up of 8 is one batch of 8 but a batch of 16: the arms measure other samples
        with pytest.raises(bench.ExperimentFailed, match="the arms' batches hold 8 and 16 samples, so .* must be multiples"):
            bench.run(experiment(repo, factor, values, run={"warmup_samples": 8}), str(tmp_path / "misaligned"), quiet=True)
    summary = bench.run(exp, str(tmp_path / "out"), quiet=True)
    arm = exp.arms[1].name
    check = summary["correctness"]["arms"][arm]
    assert check["ok"] is True and "identical" in check["detail"], check
    base = json.loads((tmp_path / "out" / "check" / f"{factor}_{str(values[0]).lower()}.json").read_text())
    assert base["ids"][:16] == first_names(demo, 16)  # the files, in ImageFolder order
    assert base["structure"] == ["[0] uint8 [3, 32, 32]", "[1] int64 []"]
    rows = [json.loads(line) for line in open(tmp_path / "out" / "raw.jsonl")]
    assert {r["arm"] for r in rows} == {a.name for a in exp.arms} and len(rows) == 4
    for r in rows:  # 32 samples in whole batches, as declared
        bs = exp.arms[[a.name for a in exp.arms].index(r["arm"])].config.get("batch_size", 8)
        assert r["batch_size"] == bs and r["samples"] == max(32, bs) and r["pipeline"]["dataloader"]
        assert r["pipeline"][factor] == dict(zip([a.name for a in exp.arms], values))[r["arm"]]


def test_a_users_own_transform_flag_changes_the_data_and_is_declared_so(repo, tmp_path):
    exp = experiment(repo, "flip", [False, True])
    assert exp.correctness_mode == "identical"
    with pytest.raises(bench.ExperimentFailed, match=r"flip=true: 16 of 16 samples differ in their tensors"):
        bench.run(exp, str(tmp_path / "lie"), quiet=True)  # the flip changes every sample: caught
    exp = experiment(repo, "flip", [False, True], correctness={"mode": "none"})
    summary = bench.run(exp, str(tmp_path / "out"), quiet=True)
    assert summary["status"] == "ok" and "changes the data by design" in summary["correctness"]["note"]


def test_the_swap_to_loadscope_with_the_users_step_checks_ids_and_pixels(repo, demo, tmp_path, monkeypatch):
    log = tmp_path / "steps.log"
    monkeypatch.setenv("MYTRAIN_STEP_LOG", str(log))
    exp = experiment(repo, "factory", ["mytrain.data:make_loader", "mytrain.data:make_loadscope_loader"],
                     pipeline={"num_workers": 2}, step={"setup": "mytrain.train:build", "function": "mytrain.train:step",
                                                       "grad_accum": 2})
    assert exp.step["compute"] == "user" and exp.correctness_mode == "tolerance"
    summary = bench.run(exp, str(tmp_path / "out"), quiet=True)
    check = summary["correctness"]["arms"]["factory=make_loadscope_loader"]
    assert check["ok"] is True and check["worst_mean_abs_diff"] <= 1.0, check
    assert "the measured phases read the same samples in every repetition" in check["detail"]
    for m in ("throughput", "e2e_throughput", "data_wait_share", "step_time_p50", "step_time_p99", "peak_pss"):
        assert summary["per_arm"]["factory=make_loadscope_loader"][m]["n"] == 2, m
    assert summary["global_batch"] == {"factory=make_loader": 16, "factory=make_loadscope_loader": 16}  # 8 x accum 2
    steps = [tuple(map(int, line.split())) for line in log.read_text().splitlines()]
    # every e2e phase: micro steps 1, 2, 3, ... with an optimizer step on every second one
    assert steps and all(b == (m % 2 == 0) for m, b, _ in steps) and {n for _, _, n in steps} == {8}
    report = (tmp_path / "out" / "report.md").read_text()
    assert "**pass**" in report and "setup mytrain.train:build, function mytrain.train:step" in report
    assert f"training repository: {repo}" in report
    # Part 23's capacity, per arm, from the repetitions' medians: the cores feeding the step at its
    # own rate (CPU per sample x batch / step time) against the node's; the bytes per sample
    # measured from a batch (what a link to remote workers would carry).
    rows = [json.loads(line) for line in open(tmp_path / "out" / "raw.jsonl")]
    usable = json.loads((tmp_path / "out" / "env.json").read_text())["cpu"]["usable_cpus"]
    for arm, cap in summary["capacity"].items():
        mine = [r for r in rows if r["arm"] == arm and not r["warmup"]]
        step_ms = stats.summarize([r["step_time_p50"] for r in mine])["median"]
        cpu_ms = stats.summarize([r["cpu_per_sample"] for r in mine])["median"]
        assert cap["step_rate"] == pytest.approx(8 / (step_ms / 1e3)) and cap["usable"] == usable
        assert cap["cores"] == pytest.approx(cpu_ms / 1e3 * cap["step_rate"])
        assert cap["bytes_per_sample"] == mine[0]["bytes_per_sample"] > 0
        assert f"capacity ({arm}): the step alone takes" in report
    assert set(summary["capacity"]) == {"factory=make_loader", "factory=make_loadscope_loader"}


def test_a_factory_that_yields_other_samples_fails_correctness_loudly(repo, demo, tmp_path):
    exp = experiment(repo, "factory", ["mytrain.data:make_loader", "mytrain.data:make_other_loader"])
    first = sorted(first_names(demo, 16))[0]  # the baseline's first samples are missing from the other arm
    with pytest.raises(bench.ExperimentFailed, match=r"correctness check failed: factory=make_other_loader: "
                                                     rf"different samples: missing \['{first}'"):
        bench.run(exp, str(tmp_path / "out"), quiet=True)
    report = (tmp_path / "out" / "report.md").read_text()
    assert "**FAIL**" in report and "factory=make_other_loader: invalid" in report


def test_without_sample_ids_the_report_says_in_bold_that_correctness_was_not_checked(repo, tmp_path):
    raw = declared(repo, "num_workers", [0, 1])
    del raw["pipeline"]["sample_ids"]
    summary = bench.run(from_dict(raw), str(tmp_path / "out"), quiet=True)
    check = summary["correctness"]["arms"]["num_workers=1"]
    assert check["ok"] is None and "NOT checked" in check["detail"]
    report = (tmp_path / "out" / "report.md").read_text()
    assert "**Correctness was NOT checked** for num_workers=1" in report and "**NOT CHECKED**" in report
    assert any("NOT checked" in r for r in summary["verdicts"]["num_workers=1"]["reasons"])


def test_world_size_is_a_factor_of_the_users_ddp_pipeline(repo, tmp_path):
    # warm-up and measured counts in whole global batches of both arms (8 x 2): the same samples
    exp = experiment(repo, "world_size", [1, 2], pipeline={"distributed": True}, run={"warmup_samples": 16},
                     step={"setup": "mytrain.train:build", "function": "mytrain.train:step"})
    assert exp.correctness_mode == "same-samples"  # a DistributedSampler interleaves samples, not batches
    summary = bench.run(exp, str(tmp_path / "out"), quiet=True)
    check = summary["correctness"]["arms"]["world_size=2"]
    assert check["ok"] is True, check
    rows = [json.loads(line) for line in open(tmp_path / "out" / "raw.jsonl")]
    two = [r for r in rows if r["arm"] == "world_size=2"]
    assert all(len(r["ranks"]) == 2 and r["samples"] == 32 for r in two)  # two ranks of 16
    # The DDP model in the user's state has its all-reduce timed: every bucket of the gradient,
    # whose size the model's parameters give (Conv2d(3, 8, 3): 8*27 + 8; Linear(8, 10): 90).
    comms = [r["decomposition"]["comm"] for r in two]
    assert comms and all(c["bytes_per_step"] == (8 * 27 + 8 + 90) * 4 for c in comms)
    assert all(r["decomposition"]["parts"].keys() >= {"wait", "compute", "comm_exposed", "straggler_wait"} for r in two)
    assert "| step compute |" in (tmp_path / "out" / "report.md").read_text()


# --- errors in user code ------------------------------------------------------------------------

def _marked_processes(mark):
    """Live processes whose environment carries `mark` (the runner's children and their workers).
    A killed process whose parent died first stays a zombie until init reaps it: it runs no
    more, holds no memory, and is not counted."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                if mark.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return [p for p in found if p != os.getpid()]


@pytest.mark.parametrize("factor, values, change, arm, message", [
    ("factory", ["mytrain.data:exploding_factory", "mytrain.data:make_loader"], {},
     "factory=exploding_factory", "RuntimeError: factory exploded"),
    ("num_workers", [2, 0], {"step": {"function": "mytrain.train:exploding_step"}, "pipeline": {"persistent_workers": True}},
     "num_workers=2", "ValueError: step exploded"),
    ("num_workers", [2, 0], {"pipeline": {"sample_ids": "mytrain.data:exploding_ids"}}, "num_workers=2",
     "KeyError: 'no ids here'"),
    ("num_workers", [2, 0], {"pipeline": {"sample_ids": "mytrain.data:none_ids"}}, "num_workers=2",
     "mytrain.data:none_ids returned None, not one id per sample of the batch"),
    ("factory", ["mytrain.data:make_dataset", "mytrain.data:make_loader"], {}, "factory=make_dataset",
     "returned an object of type Images, not an iterable of batches: a map-style Dataset yields samples by index; "
     "return a DataLoader over it"),
])
def test_an_exception_in_user_code_names_the_arm_and_repetition_with_the_users_traceback(repo, tmp_path, monkeypatch, factor,
                                                                                         values, change, arm, message):
    mark = f"LOADSCOPE_TEST_{uuid.uuid4().hex}"
    monkeypatch.setenv(mark, "1")
    exp = experiment(repo, factor, values, **change)
    with pytest.raises(bench.ExperimentFailed) as e:
        bench.run(exp, str(tmp_path / "out"), quiet=True)
    msg = str(e.value)
    assert f"run 000 ({arm}, round 0) failed" in msg and message in msg
    if "returned" not in message:  # an exception in the user's code: the user's frames, not the harness's
        assert "Traceback of your code" in msg and "mytrain/" in msg and "loadscope/bench" not in msg
    else:  # a value the harness cannot use: the message alone
        assert "Traceback" not in msg
    assert _marked_processes(mark) == []  # no repetition, no DataLoader worker left behind


def test_a_hanging_step_is_stopped_with_its_dataloader_workers(repo, tmp_path, monkeypatch):
    mark = f"LOADSCOPE_TEST_{uuid.uuid4().hex}"
    monkeypatch.setenv(mark, "1")
    exp = experiment(repo, "num_workers", [2, 1], pipeline={"persistent_workers": True},
                     step={"function": "mytrain.train:hanging_step"}, run={"timeout_s": 20.0, "warmup_round": True})
    with pytest.raises(bench.ExperimentFailed, match=r"run 000 \(num_workers=2, warm-up round\) failed") as e:
        bench.run(exp, str(tmp_path / "out"), quiet=True)
    msg = str(e.value)
    # where it hung: the phase, and the stacks of its threads (the user's step among them)
    assert "timed out after 20 s, in the end-to-end phase (next() and the step)" in msg
    assert "hanging_step" in msg and "train.py" in msg
    assert _marked_processes(mark) == []


# --- the baseline -------------------------------------------------------------------------------

def test_bench_baseline_diagnoses_the_pipeline_as_it_is(repo, demo, tmp_path):
    out = tmp_path / "base"
    r = subprocess.run([sys.executable, "-m", "loadscope", "bench", "baseline", "mytrain.data:make_loader",
                        "--arg", "root=data", "--arg", "num_workers=2", "--step", "mytrain.train:step",
                        "--setup", "mytrain.train:build", "--repo", str(repo), "--data", str(repo / "data"),
                        "--samples", "64", "--warmup-samples", "16", "--repetitions", "2", "--out", str(out), "--quiet"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    text = (out / "diagnosis.md").read_text()
    assert text == r.stdout.lstrip("\n")  # printed as written
    for figure in ("| throughput |", "| e2e_throughput |", "| data_wait_share |", "| step_time_p50 |", "| step_time_p99 |",
                   "| step_time_max |", "| first_batch |", "| new_epoch_first_batch |", "| flipped_new_epoch_first_batch |",
                   "| cpu_per_sample |", "| cores_used |", "| read_mb_per_s |", "| storage_mb_per_s |", "| peak_pss |",
                   "| main |", "| worker |", "VmHWM", "## Environment", "## Hypotheses (not measured conclusions)",
                   "## Next experiment", "training repository: " + str(repo), "persistent_workers=False"):
        assert figure in text, figure
    assert "DataLoader: num_workers=2, batch_size=8, pin_memory=False, prefetch_factor=2, persistent_workers=False" in text
    b = json.loads((out / "baseline.json").read_text())
    o = b["observed"]
    assert o["batch_size"] == 8 and o["persistent_workers"] is False
    rows = [json.loads(line) for line in open(out / "raw.jsonl")]
    assert all(r["restart"]["flipped"]["persistent_workers"] is True for r in rows)
    assert all(len(r["restart"]["new_epoch_first_batch"]) == 2 for r in rows)
    # Bytes read: at least the files the measured phase must have opened (16 warm-up samples and up to
    # 2 workers x 2 batches of prefetch before it: samples 48..79 at the least), from the files on disk.
    sizes = [os.path.getsize(p) for p in sorted((demo / "folder").glob("*/*.jpg"))]
    assert all(r["read_chars"] >= sum(sizes[48:80]) for r in rows)
    workers = [p for p in rows[0]["processes"] if p["role"] == "worker"]
    assert len(workers) >= 2 and all(p["pss_peak"] > 0 for p in workers)
    nxt = bench.load(str(out / "next-experiment.toml"))  # a valid experiment the user can run
    assert nxt.user and nxt.training_repo == str(repo) and nxt.arms[0].config["root"] == "data"


def test_bench_baseline_refuses_what_the_factory_cannot_take(repo, tmp_path):
    r = subprocess.run([sys.executable, "-m", "loadscope", "bench", "baseline", "mytrain.data:make_loader", "--arg",
                        "root=data", "--arg", "workers=2", "--repo", str(repo), "--out", str(tmp_path / "b")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "does not take workers; it accepts root" in r.stderr


# --- the pytest plugin --------------------------------------------------------------------------

def test_the_pytest_plugin_collects_runs_and_gates_experiments(repo, tmp_path):
    exps = repo / "experiments"
    exps.mkdir(exist_ok=True)
    for p in exps.glob("*.toml"):
        p.unlink()
    head = ('training_repo = ".."\n[pipeline]\nroot = "data"\nsample_ids = "mytrain.data:ids"\n'
            '[run]\nrepetitions = 2\nsamples = 32\nwarmup_samples = 8\ncheck_samples = 16\n')
    (exps / "workers.toml").write_text('name = "workers"\n' + head.replace("[pipeline]\n", '[pipeline]\nfactory = "mytrain.data:make_loader"\n')
                                       + '[factor]\nname = "num_workers"\nvalues = [0, 1]\n[criteria]\nmin_gain = -0.9\n')
    user = head.replace("[pipeline]\n", '[pipeline]\nfactory = "mytrain.data:make_loader"\n')
    # A confident roll back: 20 ms more per sample, by an interval that excludes the bound (0).
    # Three repetitions (the small run's most): with two, one noisy repetition of the fast arm
    # widened the interval (t = 12.7 at 1 degree of freedom) past the bound in a CI run.
    (exps / "slower.toml").write_text('name = "slower"\ngate = true\n' + user.replace("repetitions = 2", "repetitions = 3")
                                      + '[factor]\nname = "delay"\nvalues = [0.0, 0.02]\n[criteria]\nmin_gain = 0.0\n')
    # A/A: the intervals decide nothing (at 99.9%, a spurious decision is a 1-in-1000 event).
    (exps / "undecided.toml").write_text('name = "undecided"\ngate = true\n' + user + '[factor]\nname = "num_workers"\n'
                                         'values = [0, 0]\n[criteria]\nmin_gain = 0.0\nconfidence = 0.999\n'
                                         'max_regression = {}\n')
    # A baseline's suggestion lies among the harness's output: never collected.
    suggested = repo / "results" / "baseline" / "20261204-000000"
    suggested.mkdir(parents=True, exist_ok=True)
    (suggested / "next-experiment.toml").write_text((exps / "slower.toml").read_text().replace('"slower"', '"suggested"')
                                                    .replace('training_repo = ".."', f'training_repo = "{repo}"'))
    (exps / "other.toml").write_text('name = "other"\ngate = true\n' + head + '[factor]\nname = "factory"\n'
                                     'values = ["mytrain.data:make_loader", "mytrain.data:make_other_loader"]\n')
    (exps / "typo.toml").write_text('name = "typo"\n[pipeline]\nfactory = "mytrain.data:make_loader"\n[factr]\n')
    (repo / "pyproject.toml").write_text('[project]\nname = "mytrain"\n')  # no experiment: not collected
    (repo / "test_fixture.py").write_text(textwrap.dedent('''
        def test_written_in_python(loadscope_experiment):
            s = loadscope_experiment({"name": "py", "training_repo": ".",
                                      "pipeline": {"factory": "mytrain.data:make_loader", "root": "data",
                                                   "sample_ids": "mytrain.data:ids"},
                                      "factor": {"name": "batch_size", "values": [8, 16]},
                                      "run": {"repetitions": 2, "samples": 32, "warmup_samples": 16}})
            assert s["correctness"]["arms"]["batch_size=16"]["ok"] is True
    '''))
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA"],
                       cwd=repo, capture_output=True, text=True, timeout=900)
    out = r.stdout
    assert r.returncode == 1, out
    # Not gated: these pass whatever their verdict, counted as inconclusive when it is.
    workers = re.search(r"workers \(small\): num_workers=1 vs num_workers=0: (ADOPT|ROLL BACK|INCONCLUSIVE)", out)
    fixture = re.search(r"py \(small\): batch_size=16 vs batch_size=8: (ADOPT|ROLL BACK|INCONCLUSIVE)", out)
    assert workers and fixture, out
    assert "FAILED experiments/workers.toml" not in out and "FAILED test_fixture.py" not in out
    assert ("PASSED test_fixture.py::test_written_in_python" in out) == (fixture.group(1) != "INCONCLUSIVE")
    undecided = 1 + (workers.group(1) == "INCONCLUSIVE") + (fixture.group(1) == "INCONCLUSIVE")
    assert "FAILED experiments/slower.toml::slower" in out
    assert "experiment slower (gate = true, small run): delay=0.02: roll back: throughput: worse" in out
    assert "FAILED experiments/other.toml::other" in out and "different samples" in out
    assert "FAILED experiments/typo.toml::typo" in out and "unknown key(s) factr" in out
    # Gated but inconclusive: passes, counted and reported as such, with what would decide it.
    assert "FAILED experiments/undecided.toml" not in out
    # With what would decide it: a number, or (an interval too wide to scale, on a busy machine) a
    # statement that there is none.
    assert re.search(r"undecided \(small\): num_workers=0 \(B\) vs num_workers=0: INCONCLUSIVE \((about \d+ repetitions "
                     r"would decide it|too noisy to estimate how many repetitions would decide it)\) — throughput: "
                     r"undecided", out), out
    assert "3 failed, " + (f"{3 - undecided} passed, " if undecided < 3 else "") + f"{undecided} inconclusive in" in out
    assert "suggested" not in out  # results/ is the harness's: not collected
    assert " loadscope experiments " in out and "pyproject" not in out
    assert (repo / "results" / "loadscope" / "workers" / "report.md").exists()


@pytest.mark.parametrize("figures, kwargs, factor, values, metric", [
    # compute-bound: what feeding training costs, through the loadscope factory the module has
    ({"data_wait_share": 0.01, "cores_used": 1.0, "cpu_per_sample": 2.0, "e2e_throughput": 100.0,
      "pipeline_cores_at_training_rate": 0.2}, {"num_workers": 2}, "factory",
     ["mytrain.data:make_loader", "mytrain.data:make_loadscope_loader"], "cpu_per_sample"),
    # input-bound, and new epochs wait for workers to start
    ({"data_wait_share": 0.5, "cores_used": 1.0, "new_epoch_first_batch": 0.5, "flipped_new_epoch_first_batch": 0.1},
     {"num_workers": 2}, "persistent_workers", [False, True], "new_epoch_first_batch"),
    ({"data_wait_share": 0.5, "cores_used": 1.0}, {"num_workers": 1}, "num_workers", [1, 2], "e2e_throughput"),  # idle core
    ({"data_wait_share": 0.5, "cores_used": 2.0}, {"num_workers": 2}, "factory",  # CPU-bound: the swap
     ["mytrain.data:make_loader", "mytrain.data:make_loadscope_loader"], "e2e_throughput"),
])
def test_the_suggested_next_experiment_follows_the_figures_and_is_valid(repo, tmp_path, figures, kwargs, factor, values,
                                                                         metric):
    from loadscope.bench import baseline

    exp = baseline._experiment("mytrain.data:make_loader", dict(kwargs, root="data"), setup="mytrain.train:build",
                               step="mytrain.train:step", repo=str(repo), sample_ids="mytrain.data:ids",
                               batch_size_of=None, grad_accum=1, world_size=1, run={}, data=None)
    o = {k: {"median": None} for k, _, _ in baseline.ROWS}
    o.update({k: {"median": v} for k, v in figures.items()})
    o.update(usable_cpus=2, persistent_workers=False, has_ids=True, cores_used_uncertainty=0.0,
             pipeline={"dataloader": True, "num_workers": kwargs["num_workers"]})
    s = baseline.suggest(exp, o, dict(kwargs, root="data"))
    assert (s["factor"], s["values"], s["criteria"]["metric"]) == (factor, values, metric)
    assert s["pipeline"] == {}  # mytrain's factory takes shuffle, already off by default: nothing to pin
    path = tmp_path / "next.toml"
    baseline.write_next(str(path), exp, dict(kwargs, root="data"), s, o)
    nxt = bench.load(str(path))
    assert nxt.factor == factor and [a.config[factor] for a in nxt.arms] == values
    assert nxt.correctness["overrides"] == {}  # mytrain's factory has no augmentation flag to turn off
    assert "# overrides = { your_augmentation_flag = false }" in path.read_text()


def test_a_swap_that_cannot_be_translated_leaves_a_stub_that_says_why(repo, tmp_path):
    from loadscope.bench import baseline

    exp = baseline._experiment("mytrain.data:make_loader", {"root": "data", "num_workers": 2}, setup="mytrain.train:build",
                               step="mytrain.train:step", repo=str(repo), sample_ids="mytrain.data:ids",
                               batch_size_of=None, grad_accum=1, world_size=1, run={}, data=None)
    o = {k: {"median": None} for k, _, _ in baseline.ROWS}
    o.update({"data_wait_share": {"median": 0.5}, "cores_used": {"median": 2.0}})
    o.update(usable_cpus=2, persistent_workers=False, has_ids=True, cores_used_uncertainty=0.0,
             pipeline={"dataloader": True, "num_workers": 2})

    class NoLoadscopeFactory:  # a module without a loadscope factory of its own
        pass

    # mytrain's Dataset is its own (not an ImageFolder): the translation says so, by name.
    with bench.user.on_path(str(repo)):
        fn = bench.user.resolve("mytrain.data:make_loader", "f")
    tr = baseline._translate(exp, fn, {"root": "data", "num_workers": 2}, None)
    why = "dataset Images: loadscope translates torchvision's ImageFolder and DatasetFolder"
    assert tr["arms"]["ok"] is False and tr["arms"]["why"].startswith(why) and tr["random"] == []
    s = baseline._choose(exp, o, {"root": "data", "num_workers": 2}, {"num_workers": 2, "root": None},
                         NoLoadscopeFactory, str(tmp_path), tr)
    assert s["factor"] == "factory" and why in s["needs"]
    s.update(pipeline={}, overrides=None, notes=[])
    baseline.write_next(str(tmp_path / "next-experiment.toml"), exp, {"root": "data", "num_workers": 2}, s, o)
    stub = (tmp_path / "loadscope_factory.py").read_text()
    assert f"raise NotImplementedError(\"loadscope could not translate mytrain.data:make_loader: {why}" in stub
    nxt = bench.load(str(tmp_path / "next-experiment.toml"))  # valid, and it fails at the arm with that message
    assert nxt.arms[1].config["factory"] == f"{tmp_path}/loadscope_factory.py:make_loadscope_loader"


def test_the_check_starts_from_the_repetitions_seeds_whatever_the_arms_drew(repo, tmp_path):
    """A shuffling DataLoader whose augmentation draws from torch's global generator in the main
    process (num_workers=0) and not in it (workers): after the measured phases the generators
    differ between the arms, and the check's shuffle would too without a fresh seed."""
    exp = experiment(repo, "num_workers", [0, 1], pipeline={"shuffle": True, "jitter": True},
                     correctness={"overrides": {"jitter": False}}, run={"samples": 48})
    summary = bench.run(exp, str(tmp_path / "out"), quiet=True)
    check = summary["correctness"]["arms"]["num_workers=1"]
    assert check["ok"] is True and "identical" in check["detail"], check


def test_a_new_epochs_first_batch_is_a_metric_when_a_criterion_names_it(repo, tmp_path):
    exp = experiment(repo, "persistent_workers", [False, True], pipeline={"num_workers": 1},
                     criteria={"metric": "new_epoch_first_batch", "max_regression": {}})
    summary = bench.run(exp, str(tmp_path / "out"), quiet=True)
    for arm in ("persistent_workers=false", "persistent_workers=true"):
        assert summary["per_arm"][arm]["new_epoch_first_batch"]["n"] == 2
    assert "new_epoch_first_batch" in summary["verdicts"]["persistent_workers=true"]["reasons"][0]


@pytest.mark.parametrize("mode, decision, fails", [
    ("enforce", "inconclusive", False), ("strict", "inconclusive", True), ("report", "inconclusive", False),
    ("enforce", "roll back", True), ("report", "roll back", False), ("strict", "adopt", False),
])
def test_a_gate_fails_on_evidence_only(monkeypatch, mode, decision, fails):
    """The plugin's rule, on a summary as the runner returns it: a confident roll back fails a
    gate, an inconclusive one passes (and says so) unless --loadscope-gates=strict."""
    from types import SimpleNamespace

    from loadscope import pytest_plugin
    from loadscope.bench import runner

    verdict = {"decision": decision, "reasons": ["throughput: ..."]}
    if decision == "inconclusive":
        verdict["repetitions_to_decide"] = 9
    monkeypatch.setattr(runner, "run", lambda exp, out, quiet: {"verdicts": {"b": verdict}, "baseline": "a"})
    stash: dict = {}
    config = SimpleNamespace(getoption={"loadscope_full": True, "loadscope_gates": mode, "loadscope_out": "/tmp/x"}.get,
                             rootpath=Path("/tmp"), stash=SimpleNamespace(setdefault=stash.setdefault))
    exp = SimpleNamespace(name="g", gate=True)
    if fails:
        with pytest.raises(pytest_plugin.ExperimentFailure, match=f"b: {decision.upper() if mode == 'strict' else decision}"):
            pytest_plugin.run_experiment(config, exp)
    else:
        summary = pytest_plugin.run_experiment(config, exp)
        node = SimpleNamespace(user_properties=[])
        pytest_plugin._mark_inconclusive(node, summary)
        assert node.user_properties == ([("loadscope", "inconclusive")] if decision == "inconclusive" else [])
    line = next(x for x in stash[pytest_plugin._VERDICTS] if x.startswith("g (full): b vs a"))
    assert decision.upper() in line and ("about 9 repetitions would decide it" in line) == (decision == "inconclusive")


def test_the_check_merges_a_factorys_contiguous_loader_by_its_epoch_batches(demo):
    """A factory's loadscope Loader dealing the epoch contiguously: its k-th batch is the epoch
    batch the Loader says, not rank + k * world (the check merges ranks by it)."""
    import loadscope as ls
    from loadscope.bench.pipelines import UserPipeline

    kw = dict(source=ls.FileList(str(demo / "manifest.jsonl")), fields={"cls": ls.Int()}, batch_size=8, rank=1,
              world_size=3, partition="contiguous")
    pipe = UserPipeline({"factory": "loadscope:Loader"}, kw, rank=1, world=3)
    assert len(pipe.obj.dataset) == 120 and len(pipe.obj) == 5  # 15 full batches: ranks take 0-4, 5-9, 10-14
    assert [pipe.global_batch(k) for k in range(5)] == [5, 6, 7, 8, 9]
    interleaved = UserPipeline({"factory": "loadscope:Loader"}, dict(kw, partition="interleave"), rank=1, world=3)
    assert [interleaved.global_batch(k) for k in range(3)] == [1, 4, 7]


def test_sample_checksums_hash_the_bytes_numpy_would_give_without_numpy():
    """A torch-only environment has no NumPy: the checksums read the tensors' memory directly,
    and must hash what NumPy's tobytes() gives (checksums stay comparable across installs)."""
    import numpy as np
    import torch

    from loadscope.bench.user import _raw_bytes

    cases = [torch.arange(12, dtype=torch.float32).reshape(3, 4)[:, 1:], torch.tensor(5), torch.tensor([True, False]),
             torch.zeros(0), torch.arange(6, dtype=torch.int16).reshape(2, 3).t(), torch.full((2, 2), 7, dtype=torch.uint8)]
    for t in cases:
        assert _raw_bytes(t) == np.ascontiguousarray(t.numpy()).tobytes(), t
