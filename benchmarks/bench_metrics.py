"""Benchmark of calib_pipeline.calibration.metrics against anchors measured in the same run.

Prints three figures (medians of >= 5 repeats, one CPU thread for every side of a ratio):

1. ECE (15 equal-width bins, l1, left closure as torchmetrics) on 1,000,000 x 100 float32
   logits: speed-up over torchmetrics' ``multiclass_calibration_error`` (target >= 5x) and
   time relative to one read of the logits, ``logits.max(dim=1)`` (target <= 2x).
2. The full ``calibration_metrics`` suite on 10,000 x 100: total time and the slowest metric.
3. ECE of 100 runs of 10,000 x 10 scored by ``calibration_metrics_batched`` vs a Python loop
   over torchmetrics (target >= 20x).

Usage: ``python benchmarks/bench_metrics.py [--repeats 5] [--quick]`` (``--quick`` shrinks
the sizes tenfold for a smoke run; its ratios are not the targets' figures).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torchmetrics.functional.classification import multiclass_calibration_error

from calib_pipeline.calibration import metrics


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``repeats`` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def random_predictions(shape: tuple[int, ...], n_classes: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(*shape, n_classes, generator=generator) * 3
    labels = torch.randint(0, n_classes, shape, generator=generator)
    return logits, labels


def bench_large_ece(n: int, repeats: int) -> None:
    logits, labels = random_predictions((n,), 100, seed=0)
    ours = median_seconds(lambda: metrics.ece(logits, labels, closure="left"), repeats)
    read = median_seconds(lambda: logits.max(dim=1), repeats)
    reference = median_seconds(lambda: multiclass_calibration_error(logits, labels, num_classes=100, n_bins=15), repeats)
    print(f"[1] ECE on {n:,} x 100 float32 logits (CPU, 1 thread)")
    print(f"    ours {ours * 1e3:8.1f} ms | torchmetrics {reference * 1e3:8.1f} ms | logits.max(dim=1) {read * 1e3:8.1f} ms")
    print(f"    speed-up over torchmetrics: {reference / ours:5.1f}x (target >= 5x)")
    print(f"    time / one read of the logits: {ours / read:5.2f}x (target <= 2x)")


def bench_suite(n: int, repeats: int) -> None:
    logits, labels = random_predictions((n,), 100, seed=1)
    total = median_seconds(lambda: metrics.calibration_metrics(logits, labels), repeats)
    per_metric = {key: median_seconds(lambda key=key: metrics.METRICS[key](logits, labels), repeats) for key in metrics.metric_names()}
    slowest = max(per_metric, key=per_metric.get)
    print(f"[2] full calibration_metrics suite ({len(per_metric)} keys) on {n:,} x 100")
    print(f"    total {total * 1e3:8.1f} ms; slowest metric alone: {slowest} {per_metric[slowest] * 1e3:8.1f} ms")
    ranked = sorted(per_metric.items(), key=lambda item: -item[1])
    print("    per metric (ms, each call validates and scores alone): " + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in ranked))


def bench_batched(runs: int, n: int, repeats: int) -> None:
    logits, labels = random_predictions((runs, n), 10, seed=2)
    batched = median_seconds(lambda: metrics.calibration_metrics_batched(logits, labels, keys=["ece"], closure="left"), repeats)

    def loop() -> list[torch.Tensor]:
        return [multiclass_calibration_error(logits[r], labels[r], num_classes=10, n_bins=15) for r in range(runs)]

    reference = median_seconds(loop, repeats)
    suite = median_seconds(lambda: metrics.calibration_metrics_batched(logits, labels, keys=[k for k in metrics.metric_names() if k not in ("sece", "smooth_ece")]), max(1, repeats // 2))
    print(f"[3] ECE of {runs} runs of {n:,} x 10")
    print(f"    batched {batched * 1e3:8.1f} ms | loop over torchmetrics {reference * 1e3:8.1f} ms")
    print(f"    speed-up: {reference / batched:5.1f}x (target >= 20x)")
    print(f"    (all keys but sece/smooth_ece, batched over the {runs} runs: {suite * 1e3:.1f} ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="tenfold smaller inputs (smoke run)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    scale = 10 if args.quick else 1
    bench_large_ece(1_000_000 // scale, args.repeats)
    bench_suite(10_000 // scale, args.repeats)
    bench_batched(100, 10_000 // scale, args.repeats)


if __name__ == "__main__":
    main()
