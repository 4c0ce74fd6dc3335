"""Post-hoc calibrator fit times against anchors measured in the same run.

1. Temperature scaling by NLL on 10,000 x 100 logits: ``temperature_nll`` against a torch
   LBFGS temperature fit configured as in Guo et al.'s public code (a scalar
   ``nn.Parameter`` starting at 1.5, ``optim.LBFGS(lr=0.01, max_iter=50)``, one
   ``step`` with a closure computing ``CrossEntropyLoss(logits / T)`` on float32
   logits). Both final NLLs are evaluated in float64; target: >= 10x faster with an
   equal or lower NLL.
2. Histogram binning, isotonic regression (top-label and one-vs-rest) and Dirichlet
   calibration against netcal 1.4.0 (``HistogramBinning(bins=15)``,
   ``IsotonicRegression()``, ``BetaCalibration(method="mle")`` — netcal's multiclass
   beta calibration is a multinomial logistic regression on log-probabilities, i.e.
   Dirichlet calibration without ODIR) on a 5,000 x 10 validation set. Both start from
   the same logits: netcal's timer includes the softmax (and top-label confidence and
   correctness) it needs as input; ours includes input validation.

Everything runs single-threaded (torch and BLAS) on both sides of each ratio; each
figure is the median of ``--repeats`` (>= 5) fits, the two sides timed in alternation.

Run: ``.venv/bin/python benchmarks/bench_posthoc.py [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import time
import warnings
from collections.abc import Callable

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from calib_pipeline.calibration.posthoc import build_calibrator


def synthetic_logits(n: int, k: int, *, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Float32 logits of an overconfident classifier (labels drawn from ``softmax(z/2.5)``)."""
    generator = torch.Generator().manual_seed(seed)
    base = 3.0 * torch.randn(n, k, generator=generator, dtype=torch.float64)
    labels = torch.multinomial(torch.softmax(base, dim=1), 1, generator=generator).squeeze(1)
    return (2.5 * base).to(torch.float32), labels


def interleaved_medians(
    fits: list[Callable[[], object]], repeats: int
) -> list[tuple[float, object]]:
    """Median wall time and last result of each fit, timed in alternation.

    One untimed warm-up call each, then ``repeats`` rounds that run every fit once, so
    load from other processes on a shared machine hits both sides of a ratio alike.
    """
    results = [fit() for fit in fits]
    times: list[list[float]] = [[] for _ in fits]
    for _ in range(repeats):
        for i, fit in enumerate(fits):
            start = time.perf_counter()
            results[i] = fit()
            times[i].append(time.perf_counter() - start)
    return [(statistics.median(t), r) for t, r in zip(times, results, strict=True)]


def guo_lbfgs_temperature(logits: torch.Tensor, labels: torch.Tensor) -> float:
    """Temperature by torch LBFGS as in Guo et al.'s code (lr 0.01, 50 iterations, T0 1.5)."""
    temperature = torch.nn.Parameter(torch.full((1,), 1.5))
    optimizer = torch.optim.LBFGS([temperature], lr=0.01, max_iter=50)
    criterion = torch.nn.CrossEntropyLoss()

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        loss = criterion(logits / temperature.unsqueeze(1).expand_as(logits), labels)
        loss.backward()
        return loss

    optimizer.step(closure)
    return float(temperature.detach())


def float64_nll(logits: torch.Tensor, labels: torch.Tensor, temperature: float) -> float:
    return float(torch.nn.functional.cross_entropy(logits.double() / temperature, labels))


def bench_temperature(repeats: int) -> None:
    logits, labels = synthetic_logits(10_000, 100, seed=0)
    (ours_s, ours), (guo_s, guo_t) = interleaved_medians(
        [
            lambda: build_calibrator("temperature_nll").fit(logits, labels),
            lambda: guo_lbfgs_temperature(logits, labels),
        ],
        repeats,
    )
    ours_nll, guo_nll = (
        float64_nll(logits, labels, ours.temperature),
        float64_nll(logits, labels, guo_t),
    )
    print("NLL temperature scaling, 10,000 x 100 logits")
    print(
        f"  temperature_nll   {ours_s * 1e3:9.2f} ms  T = {ours.temperature:.6f}"
        f"  NLL = {ours_nll:.12f}"
    )
    print(f"  Guo LBFGS anchor  {guo_s * 1e3:9.2f} ms  T = {guo_t:.6f}  NLL = {guo_nll:.12f}")
    verdict = "met" if guo_s / ours_s >= 10 and ours_nll <= guo_nll else "NOT met"
    print(
        f"  speed-up {guo_s / ours_s:.1f}x, NLL difference (ours - anchor) {ours_nll - guo_nll:.3e}"
        f"  [target >= 10x and <= 0: {verdict}]"
    )


def bench_netcal(repeats: int) -> None:
    try:
        from netcal.binning import HistogramBinning, IsotonicRegression
        from netcal.scaling import BetaCalibration
    except ImportError as error:  # netcal is a test-only dependency
        print(f"netcal comparison skipped: {error}")
        return
    logits, labels = synthetic_logits(5_000, 10, seed=1)
    labels_np = labels.numpy()

    def top_label_inputs() -> tuple[np.ndarray, np.ndarray]:
        probabilities = torch.softmax(logits.double(), dim=1).numpy()
        return probabilities.max(axis=1), (probabilities.argmax(axis=1) == labels_np).astype(
            np.int64
        )

    def probability_inputs() -> tuple[np.ndarray, np.ndarray]:
        return torch.softmax(logits.double(), dim=1).numpy(), labels_np

    cases = [
        (
            "histogram_binning (top-label)",
            "histogram_binning",
            top_label_inputs,
            lambda: HistogramBinning(bins=15),
        ),
        ("isotonic_top_label", "isotonic_top_label", top_label_inputs, IsotonicRegression),
        ("isotonic_one_vs_rest", "isotonic_one_vs_rest", probability_inputs, IsotonicRegression),
        (
            "dirichlet vs BetaCalibration(mle)",
            "dirichlet",
            probability_inputs,
            lambda: BetaCalibration(method="mle"),
        ),
    ]
    print("\nFit times against netcal 1.4.0, 5,000 x 10 validation set (netcal timed from the")
    print("same logits, i.e. including the softmax/top-label preprocessing it needs)")
    print(f"  {'calibrator':36s} {'ours (ms)':>11s} {'netcal (ms)':>12s} {'netcal/ours':>12s}")
    for label, name, prepare, make_netcal in cases:

        def netcal_fit(prepare=prepare, make_netcal=make_netcal) -> object:
            return make_netcal().fit(*prepare())

        try:
            with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
                warnings.simplefilter("ignore")
                (ours_s, calibrator), (netcal_s, _) = interleaved_medians(
                    [lambda name=name: build_calibrator(name).fit(logits, labels), netcal_fit],
                    repeats,
                )
        except Exception as error:  # noqa: BLE001 -- report any netcal failure, don't hide it
            print(f"  {label:36s} netcal failed: {type(error).__name__}: {error}")
            continue
        note = "" if calibrator.converged else "  (ours not converged)"
        print(
            f"  {label:36s} {ours_s * 1e3:11.2f} {netcal_s * 1e3:12.2f}"
            f" {netcal_s / ours_s:11.1f}x{note}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="fits per figure (median; >= 5)")
    repeats = max(parser.parse_args().repeats, 5)
    torch.set_num_threads(1)
    with threadpool_limits(limits=1):
        bench_temperature(repeats)
        bench_netcal(repeats)


if __name__ == "__main__":
    main()
