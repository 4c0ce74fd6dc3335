"""Reliability diagrams: build and save time of the report's figures against the same figures
drawn with a matplotlib artist per bar (``ax.bar``, the anchor), in the same run.

The report draws each bar series of a panel (accuracy, gap to confidence, share of samples)
as one collection of rectangles (``standard._bars``). The anchor swaps in a ``_bars`` that
draws exactly those bars with ``ax.bar``, one artist each, as the report did before; with 24 panels
at 100 bins that is ~7,000 artists per figure. Both build the figure with ``reliability_figure`` and
save it as PNG at 120 dpi with a tight bounding box (what the report dataset wrote when this was
measured; it now writes a PDF and a 300 dpi PNG: docs/performance.md), alternating round by round.

Measured figures: benchmarks/README.md; most of what is left of the report's time is
matplotlib laying out 48 axes' ticks.

    PYTHONPATH=src python benchmarks/bench_reports.py
    PYTHONPATH=src python benchmarks/bench_reports.py --panels 2 --bins 15 --rounds 1
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from calib_pipeline.reports import standard

REPORT_BARS = standard._bars


def per_bar_bars(
    ax, left: np.ndarray, width: np.ndarray, bottom: np.ndarray, height: np.ndarray, **style
) -> None:
    """The anchor: the report's bars (empty bins included, as ``ax.bar`` drew them), each
    one ``ax.bar`` rectangle artist; everything else in the panel is the report's own."""
    ax.bar(left, height, width=width, bottom=bottom, align="edge", **style)


def bins_table(panels: int, n_bins: int, seeds: int = 2, n: int = 2_000) -> pd.DataFrame:
    """A per-bin table as the evaluation writes it: ``panels`` (method, calibrator) cells of
    ``seeds`` seeds, ``n`` random predictions each (empty bins: NaN accuracy/confidence)."""
    rng = np.random.default_rng(0)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    frames = []
    for panel in range(panels):
        for seed in range(seeds):
            confidence = rng.beta(5, 1.5, n)
            correct = rng.random(n) < confidence**1.3
            index = np.clip(np.digitize(confidence, edges[1:-1]), 0, n_bins - 1)
            count = np.bincount(index, minlength=n_bins)
            with np.errstate(invalid="ignore"):
                frames.append(
                    pd.DataFrame(
                        {
                            "label": f"method {panel // 2}",
                            "calibrator": ("none", "ts")[panel % 2],
                            "seed": seed,
                            "n_bins": n_bins,
                            "lower": edges[:-1],
                            "upper": edges[1:],
                            "count": count,
                            "confidence": np.bincount(index, confidence, n_bins) / count,
                            "accuracy": np.bincount(index, correct, n_bins) / count,
                        }
                    )
                )
    return pd.concat(frames, ignore_index=True)


def seconds(bins: pd.DataFrame, folder: Path) -> float:
    """Build and save the figure once."""
    started = time.perf_counter()
    figure = standard.reliability_figure(bins, "benchmark", None, "")
    figure.savefig(folder / "reliability.png", dpi=120, bbox_inches="tight")
    plt.close(figure)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--panels", type=int, default=24, help="(method, calibrator) panels")
    parser.add_argument("--bins", type=int, nargs="+", default=[15, 100])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.panels < 1 or args.rounds < 1 or min(args.bins) < 1:
        parser.error("--panels, --bins and --rounds must be >= 1")
    print(
        f"reliability figure of {args.panels} panels, build + save (PNG, 120 dpi), "
        f"median of {args.rounds} alternating rounds",
        flush=True,
    )
    print(f"{'bins':>5s} {'per-bar artists s':>18s} {'report s':>9s} {'speed-up':>9s}")
    with tempfile.TemporaryDirectory() as folder:
        for n_bins in args.bins:
            bins = bins_table(args.panels, n_bins)
            times: dict[str, list[float]] = {"anchor": [], "report": []}
            for _ in range(args.rounds):
                for label, bars in (("anchor", per_bar_bars), ("report", REPORT_BARS)):
                    standard._bars = bars
                    try:
                        times[label].append(seconds(bins, Path(folder)))
                    finally:
                        standard._bars = REPORT_BARS
            anchor, report = (statistics.median(times[k]) for k in ("anchor", "report"))
            print(f"{n_bins:5d} {anchor:18.2f} {report:9.2f} {anchor / report:8.2f}x", flush=True)


if __name__ == "__main__":
    main()
