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
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "compile backend aot_eager" in out
    for model in ("small_cnn", "resnet20"):
        table = out.split(f"\n{model}, ")[1]
        rows = {line.split("  ")[0].strip(): line.split()[-3:] for line in table.splitlines()[2:7]}
        assert list(rows) == ["bare", "paper", "engine fp32", "engine bf16+cl", "engine bf16+cl+graph"]
        for images_per_s, vs_bare, vs_paper in rows.values():
            assert float(images_per_s) > 0 and float(vs_bare) > 0 and float(vs_paper) > 0
        assert rows["bare"][1] == "1.00" and rows["paper"][2] == "1.00"


def _bench(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "DO_NOT_TRACK": "1"}
    return subprocess.run([sys.executable, "benchmarks/bench_gpu.py", "--smoke", *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.slow
def test_bench_gpu_times_a_meta_learner_and_the_phases_of_an_epoch():
    done = _bench("--epochs", "2", "--models", "small_cnn", "--loops", "engine fp32",
                  "--learner", "fl_gamma_sece", "--phases")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "engine learner fl_gamma_sece" in done.stdout
    table = done.stdout.split("\nsmall_cnn, ")[1].splitlines()
    assert table[2].split()[:2] == ["engine", "fp32"] and float(table[2].split()[2]) > 0
    assert table[2].split()[-2:] == ["--", "--"]  # no bare or paper row to compare with
    phases = next(line for line in table if line.startswith("engine fp32 epoch phases"))
    for name in ("train loop", "scheduler", "evaluate", "select"):
        assert f"{name} " in phases


@pytest.mark.parametrize(("args", "message"), [
    (("--models", "resnet9000"), "--models: choose from"),
    (("--loops", "engine fp64"), "--loops: unknown ['engine fp64']"),
])
def test_bench_gpu_rejects_unknown_models_and_loops(args, message):
    done = _bench(*args)
    assert done.returncode == 2
    assert message in done.stderr
