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
