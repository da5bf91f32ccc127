"""The crossover matrix's plan and table (benchmarks/crossover.py), without a GPU: every cell is
a valid experiment with its workload's data and CPU budget, and the table's crossover rule reads
the intervals as the harness's verdicts do. The cells themselves run on a GPU
(scripts/gpu-check.sh)."""

import importlib.util
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("crossover", Path(__file__).parent / "crossover.py")
crossover = importlib.util.module_from_spec(spec)
spec.loader.exec_module(crossover)


def test_every_cell_is_its_workloads_experiment_at_its_cpu_budget():
    for workload, (name, data, samples) in crossover.WORKLOADS.items():
        for threads in crossover.THREADS:
            exp = crossover.cell(workload, threads, repetitions=3)
            assert exp.factor == "decode" and [a.name for a in exp.arms] == ["decode=cpu", "decode=gpu"]
            assert all(a.config["threads"] == threads for a in exp.arms) and exp.dataset["path"].endswith(data)
            assert exp.run["samples"] == samples and exp.run["repetitions"] == 3
            if name == "decode.toml":  # missing images fail the cell, never made in its place
                assert exp.dataset["generate"] is False
            assert exp.step["compute"] == "matmul" and exp.needs_cuda()  # skipped, with the reason, without a GPU
            if name == "decode-video.toml":
                assert all(a.config["root"].endswith(data) for a in exp.arms) and exp.correctness_mode == "tolerance"
                assert [a.config["decode"] for a in exp.arms] == ["cpu", "gpu"]  # the factory's argument
    with pytest.raises(SystemExit, match="allowed are images, photos-1080p, clips-360p, clips-1080p"):
        crossover.cell("clips-4k", 2)


def _row(threads, effect, lo, hi, workload="clips-1080p"):
    arm = {"e2e": 100.0, "ci": (90.0, 110.0), "step_ms": 5.5, "gpu_idle": 0.5}
    return {"workload": workload, "threads": threads, "status": "ok", "cpu": arm, "gpu": arm,
            "effect": (effect, lo, hi), "verdict": "adopt" if lo > 0.05 else "keep"}


def test_the_crossover_is_the_largest_budget_where_the_whole_interval_is_a_gain():
    rows = [_row(2, 0.8, 0.6, 1.0), _row(4, 0.3, 0.1, 0.5), _row(8, 0.0, -0.1, 0.1), _row(16, -0.3, -0.4, -0.2)]
    assert crossover.crossover(rows, "clips-1080p") == ("clips-1080p: GPU decoding wins up to 4 threads; at 8 it "
                                                         "does not win (the interval spans zero)")
    assert crossover.crossover(rows[:2] + rows[3:], "clips-1080p").endswith("up to 4 threads; at 16 it loses")
    assert crossover.crossover(rows[:2], "clips-1080p").endswith("wins at every budget measured, up to 4 threads")
    assert crossover.crossover(rows[2:], "clips-1080p").endswith("wins at none of [8, 16] threads")
    assert crossover.crossover(rows, "images") == "images: not run"
    assert crossover.crossover([_row(2, 0.0, -0.1, 0.1), _row(4, 0.3, 0.1, 0.5)], "clips-1080p") == \
        "clips-1080p: mixed: GPU decoding wins at [4] threads, not at [2]"
    one_rep = dict(rows[0], effect=(0.8, None, None))  # one repetition: no interval
    assert crossover.wins(one_rep) is None and "| +80.0% [—, —] |" in crossover.table([one_rep])
    skipped = [dict(r, status="skipped") for r in rows]
    assert crossover.crossover(skipped, "clips-1080p") == "clips-1080p: not run (skipped)"
    assert crossover.crossover(skipped[:1] + rows[1:], "clips-1080p").startswith("clips-1080p: GPU decoding wins up to 4")
    failed = {"workload": "images", "threads": 2, "status": "failed: no data", "cpu": crossover.row("images", 2, {})["cpu"],
              "gpu": crossover.row("images", 2, {})["gpu"], "effect": (None, None, None), "verdict": None}
    text = crossover.table(rows + [failed])
    assert "| clips-1080p | 2 | 100 [90, 110] | 100 [90, 110] | +80.0% [+60.0%, +100.0%] | 5.50 / 5.50 | 50.0% / 50.0% | adopt |" in text
    assert "| images | 2 | — [—, —] | — [—, —] | — |" in text and "failed: no data |" in text


def test_a_cells_row_reads_its_summary():
    summary = {"status": "ok",
               "per_arm": {"decode=cpu": {"e2e_throughput": {"mean": 50.0, "ci_low": 45.0, "ci_high": 55.0},
                                          "step_ms": {"mean": 5.5}, "gpu_idle_share": {"mean": 0.6}},
                           "decode=gpu": {"e2e_throughput": {"mean": 80.0, "ci_low": 70.0, "ci_high": 90.0},
                                          "step_ms": {"mean": 6.0}, "gpu_idle_share": {"mean": 0.4}}},
               "effects": {"decode=gpu": {"e2e_throughput": {"effect": 0.6, "ci_low": 0.4, "ci_high": 0.8}}},
               "verdicts": {"decode=gpu": {"decision": "adopt"}}}
    r = crossover.row("clips-360p", 4, summary)
    assert r["cpu"] == {"e2e": 50.0, "ci": (45.0, 55.0), "step_ms": 5.5, "gpu_idle": 0.6}
    assert r["gpu"]["step_ms"] == 6.0 and r["effect"] == (0.6, 0.4, 0.8) and r["verdict"] == "adopt"
    assert crossover.wins(r) is True
