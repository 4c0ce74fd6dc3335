"""The GPU benchmark's CPU smoke mode runs the whole comparison and prints every row."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_bench_gpu_smoke_prints_every_loop_with_ratios():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "DO_NOT_TRACK": "1"}
    done = subprocess.run(
        [sys.executable, "benchmarks/bench_gpu.py", "--smoke", "--epochs", "2"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "compile backend aot_eager" in out
    for model in ("small_cnn", "resnet20"):
        table = out.split(f"\n{model}, ")[1]
        rows = {line.split("  ")[0].strip(): line.split()[-3:] for line in table.splitlines()[2:7]}
        assert list(rows) == [
            "bare",
            "paper",
            "engine fp32",
            "engine bf16+cl",
            "engine bf16+cl+graph",
        ]
        for images_per_s, vs_bare, vs_paper in rows.values():
            assert float(images_per_s) > 0 and float(vs_bare) > 0 and float(vs_paper) > 0
        assert rows["bare"][1] == "1.00" and rows["paper"][2] == "1.00"


def _bench(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "DO_NOT_TRACK": "1"}
    return subprocess.run(
        [sys.executable, "benchmarks/bench_gpu.py", "--smoke", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.slow
def test_bench_gpu_times_a_meta_learner_and_the_phases_of_an_epoch():
    done = _bench(
        "--epochs",
        "2",
        "--models",
        "small_cnn",
        "--loops",
        "engine fp32",
        "--learner",
        "fl_gamma_sece",
        "--phases",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "engine learner fl_gamma_sece" in done.stdout
    table = done.stdout.split("\nsmall_cnn, ")[1].splitlines()
    assert table[2].split()[:2] == ["engine", "fp32"] and float(table[2].split()[2]) > 0
    assert table[2].split()[-2:] == ["--", "--"]  # no bare or paper row to compare with
    phases = next(line for line in table if line.startswith("engine fp32 epoch phases"))
    for name in ("train loop", "scheduler", "evaluate", "select"):
        assert f"{name} " in phases


@pytest.mark.slow
def test_bench_gpu_host_overhead_alternates_bare_and_engine_rounds():
    done = _bench("--host-overhead", "--epochs", "2", "--rounds", "2")
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert any("resnet18 at width 2, batch 4, 8x8, 200 steps per epoch" in line for line in lines)
    rounds = [line for line in lines if line.strip().startswith("round ")]
    assert [line.split(":")[0].strip() for line in rounds] == ["round 1", "round 2"]
    for line in rounds:
        bare = float(line.split("bare ")[1].split(" ms")[0])
        engine = float(line.split("engine fp32 ")[1].split(" ms")[0])
        difference = float(line.split("engine - bare ")[1].split(" ms")[0])
        assert bare > 0 and engine > 0 and difference == pytest.approx(engine - bare, abs=2e-3)
    median = lines[-1]
    assert median.startswith("median: bare ") and "steps per second (median of the rounds" in median
    assert "\nsmall_cnn, " not in done.stdout  # only the host probe ran


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--models", "resnet9000"), "--models: choose from"),
        (("--loops", "engine fp64"), "--loops: unknown ['engine fp64']"),
        (("--epochs", "1"), "--epochs: at least 2"),
        (("--host-overhead", "--rounds", "0"), "--rounds: at least 1"),
    ],
)
def test_bench_gpu_rejects_unknown_models_and_loops(args, message):
    done = _bench(*args)
    assert done.returncode == 2
    assert message in done.stderr


def _vmap_bench(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "DO_NOT_TRACK": "1"}
    return subprocess.run(
        [sys.executable, "benchmarks/bench_vmap_seeds.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_bench_vmap_seeds_checks_equal_training_before_it_times():
    done = _vmap_bench("--seeds", "2", "--images", "256", "--repeats", "1")
    assert done.returncode == 0, done.stderr[-2000:]
    row = done.stdout.splitlines()[-1].split()
    assert row[0] == "2" and float(row[1]) > 0 and float(row[2]) > 0
    # the times are printed to 0.1 ms, the ratio to 0.01: equal within that rounding
    assert float(row[3].rstrip("x")) == pytest.approx(float(row[1]) / float(row[2]), rel=0.05)
    assert float(row[4]) <= 1e-4  # vmapped weights and BN statistics equal the one-by-one ones


@pytest.mark.parametrize("args", [("--seeds", "0"), ("--images", "64"), ("--repeats", "0")])
def test_bench_vmap_seeds_rejects_bad_sizes(args):
    done = _vmap_bench(*args)
    assert done.returncode == 2 and "--seeds >= 1, --images >= 128" in done.stderr


def test_bench_vmap_seeds_difference_sees_other_weights(monkeypatch):
    import importlib.util

    from torch.func import stack_module_state

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # as when run as a script
    spec = importlib.util.spec_from_file_location(
        "bench_vmap_seeds", ROOT / "benchmarks/bench_vmap_seeds.py"
    )
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    import torch

    cpu = torch.device("cpu")
    same = stack_module_state(bench._models(2, cpu))
    assert bench._largest_difference(bench._models(2, cpu), *same) == 0.0
    other = stack_module_state(bench._models(3, cpu)[1:])  # seeds 1, 2 where 0, 1 are expected
    assert bench._largest_difference(bench._models(2, cpu), *other) > 1e-3


def test_bench_vmap_seeds_rejects_an_unknown_device():
    done = _vmap_bench("--device", "gpu0")
    assert done.returncode == 2 and "--device:" in done.stderr


def test_bench_gpu_rounds_alternate_the_loops_and_pool_their_epochs():
    done = _bench(
        "--epochs", "2", "--rounds", "2", "--models", "small_cnn", "--loops", "bare", "engine fp32"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "median of epochs 2..2 of 2 alternating rounds" in out
    order = [
        line.split(": ")[0].strip() + ": " + line.split(": ")[1]
        for line in out.splitlines()
        if "(round " in line
    ]
    assert order == [
        "small_cnn (round 1): bare",
        "small_cnn (round 1): engine fp32",
        "small_cnn (round 2): bare",
        "small_cnn (round 2): engine fp32",
    ]
    table = out.split("\nsmall_cnn, ")[1].splitlines()
    assert [row.split()[0] for row in table[2:4]] == ["bare", "engine"]
    assert table[2].split()[2] == "1.00" and float(table[3].split()[3]) > 0


@pytest.mark.slow
def test_bench_gpu_profile_compares_the_device_work_per_step():
    done = _bench(
        "--epochs", "2", "--models", "resnet20", "--loops", "bare", "--profile", "--no-syncs"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = done.stdout.split("resnet20: device work per step of one profiled epoch (1 steps)")[1]
    lines = report.splitlines()
    rows = {line.split()[0]: line for line in lines[1:4] if line.strip()}
    for label in ("bare", "engine"):  # "engine fp32" starts with "engine"
        row = rows[label]
        assert float(row.split()[2 if label == "engine" else 1]) > 10  # ops per step
        assert "busy)" in row and "wall" in row
    differences = lines[lines.index("  largest differences (engine - bare, per step):") + 1 :]
    assert len([line for line in differences if " us, calls " in line]) == 8
