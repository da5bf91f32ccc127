"""The first hour in a real training repository (part 21): a throwaway repository written here,
as the classic ImageNet script has it — a DataLoader over a stock ImageFolder with torchvision
transforms, shuffle=True by default and a `shuffle` argument, a `train` flag, a CPU model
step — and what the docs promise on it: `bench baseline` states the bottleneck it measured,
writes an experiment that tests it (and, for the swap, the loadscope factory next to it), and
`bench run` runs that experiment as written, to the verdict the baseline expected.

References: the samples are the ImageFolder's files, named by their real paths; the CPU a
repetition reports can never exceed the cores this process may use (os.sched_getaffinity),
beyond the uncertainty it states."""

import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from loadscope.bench.report import cores_used

DATA = '''
import torch
import torchvision.transforms as T
from torchvision.datasets import ImageFolder

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def transform(train, size):
    if train:
        return T.Compose([T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])
    return T.Compose([T.Resize(size * 8 // 7), T.CenterCrop(size), T.ToTensor(), T.Normalize(MEAN, STD)])


def make_loader(root="data/folder", batch_size=16, num_workers=2, shuffle=True, train=True, size=64):
    dataset = ImageFolder(root, transform=transform(train, size))
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, num_workers=num_workers)
'''

TRAIN = '''
import time

import torch


def build(ctx):
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, stride=2), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 3, stride=2),
                                torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
    return {"model": model, "opt": torch.optim.SGD(model.parameters(), lr=0.01)}


def step(state, batch):
    images, labels = batch
    loss = torch.nn.functional.cross_entropy(state["model"](images), labels % 10)
    loss.backward()
    state["opt"].step()
    state["opt"].zero_grad()


def slow_step(state, batch):
    """A step that takes far longer than the input: training is compute-bound. The DataLoader's
    worker start before the first batch counts as waiting (it is), so the step is long enough
    that a start slowed by a busy machine stays well under the 10% bound: at 0.3 s a step, a
    fresh-clone run once measured 12% (2026-12-04)."""
    time.sleep(0.6)
    step(state, batch)


def waiting_step(state, batch):
    """A step that takes nothing: the loop only waits for data."""
    return batch[0].shape
'''


@pytest.fixture(scope="module")
def repo(training_repo) -> Path:
    return training_repo("imagenet-like", "trainer", {"data": DATA, "train": TRAIN})


def baseline(repo: Path, step: str, out: str) -> dict:
    r = subprocess.run([sys.executable, "-m", "loadscope", "bench", "baseline", "trainer.data:make_loader",
                        "--setup", "trainer.train:build", "--step", f"trainer.train:{step}", "--repo", ".",
                        "--data", "data/folder", "--samples", "128", "--warmup-samples", "64", "--repetitions", "2",
                        "--out", out, "--quiet"], cwd=repo, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads((repo / out / "baseline.json").read_text())


def assert_cpu_within_the_cores(rows, usable):
    """No CPU figure exceeds the cores available by more than its stated uncertainty."""
    for row in rows:
        cores, uncertainty = cores_used(row)
        assert 0 < cores <= usable + uncertainty, (cores, uncertainty, usable, row.get("cpu_window"), row["seconds"])
        # The window is the phase's, give or take the reads around it: well under the half a phase
        # that a window also holding the warm-up (64 samples before 128) would add. (A bound of
        # 10% of the cores failed once at 0.203 on a busy shared machine: the reads' slack is
        # scheduling, not the figure's meaning.) Plus 20 ms of scheduling (a few time slices of
        # a busy 2-core machine): a loadscope phase of 128 samples can take 25 ms, and once
        # measured a window 12 ms longer (2026-12-05); a warm-up inside the window is told apart
        # from that only when the phase is long enough for it to matter.
        window = row.get("cpu_window") or row["seconds"]
        assert window - row["seconds"] < 0.25 * row["seconds"] + 0.02, (window, row["seconds"])


def test_the_baselines_suggestion_runs_as_written_and_its_verdict_is_the_one_it_expected(repo):
    res = baseline(repo, "step", "results/baseline/first")
    out = repo / "results" / "baseline" / "first"
    nxt = res["next"]
    usable = len(os.sched_getaffinity(0))
    # The bottleneck is stated from the measurements, with training's own rate.
    assert res["bottleneck"]["kind"] in ("input", "compute")
    diagnosis = (out / "diagnosis.md").read_text()
    assert "## Bottleneck (from the figures above)" in diagnosis and "at the rate training takes samples" in diagnosis
    # CPU time is read from ns clocks, not in 10 ms ticks ("110 ms" on a busy machine is fine)
    assert not re.search(r"(?<![\d.])10 ms", diagnosis)
    # With 2 workers on this machine's cores a worker more is no option: the swap, on the
    # metric the bottleneck lets move.
    assert nxt["factor"] == "factory" and nxt["expect"] == "adopt"
    assert nxt["criteria"]["metric"] == ("e2e_throughput" if res["bottleneck"]["kind"] == "input" else "cpu_per_sample")
    toml = (out / "next-experiment.toml").read_text()
    raw = tomllib.loads(toml)
    assert raw["pipeline"]["shuffle"] is False  # through the factory's own argument, for both arms
    assert raw["correctness"]["overrides"] == {"train": False} and raw["correctness"]["mode"] == "tolerance"
    # Named beside the experiment (the two move together); no repository marker here, so the
    # training repository is named relative to the file's folder.
    assert raw["factor"]["values"] == ["trainer.data:make_loader", "loadscope_factory.py:make_loadscope_loader"]
    assert raw["training_repo"] == "../../.." and raw["dataset"]["path"] == "data/folder" and raw["gate"] is True
    # The loadscope factory the user has not written yet, translated option for option.
    factory = (out / "loadscope_factory.py").read_text()
    assert "return ls.from_dataloader(make_loader(root=root, batch_size=batch_size" in factory
    for line in ("ImageFolder('data/folder') -> ls.Folder('data/folder')", "-> crop='random_resized', size=64",
                 "RandomHorizontalFlip(p=0.5) -> flip=0.5", "ToTensor() -> dtype='float32'",
                 "-> mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225)", "SequentialSampler -> shuffle=False",
                 "the experiment's arguments (shuffle=False)"):
        assert line in factory, line
    assert (repo / "results" / ".gitignore").read_text().endswith("*\n")  # outputs stay out of git
    assert_cpu_within_the_cores([json.loads(x) for x in (out / "raw.jsonl").read_text().splitlines()], usable)
    cores = res["observed"]["cores_used"]["median"]
    assert cores <= usable + res["observed"]["cores_used_uncertainty"]

    # As written: no edit (fewer repetitions than it asks for, from the command line: a quick first look).
    r = subprocess.run([sys.executable, "-m", "loadscope", "bench", "run", str(out / "next-experiment.toml"), "--out",
                        "results/next", "--repetitions", "2", "--quiet"], cwd=repo, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads((repo / "results" / "next" / "summary.json").read_text())
    arm = summary["arms"][1]
    check = summary["correctness"]["arms"][arm]
    # Like with like: the same files named by position in both arms (no sample_ids given), the
    # same labels, center crops within a level of 255 (in the normalised output's units).
    assert check["ok"] is True, check
    assert check["worst_mean_abs_diff"] <= raw["correctness"]["tolerance"] < 0.02
    assert "the measured phases read the same samples" in check["detail"]
    v = summary["verdicts"][arm]
    # The verdict is a measurement (the speed-up itself is a benchmark: docs/benchmarks.md): on a
    # machine busy enough to widen the interval past the bound it is inconclusive, and then says
    # what would decide it. Never the opposite of what the suggestion expected.
    assert v["decision"] in (nxt["expect"], "inconclusive"), v
    if v["decision"] == "inconclusive":
        assert any("would decide it" in d or "too noisy" in d for d in v["deciding"]), v
    assert_cpu_within_the_cores([json.loads(x) for x in (repo / "results" / "next" / "raw.jsonl").read_text().splitlines()
                                 if not json.loads(x).get("warmup")], usable)

    # pytest in the repository collects its experiments, not the harness's output.
    (repo / "experiments").mkdir(exist_ok=True)
    (repo / "experiments" / "workers.toml").write_text(textwrap.dedent('''
        name = "workers"
        training_repo = ".."
        [pipeline]
        factory = "trainer.data:make_loader"
        shuffle = false
        [factor]
        name = "num_workers"
        values = [1, 2]
    '''))
    # No -p: the install registered the plugin (pyproject's pytest11 entry point), as pip does.
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"], cwd=repo,
                       capture_output=True, text=True, timeout=300)
    collected = [x for x in r.stdout.splitlines() if "::" in x]
    assert collected == ["experiments/workers.toml::workers"], r.stdout + r.stderr


@pytest.mark.parametrize("step, kind, metric", [
    ("slow_step", "compute", "cpu_per_sample"),    # the step decides the speed: judge what the pipeline costs
    ("waiting_step", "input", "e2e_throughput"),  # the loop waits for data: judge training end to end
])
def test_the_suggestion_follows_the_bottleneck(repo, step, kind, metric):
    res = baseline(repo, step, f"results/baseline/{step}")
    assert res["bottleneck"]["kind"] == kind, res["bottleneck"]
    # Part 23: how many cores feeding the step at its own rate costs, against this node's.
    assert any(line.startswith("capacity: the step alone takes ") for line in res["bottleneck"]["lines"]), res["bottleneck"]
    nxt = res["next"]
    assert nxt["criteria"]["metric"] == metric
    if kind == "compute":  # training's speed is guarded, not asked to rise
        assert "e2e_throughput" in nxt["criteria"]["max_regression"]
    else:  # a gain the measured wait allows: removing it would give 1 / (1 - wait) - 1
        wait = res["observed"]["data_wait_share"]["median"]
        assert 0 < nxt["criteria"]["min_gain"] <= (1 / (1 - wait) - 1) / 2


def test_an_install_from_a_clone_names_its_commit(tmp_path):
    """env.json's loadscope commit: from the checkout it runs from, else from what setup.py
    recorded at build time (_build_info.json); else said to be unknown, not "None"."""
    from loadscope.bench import env, report

    package = tmp_path / "site-packages" / "loadscope"
    (package / "bench").mkdir(parents=True)
    assert env._loadscope_git(str(package / "bench"))["commit"] is None  # not a checkout, nothing recorded
    (package / "_build_info.json").write_text(json.dumps({"commit": "0123abc", "dirty": False, "source": "/src/loadscope"}))
    got = env._loadscope_git(str(package / "bench"))
    assert got["commit"] == "0123abc" and "recorded when this install was built" in got["note"]
    here = env._loadscope_git(os.path.dirname(env.__file__))  # this checkout: its own HEAD
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=os.path.dirname(env.__file__), capture_output=True, text=True)
    assert here["commit"] == head.stdout.strip()
    record = env.record(None, [])
    (tmp_path / "env.json").write_text(json.dumps(dict(record, loadscope=dict(record["loadscope"], git=None))))
    assert "commit unknown (installed without a record" in report._env_lines(str(tmp_path))[0]
    (tmp_path / "env.json").write_text(json.dumps(dict(record, loadscope=dict(record["loadscope"], git=got))))
    assert "commit 0123abc (recorded when this install was built)" in report._env_lines(str(tmp_path))[0]


def test_without_psutil_the_harness_says_so_before_writing_anything(tmp_path, monkeypatch):
    from loadscope import ConfigError
    from loadscope.bench import baseline

    monkeypatch.setitem(sys.modules, "psutil", None)  # an install with --no-deps
    with pytest.raises(ConfigError, match="need psutil, a dependency of loadscope .* pip install psutil"):
        baseline.run("trainer.data:make_loader", out_dir=str(tmp_path / "out"), quiet=True)
    assert not (tmp_path / "out").exists()


def test_a_check_pass_that_would_not_translate_is_declared_unchecked_not_left_to_fail(repo, tmp_path, monkeypatch):
    """The swap translates the arms' DataLoader; the check pass (train=False) makes another one,
    here with a bicubic Resize loadscope has not: the experiment is still written to run, with
    correctness declared not checked and why — and the generated factory imports and translates."""
    from loadscope.bench import baseline

    (repo / "trainer" / "bicubic.py").write_text(DATA.replace("T.Resize(size * 8 // 7)",
                                                              "T.Resize(size * 8 // 7, interpolation=T.InterpolationMode.BICUBIC)"))
    exp = baseline._experiment("trainer.bicubic:make_loader", {}, setup="trainer.train:build", step="trainer.train:step",
                               repo=str(repo), sample_ids=None, batch_size_of=None, grad_accum=1, world_size=1, run={},
                               data=None)
    o = {k: {"median": None} for k, _, _ in baseline.ROWS}
    o.update({"data_wait_share": {"median": 0.4}, "cores_used": {"median": 1.9}, "cpu_per_sample": {"median": 2.0}})
    o.update(usable_cpus=2, persistent_workers=False, has_ids=False, cores_used_uncertainty=0.0,
             pipeline={"dataloader": True, "num_workers": 2, "sampler": "RandomSampler", "ids_by_position": True})
    s = baseline.suggest(exp, o, {}, str(tmp_path))
    assert s["factor"] == "factory" and s["needs"] is None and s["mode"] == "none" and s["overrides"] is None
    assert "Resize(interpolation=InterpolationMode.BICUBIC)" in s["unchecked"] and "train=False" in s["unchecked"]
    baseline.write_next(str(tmp_path / "next-experiment.toml"), exp, {}, s, o)
    raw = tomllib.loads((tmp_path / "next-experiment.toml").read_text())
    assert raw["correctness"]["mode"] == "none" and raw["pipeline"] == {"shuffle": False}
    from loadscope.bench import user

    monkeypatch.chdir(repo)
    with user.on_path(str(repo)):  # the factory as the experiment will call it, in the repository
        loader = user.resolve(f"{tmp_path}/loadscope_factory.py:make_loadscope_loader", "f")(shuffle=False)
    assert loader.fields["jpg"].crop == "random_resized" and loader.shuffle is False


def test_the_generated_factory_imports_whatever_the_users_signature(repo, tmp_path):
    """Annotations the generated file has not imported are left out; defaults that are not
    literals make it take **kwargs; a factory named by file path is resolved, not imported."""
    from loadscope.bench import baseline, user

    (repo / "trainer" / "typed.py").write_text(textwrap.dedent('''
        from pathlib import Path
        from typing import Optional

        from trainer.data import make_loader as _make


        def make_loader(root: Optional[str] = "data/folder", size: int = 64, shuffle: bool = True, train: bool = True):
            return _make(root, shuffle=shuffle, train=train, size=size)


        def make_from_path(root: Path = Path("data/folder"), shuffle=True, train=True):
            return _make(str(root), shuffle=shuffle, train=train)
    '''))
    for factory, signature in (("trainer.typed:make_loader", "(root='data/folder', size=64, shuffle=True, train=True)"),
                               ("trainer.typed:make_from_path", "(**kwargs)"),
                               (f"{repo}/trainer/typed.py:make_loader", "(root='data/folder', size=64, shuffle=True, "
                                                                        "train=True)")):
        exp = baseline._experiment(factory, {}, setup=None, step=None, repo=str(repo), sample_ids=None,
                                   batch_size_of=None, grad_accum=1, world_size=1, run={}, data=None)
        source = baseline._swap_source(exp, {}, {"why": None, "lines": ["..."]})
        assert f"def make_loadscope_loader{signature}:" in source, source
        path = tmp_path / f"f{abs(hash(factory))}.py"
        path.write_text(source)
        with user.on_path(str(repo)):
            fn = user.resolve(f"{path}:make_loadscope_loader", "f")
            cwd = os.getcwd()
            os.chdir(repo)
            try:
                assert fn(shuffle=False, train=False).fields["jpg"].crop == "center"
            finally:
                os.chdir(cwd)


def test_one_version_everywhere_and_the_install_registers_the_entry_points():
    """The version is written once (loadscope/_version.py): the package, the installed metadata
    and `loadscope --version` agree, and the install (not a hand-written file) made the console
    script and the pytest plugin's entry point."""
    import importlib.metadata as md
    import shutil

    import loadscope
    from loadscope import _native

    assert md.version("loadscope") == loadscope.__version__
    exe = shutil.which("loadscope", path=os.path.dirname(sys.executable))
    assert exe is not None, "no loadscope console script beside this Python"
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60).stdout
    assert out.startswith(f"loadscope {loadscope.__version__} (") and _native.library_versions()["libwebp"] in out
    eps = {(e.group, e.name): e.value for g in ("console_scripts", "pytest11") for e in md.entry_points(group=g)
           if e.name == "loadscope"}
    assert eps == {("console_scripts", "loadscope"): "loadscope.__main__:main",
                   ("pytest11", "loadscope"): "loadscope.pytest_plugin"}


def test_an_experiment_whose_arm_cannot_draw_a_batch_is_withheld_with_the_reason(repo, tmp_path, monkeypatch):
    """Before writing next-experiment.toml each arm is built as `bench run` builds it and asked
    for a batch: here the dataset lists a file that is gone, past the DataLoader's first batch,
    and the translated Loader's check reads it. The experiment is withheld (its text and the
    reason go to diagnosis.md) and the generated factory is a stub that raises the reason."""
    from loadscope.bench import baseline, user

    (repo / "trainer" / "gone.py").write_text(DATA.replace(
        "    dataset = ImageFolder(root, transform=transform(train, size))\n",
        "    dataset = ImageFolder(root, transform=transform(train, size))\n"
        "    dataset.samples.append(('data/folder/gone/missing.jpg', 0))\n"))
    exp = baseline._experiment("trainer.gone:make_loader", {}, setup=None, step=None, repo=str(repo), sample_ids=None,
                               batch_size_of=None, grad_accum=1, world_size=1, run={}, data=None)
    o = {k: {"median": None} for k, _, _ in baseline.ROWS}
    o.update({"cores_used": {"median": 1.9, "ci_low": 1.8, "ci_high": 2.0}, "cpu_per_sample": {"median": 2.0}})
    o.update(usable_cpus=2, persistent_workers=False, has_ids=False, cores_used_uncertainty=0.0,
             pipeline={"dataloader": True, "num_workers": 2, "sampler": "RandomSampler", "ids_by_position": True})
    s = baseline.suggest(exp, o, {}, str(tmp_path))
    assert s["factor"] == "factory" and s["needs"] is None  # it translates: the failure comes when it draws
    path = tmp_path / "next-experiment.toml"
    baseline.write_next(str(path), exp, {}, s, o, rehearsed=True)
    assert not path.exists()
    why = s["withheld"]["why"]
    assert why.startswith("arm factory=make_loadscope_loader: ") and "missing.jpg" in why, why
    assert 'name = "next-factory"' in s["withheld"]["text"]
    monkeypatch.chdir(repo)
    with user.on_path(str(repo)):
        stub = user.resolve(f"{tmp_path}/loadscope_factory.py:make_loadscope_loader", "f")
        with pytest.raises(NotImplementedError, match="missing.jpg"):
            stub()


def test_a_figure_given_twice_is_given_one_way_and_the_time_left_is_said():
    """The bottleneck section quotes the Observed table's figures as the table gives them (cores
    busy with the same interval, not a second kind of uncertainty); the first repetition's time
    says how long the rest take, and sizes that fit five minutes when that is longer."""
    from loadscope.bench import baseline

    o = {k: {"median": None} for k, _, _ in baseline.ROWS}
    o.update(cores_used={"median": 1.1634, "ci_low": 0.8531, "ci_high": 1.7024}, cpu_per_sample={"median": 0.6449},
             throughput={"median": 1234.5}, usable_cpus=2, cores_used_uncertainty=0.05)
    lines = " ".join(baseline.bottleneck(o, False)["lines"])
    table = {k: baseline._fmt(o[k]["median"], unit) for k, _, unit in baseline.ROWS if o[k]["median"] is not None}
    assert f"kept {table['cores_used']} [0.853, 1.7] of 2 usable cores" in lines and "±" not in lines, lines
    assert f"{table['cpu_per_sample']} ms of CPU per sample" in lines and f"{table['throughput']} samples/s" in lines
    assert baseline._time_left(30.0, 3, 1024, 256) == "  the first repetition took 30 s: the other 2 take about 1.0 min"
    slow = baseline._time_left(200.0, 3, 1024, 256)
    assert "the other 2 take about 6.7 min" in slow and "--samples 512 --warmup-samples 128" in slow, slow


def test_the_capacity_diagnosis_sizes_remote_workers_when_the_node_cannot_feed_the_step():
    """Part 23: cores needed = CPU per sample x the rate the step alone takes samples (batch /
    step time); beyond the node's cores the suggestion is a pool of workers of that many cores
    and a link of bytes per sample x that rate; within them, none."""
    from loadscope.bench import baseline

    def observed(cpu_ms, step_ms, usable):
        o = {k: {"median": None} for k, _, _ in baseline.ROWS}
        o.update(usable_cpus=usable, batch_size=64, bytes_per_sample=150528.0, pipeline={}, processes=[],
                 persistent_workers=None, cores_used_uncertainty=0.0)
        o["cpu_per_sample"] = {"median": cpu_ms}
        o["step_time_p50"] = {"median": step_ms}
        o["step_rate"] = {"median": 64 / (step_ms / 1e3)}
        o["cores_at_step_rate"] = {"median": cpu_ms / 1e3 * 64 / (step_ms / 1e3)}
        o["data_wait_share"] = {"median": 0.4}
        return o

    short = observed(cpu_ms=10.0, step_ms=50.0, usable=8)  # 1280 samples/s x 10 ms = 12.8 cores
    cap = baseline.capacity(short)
    assert cap["step_rate"] == pytest.approx(1280) and cap["cores"] == pytest.approx(12.8) and cap["exceeds"]
    assert (cap["workers"], cap["cpus_per_worker"]) == (4, 4)
    assert cap["link_gbit_s"] == pytest.approx(150528 * 1280 * 8 / 1e9)  # 1.54 Gbit/s
    lines = " ".join(baseline.bottleneck(short, True)["lines"])
    assert ("capacity: the step alone takes 1280 samples/s (batch 64 / step time p50 50 ms); feeding that costs "
            "**12.8 cores** at 10 ms of CPU per sample — more than the 8 usable cores of this node") in lines, lines
    said = " ".join(baseline.hypotheses(short, True))
    assert "workers=ls.ray.Workers(4, cpus_per_worker=4)" in said and "a link of at least 1.5 Gbit/s" in said, said
    enough = observed(cpu_ms=1.0, step_ms=50.0, usable=8)  # 1.28 cores
    assert not baseline.capacity(enough)["exceeds"]
    assert "within the 8 usable cores" in " ".join(baseline.bottleneck(enough, True)["lines"])
    assert "ls.ray.Workers" not in " ".join(baseline.hypotheses(enough, True))
    assert baseline.capacity(observed(1.0, 50.0, 8) | {"step_time_p50": {"median": None}}) is None  # no step: no claim
