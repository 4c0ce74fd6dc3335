"""Benchmark of calib_pipeline.calibration.metrics against anchors measured in the same run.

Prints four figures (medians of >= 5 alternating rounds, the same number of CPU threads --
one by default for 1-3 -- for every side of a ratio):

1. ECE (15 equal-width bins, l1, left closure as torchmetrics) on 1,000,000 x 100 float32
   logits: speed-up over torchmetrics' ``multiclass_calibration_error`` (target >= 5x) and
   time relative to one read of the logits, ``logits.max(dim=1)`` (target <= 2x).
2. The full ``calibration_metrics`` suite on 10,000 x 100: total time and the slowest metric.
3. ECE of 100 runs of 10,000 x 10 scored by ``calibration_metrics_batched`` vs a Python loop
   over torchmetrics (target >= 20x), with the cost per logit of its two stages.
4. ECE of [1] vs torchmetrics (l1, 15 bins) at torch's default thread count (one per core),
   on a quiet machine and beside competing busy processes that the script starts and stops
   (by default 1, then one per core: load ~2x the cores): target >= 5x quiet, >= 1x loaded.
   Each condition also prints the mean number of runnable tasks on the machine while it ran
   (the script's own threads included) and the 1-minute load average at its end: a "quiet"
   row on a shared machine is only as quiet as those say.
5. (``--breakdown`` only) ECE's time at the default thread count in units of one read of the
   logits: the compiled scan (numba) and the eager torch scan that runs without numba, and
   each pass of the eager scan on one thread.

Usage: ``python benchmarks/bench_metrics.py [--repeats 5] [--threads 1] [--quick]
[--busy 0,1,2] [--competitor spin|matmul] [--only-load] [--breakdown]`` (``--quick`` shrinks the
sizes tenfold for a smoke run; its ratios are not the targets' figures).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torchmetrics.functional.classification import multiclass_calibration_error

from calib_pipeline.calibration import _metrics_binning, _metrics_kernels, metrics
from calib_pipeline.calibration._metrics_exp2 import LOG2_E


def median_seconds(contenders: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median wall time of each contender over ``repeats`` rounds, after one warm-up round.

    The contenders alternate within every round, so load from other processes on the
    machine affects both sides of a ratio alike.
    """
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for round_ in range(repeats + 1):
        for name, fn in contenders.items():
            start = time.perf_counter()
            fn()
            if round_:
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def random_predictions(
    shape: tuple[int, ...], n_classes: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(*shape, n_classes, generator=generator) * 3
    labels = torch.randint(0, n_classes, shape, generator=generator)
    return logits, labels


def bench_large_ece(n: int, repeats: int) -> None:
    logits, labels = random_predictions((n,), 100, seed=0)
    t = median_seconds(
        {
            "ours": lambda: metrics.ece(logits, labels, closure="left"),
            "read": lambda: logits.max(dim=1),
            "torchmetrics": lambda: multiclass_calibration_error(
                logits, labels, num_classes=100, n_bins=15
            ),
        },
        repeats,
    )
    print(f"[1] ECE on {n:,} x 100 float32 logits (CPU)")
    ms = {name: value * 1e3 for name, value in t.items()}
    print(
        f"    ours {ms['ours']:8.1f} ms | torchmetrics {ms['torchmetrics']:8.1f} ms"
        f" | logits.max(dim=1) {ms['read']:8.1f} ms"
    )
    print(f"    speed-up over torchmetrics: {t['torchmetrics'] / t['ours']:5.1f}x (target >= 5x)")
    print(f"    time / one read of the logits: {t['ours'] / t['read']:5.2f}x (target <= 2x)")


def bench_suite(n: int, repeats: int) -> None:
    logits, labels = random_predictions((n,), 100, seed=1)
    contenders = {
        key: (lambda key=key: getattr(metrics, key)(logits, labels))
        for key in metrics.metric_names()
    }
    contenders["suite"] = lambda: metrics.calibration_metrics(logits, labels)
    t = median_seconds(contenders, repeats)
    total = t.pop("suite")
    slowest = max(t, key=t.get)
    print(f"[2] full calibration_metrics suite ({len(t)} keys) on {n:,} x 100")
    print(
        f"    total {total * 1e3:8.1f} ms; slowest metric alone: {slowest}"
        f" {t[slowest] * 1e3:.1f} ms"
    )
    ranked = sorted(t.items(), key=lambda item: -item[1])
    print(
        "    per metric (ms, each call validates and scores alone): "
        + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in ranked)
    )


def bench_batched(runs: int, n: int, repeats: int) -> None:
    logits, labels = random_predictions((runs, n), 10, seed=2)

    def loop() -> list[torch.Tensor]:
        return [
            multiclass_calibration_error(logits[r], labels[r], num_classes=10, n_bins=15)
            for r in range(runs)
        ]

    def statistics_stage() -> _metrics_kernels.Predictions:
        pred = _metrics_kernels.Predictions.batched(logits, labels, "logits")
        pred.confidence  # noqa: B018 -- validation and the top-label scan
        return pred

    pred = statistics_stage()
    cheap_keys = [k for k in metrics.metric_names() if k not in ("sece", "smooth_ece")]
    t = median_seconds(
        {
            "batched": lambda: metrics.calibration_metrics_batched(
                logits, labels, keys=["ece"], closure="left"
            ),
            "loop": loop,
            "statistics": statistics_stage,
            "binning": lambda: _metrics_binning.binned_error(
                pred.confidence, pred.correct, 15, "width", "l1", "left"
            ),
            "suite": lambda: metrics.calibration_metrics_batched(logits, labels, keys=cheap_keys),
        },
        repeats,
    )
    per_logit = {name: value / logits.numel() * 1e9 for name, value in t.items()}
    print(f"[3] ECE of {runs} runs of {n:,} x 10")
    print(f"    batched {t['batched'] * 1e3:8.1f} ms | torchmetrics loop {t['loop'] * 1e3:8.1f} ms")
    print(f"    speed-up: {t['loop'] / t['batched']:5.1f}x (target >= 20x)")
    print(
        f"    ns per logit: loop {per_logit['loop']:.2f} (target {per_logit['loop'] / 20:.2f})"
        f" | ours {per_logit['batched']:.2f}, of which validation + top-label scan"
        f" {per_logit['statistics']:.2f}, binning {per_logit['binning']:.2f}"
    )
    print(f"    (all keys but sece and smooth_ece, {runs} runs batched: {t['suite'] * 1e3:.1f} ms)")


# A competing process keeps one core busy: pure Python, or torch matrix products on one thread
# (which also compete for caches and memory bandwidth).
COMPETITORS = {
    "spin": "while True: pass",
    "matmul": (
        "import torch; torch.set_num_threads(1); a = torch.randn(512, 512)\nwhile True: a @ a"
    ),
}


def runnable_tasks() -> int:
    """Tasks runnable on the machine now (the 4th field of /proc/loadavg, less the reader)."""
    with open("/proc/loadavg") as file:
        return int(file.read().split()[3].split("/")[0]) - 1


@contextmanager
def competing(busy: int, competitor: str) -> Iterator[list[int]]:
    """``busy`` competing processes for the duration of the block; yields a list that fills
    with samples of :func:`runnable_tasks` (every 0.2 s) while the block runs."""
    processes = [
        subprocess.Popen([sys.executable, "-c", COMPETITORS[competitor]]) for _ in range(busy)
    ]
    samples: list[int] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.2):
            samples.append(runnable_tasks())

    sampler = threading.Thread(target=sample, daemon=True)
    try:
        time.sleep(1.0 if busy else 0.0)  # let the competitors start
        if os.path.exists("/proc/loadavg"):  # Linux; elsewhere the column stays nan
            sampler.start()
        yield samples
    finally:
        done.set()
        for process in processes:
            process.kill()
            process.wait()
        if sampler.is_alive():
            sampler.join()


def bench_loaded_ece(n: int, repeats: int, busy_counts: list[int], competitor: str) -> None:
    logits, labels = random_predictions((n,), 100, seed=0)
    contenders = {
        "ours": lambda: metrics.ece(logits, labels, closure="left"),
        "torchmetrics": lambda: multiclass_calibration_error(
            logits, labels, num_classes=100, n_bins=15, norm="l1"
        ),
    }
    print(
        f"[4] ECE on {n:,} x 100 under load: {torch.get_num_threads()} torch thread(s),"
        f" {os.cpu_count()} core(s), competitors: {competitor}"
    )
    print(f"    1-minute load average before: {os.getloadavg()[0]:.2f}")
    print("    condition   runnable  load-1m    ours ms  torchmetrics ms  speed-up  target")
    for busy in busy_counts:
        with competing(busy, competitor) as samples:
            t = median_seconds(contenders, repeats)
        runnable = statistics.mean(samples) if samples else float("nan")
        name = "quiet" if busy == 0 else f"{busy} busy"
        target = 5.0 if busy == 0 else 1.0
        print(
            f"    {name:10s}  {runnable:8.1f}  {os.getloadavg()[0]:7.2f}"
            f"  {t['ours'] * 1e3:9.1f}  {t['torchmetrics'] * 1e3:15.1f}"
            f"  {t['torchmetrics'] / t['ours']:7.2f}x  >= {target:g}x"
        )
        if busy == 0 and runnable > torch.get_num_threads() + 0.5:
            print("    (not quiet: other processes were running; rerun on an idle machine)")


def eager_scan(logits: torch.Tensor, labels: torch.Tensor) -> object:
    """The scan as it runs without numba: the eager torch kernels, block by block."""
    fused = _metrics_kernels._fused
    _metrics_kernels._fused = lambda: None
    try:
        return _metrics_kernels._scan(logits, labels, True, None)
    finally:
        _metrics_kernels._fused = fused


def bench_breakdown(n: int, repeats: int) -> None:
    """Where the ECE's time goes, in units of one read of the logits (``amax`` over rows):
    at the current thread count, and per pass of the scan's blocks on one thread."""
    logits, labels = random_predictions((n,), 100, seed=0)
    probabilities = torch.empty_like(logits)
    t = median_seconds(
        {
            "read": lambda: torch.amax(logits, dim=1),
            # torch's fused row kernel (max, exp, sum, scale in one read of each row): what
            # an eager scan could at best build on (it yields only part of what is needed)
            "softmax": lambda: torch.softmax(logits, 1, out=probabilities),
            "scan": lambda: _metrics_kernels._scan(logits, labels, True, None),
            "eager scan": lambda: eager_scan(logits, labels),
            "ece": lambda: metrics.ece(logits, labels, closure="left"),
            "torchmetrics": lambda: multiclass_calibration_error(
                logits, labels, num_classes=100, n_bins=15, norm="l1"
            ),
        },
        repeats,
    )
    read = t["read"]
    print(
        f"[5] where ECE's time goes on {n:,} x 100 ({torch.get_num_threads()} thread(s)),"
        " in reads of the logits (amax over rows)"
    )
    for name in ("read", "softmax", "scan", "eager scan", "ece", "torchmetrics"):
        print(f"    {name:12s} {t[name] * 1e3:8.1f} ms = {t[name] / read:5.2f} reads")
    print(
        f"    ECE at 5x torchmetrics must take <= {t['torchmetrics'] / 5 * 1e3:.1f} ms ="
        f" {t['torchmetrics'] / 5 / read:.2f} reads, binning and validation included;"
        f" a kernel that only read the logits once would be {t['torchmetrics'] / read:.1f}x"
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    rows = _metrics_kernels._block_rows(n, 100, on_cuda=False)
    blocks = [logits[start : start + rows] for start in range(0, n - rows + 1, rows)]
    work, peak = torch.empty(rows, 100), torch.empty(rows)
    mass, ones = torch.empty(rows), torch.ones(100)
    # realistic inputs of the later passes (the first block's), never overwritten
    difference = blocks[0] - blocks[0].amax(dim=1, keepdim=True)
    scaled = difference * LOG2_E
    powers = scaled.exp2()
    index = torch.arange(rows) * 100 + labels[:rows]
    label_score = torch.empty(rows)

    def each_block(step: Callable[[torch.Tensor], object]) -> Callable[[], None]:
        return lambda: [step(block) for block in blocks]

    passes = median_seconds(
        {
            "amax (reads the block)": each_block(lambda b: torch.amax(b, dim=1, out=peak)),
            "sub (block - max)": each_block(lambda b: torch.sub(b, peak.unsqueeze(1), out=work)),
            "mul by log2 e": each_block(lambda b: torch.mul(difference, LOG2_E, out=work)),
            "amin (NaN/inf witness)": each_block(lambda b: torch.amin(scaled)),
            "exp2": each_block(lambda b: torch.exp2(scaled, out=work)),
            "mv (row sums)": each_block(lambda b: torch.mv(powers, ones, out=mass)),
            "label scores": each_block(
                lambda b: torch.index_select(b.reshape(-1), 0, index, out=label_score)
            ),
        },
        repeats,
    )
    torch.set_num_threads(threads)
    print(
        f"    one thread, per pass of the eager scan over all {len(blocks)} blocks of {rows}"
        " rows (it runs these in place on one buffer; here the later ones read another)"
    )
    for name, seconds in passes.items():
        print(f"      {name:24s} {seconds * 1e3:7.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="tenfold smaller inputs (smoke run)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads of [1]-[3], the same for every side",
    )
    parser.add_argument(
        "--busy",
        default=f"0,1,{os.cpu_count()}",
        help="[4]: comma-separated numbers of competing busy processes (0 = quiet)",
    )
    parser.add_argument("--competitor", choices=sorted(COMPETITORS), default="spin")
    parser.add_argument("--only-load", action="store_true", help="run [4] only")
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="run [5] only: ECE's time in reads of the logits, per pass",
    )
    args = parser.parse_args()
    default_threads = torch.get_num_threads()
    scale = 10 if args.quick else 1
    if args.breakdown:
        bench_breakdown(1_000_000 // scale, args.repeats)
        return
    if not args.only_load:
        torch.set_num_threads(args.threads)
        print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU thread(s)")
        bench_large_ece(1_000_000 // scale, args.repeats)
        bench_suite(10_000 // scale, args.repeats)
        bench_batched(100, 10_000 // scale, args.repeats)
    torch.set_num_threads(default_threads)
    busy_counts = [int(count) for count in args.busy.split(",")]
    bench_loaded_ece(1_000_000 // scale, args.repeats, busy_counts, args.competitor)


if __name__ == "__main__":
    main()
