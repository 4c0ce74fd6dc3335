"""The metrics benchmark's smoke run: the breakdown times both scans, and they agree."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_bench_metrics_breakdown_times_the_compiled_and_the_eager_scan():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "DO_NOT_TRACK": "1"}
    done = subprocess.run(
        [sys.executable, "benchmarks/bench_metrics.py", "--quick", "--breakdown", "--repeats", "1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {
        line.strip().split("  ")[0]: float(line.split()[-5])
        for line in done.stdout.splitlines()
        if line.strip().endswith("reads") and " ms = " in line
    }
    assert list(rows) == ["read", "softmax", "scan", "eager scan", "ece", "torchmetrics"]
    assert all(milliseconds > 0 for milliseconds in rows.values())
    assert "numba is not installed" not in done.stderr  # the compiled scan was timed
