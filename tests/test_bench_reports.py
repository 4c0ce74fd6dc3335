"""benchmarks/bench_reports.py: the anchor draws the report's bars, and the script runs."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest

from calib_pipeline.reports import standard
from calib_pipeline.reports.standard import pooled_bins, reliability_axes

ROOT = Path(__file__).resolve().parents[1]


def _bench_module(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(
        "bench_reports", ROOT / "benchmarks/bench_reports.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rectangles(ax) -> list[tuple[float, ...]]:
    """(x0, x1, y0, y1) of every finite bar in ``ax``, patches and collections alike."""
    boxes = [
        (p.get_x(), p.get_x() + p.get_width(), p.get_y(), p.get_y() + p.get_height())
        for p in ax.patches
    ]
    for collection in ax.collections:
        for path in collection.get_paths():
            xs, ys = path.vertices[:4, 0], path.vertices[:4, 1]
            boxes.append((xs.min(), xs.max(), ys.min(), ys.max()))
    return sorted(np.round(box, 9).tolist() for box in boxes if np.all(np.isfinite(box)))


def test_the_anchor_draws_the_same_bars_as_the_report(monkeypatch):
    bench = _bench_module(monkeypatch)
    pooled = pooled_bins(bench.bins_table(1, 40, n=100))  # 100 samples in 40 bins: empty bins
    assert pooled["count"].eq(0).any()
    drawn = []
    for bars in (bench.per_bar_bars, bench.REPORT_BARS):
        monkeypatch.setattr(standard, "_bars", bars)
        fig, (ax, hist) = plt.subplots(2, 1)
        reliability_axes(ax, hist, pooled, "C0")
        drawn.append((_rectangles(ax), _rectangles(hist), [t.get_text() for t in ax.texts]))
        plt.close(fig)
    assert drawn[0] == drawn[1]
    shares = drawn[0][1]  # a share bar per bin, of height 0 where the bin is empty
    assert len(shares) == 40 and sum(box[3] > 0 for box in shares) == int(
        pooled["count"].gt(0).sum()
    )
    accuracy = drawn[0][0]  # accuracy and gap bars only where the bin has samples
    assert 0 < len(accuracy) <= 2 * int(pooled["count"].gt(0).sum())


def test_bench_reports_prints_a_row_per_bin_count():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "DO_NOT_TRACK": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "benchmarks/bench_reports.py",
            "--panels",
            "2",
            "--bins",
            "5",
            "15",
            "--rounds",
            "1",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split() for line in done.stdout.splitlines()[-2:]]
    assert [row[0] for row in rows] == ["5", "15"]
    for row in rows:
        assert float(row[1]) > 0 and float(row[2]) > 0
        assert float(row[3].rstrip("x")) == pytest.approx(float(row[1]) / float(row[2]), rel=0.05)


def test_bench_reports_rejects_empty_sizes():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, "benchmarks/bench_reports.py", "--rounds", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2 and "must be >= 1" in done.stderr
