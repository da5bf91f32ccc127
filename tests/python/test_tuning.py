"""threads="auto", prefetch="auto" and decoder_threads="auto" (core/tuner.h, docs/tuning.md):
batches equal those of fixed settings while concurrency changes under them, the controller's
decisions reach summary(), telemetry() and traces, and bad arguments name what is allowed. The
policy itself is tested with measured windows fed to it in tests/cpp/test_tuner.cc: whether it
grows on this machine at this moment is a benchmark's question (bench tune, docs/benchmarks.md),
not a test's."""

import json

import pytest
import torch

import loadscope as ls
from loadscope import _native


def scripted(loader, script, max_threads=4):
    """Replaces the loader's controller with one that changes (threads, prefetch) after every
    batch as the script says: many changes in one epoch, on any machine."""
    t = _native.Tuner(max_threads=max_threads, threads=2, auto_threads=True, prefetch=2, max_prefetch=4,
                      auto_prefetch=True, auto_decoder_threads=True, cores=4.0, memory_limit=-1,
                      window_batches=1, window_seconds=0.0, script=script)
    loader._tuner = t
    loader._telemetry.tuner = t
    loader._max_threads = max_threads
    return t


SCRIPT = [(t, p) for r in range(4) for t in (1, 2, 3, 4, 3, 1) for p in (1 + (t + r) % 4,)]


def images(demo, **kw):
    fields = {"jpg": ls.Image(size=48, crop="random_resized", flip=0.5, color=ls.ColorJitter(0.4, 0.4), dtype="float32"),
              "cls": ls.Int()}
    return ls.Loader(ls.Folder(str(demo / "folder")), fields=fields, batch_size=5, shuffle=True, seed=3, **kw)


def epochs(loader, n=2):
    out = []
    for _ in range(n):
        out.append([(b["jpg"].clone(), b["cls"].clone(), list(b["__key__"])) for b in loader])
    return out


def same(a, b):
    assert len(a) == len(b)
    for ea, eb in zip(a, b):
        assert len(ea) == len(eb)
        for (x, y, k), (x2, y2, k2) in zip(ea, eb):
            assert k == k2 and torch.equal(y, y2) and torch.equal(x, x2)


def test_batches_under_auto_equal_fixed_threads_across_many_changes(demo):
    ref = epochs(images(demo, threads=1, prefetch=1))
    auto = images(demo, threads="auto", prefetch="auto")
    same(epochs(auto), ref)  # the real policy, whatever it decided here
    changing = images(demo, threads="auto", prefetch="auto")
    t = scripted(changing, SCRIPT)
    same(epochs(changing), ref)
    assert t.changes >= 20  # the script ran: concurrency changed mid-epoch, many times
    assert (t.threads, t.prefetch) == SCRIPT[-1]


def test_decisions_reach_summary_telemetry_and_the_trace(demo, tmp_path):
    loader = images(demo, threads="auto", prefetch="auto")
    scripted(loader, [(3, 3), (1, 2)])
    loader.start_trace(tmp_path / "t.json")
    list(loader)
    trace = loader.stop_trace()
    snap = loader.telemetry()
    t = snap["tuning"]
    assert t["auto"] == ["threads", "prefetch"] and (t["threads"], t["prefetch"]) == (1, 2)
    changes = [d for d in t["decisions"] if d["from"] != d["to"]]
    assert [(d["knob"], d["from"], d["to"]) for d in changes] == [
        ("threads", 2, 3), ("prefetch", 2, 3), ("threads", 3, 1), ("prefetch", 3, 2)]
    assert changes[0]["text"] == f"threads 2 → 3 at batch {changes[0]['batch']}: scripted"
    text = snap.summary()
    assert "tuning (threads='auto', prefetch='auto'): threads 1 of at most 4, prefetch 2" in text
    assert changes[-1]["text"] in text
    events = json.load(open(trace))["traceEvents"]
    marks = [e["name"] for e in events if e.get("cat") == "tuner"]
    assert marks == [d["text"] for d in t["decisions"]]
    assert snap["config"]["threads"] == "auto"


def test_interval_reports_carry_the_decisions_of_their_interval(demo):
    loader = images(demo, threads="auto", prefetch="auto")
    scripted(loader, [(3, 3), (1, 2)])
    reports = []
    loader.report_every(3600, to=reports.append)
    list(loader)
    loader.stop_reports()  # the final report: everything since the loader was made
    t = reports[-1]["tuning"]
    assert (t["threads"], t["prefetch"]) == (1, 2)
    assert t["decisions"] == [d["text"] for d in loader.telemetry()["tuning"]["decisions"]] and len(t["decisions"]) == 4


def test_fixed_settings_have_no_controller(demo):
    loader = images(demo, threads=2, prefetch=3)
    list(loader)
    snap = loader.telemetry()
    assert "tuning" not in snap and "tuning" not in snap.summary()
    assert (loader.threads, loader.prefetch) == (2, 3)


def test_auto_starts_halfway_with_a_memory_limit_from_the_cgroup(demo):
    loader = images(demo, threads="auto", prefetch="auto")
    cores = ls.default_threads()
    assert loader.threads == "auto" and loader.prefetch == "auto"
    assert loader._tuner.threads == max(1, cores // 2) and loader._max_threads == cores
    limit = ls._loader_args.resolve_tuning("auto", 2, None, 5, False)["tuner"]["memory_limit"]
    assert 0 < limit <= ls._loader_args._memory_allowed()
    named = ls._loader_args.resolve_tuning("auto", "auto", 3 * 2**30, 5, False)["tuner"]
    assert named["memory_limit"] == 3 * 2**30 and named["prefetch"] >= 2


@pytest.mark.parametrize("kw, words", [
    ({"threads": "fast"}, "threads='fast': an int >= 1, 'auto', or None"),
    ({"threads": 0}, "threads"),
    ({"prefetch": "deep"}, "prefetch='deep': an int >= 1 (batches decoded ahead) or 'auto'"),
    ({"threads": 2, "memory_limit": "1GiB"}, "memory_limit bounds what threads='auto' and prefetch='auto'"),
    ({"threads": "auto", "memory_limit": "lots"}, "memory_limit= 'lots': a size like"),
    ({"threads": "auto", "memory_limit": 0}, "memory_limit=0: must be >= 1 byte"),
])
def test_bad_tuning_arguments_say_what_is_allowed(demo, kw, words):
    with pytest.raises(ls.ConfigError, match=None) as e:
        images(demo, **kw)
    assert words in str(e.value)


def test_video_decoder_threads_auto_is_checked():
    ls.VideoClip(32, frames=2, decoder_threads="auto")._native("v", _native)
    with pytest.raises(ls.ConfigError, match="decoder_threads='many': an int"):
        ls.VideoClip(32, frames=2, decoder_threads="many")._native("v", _native)
