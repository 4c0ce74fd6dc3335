"""Binning of the metrics: bin edges, bin indices and per-bin sums, vectorised over runs.

Every binned metric reduces the per-bin count, confidence sum and number correct of
:func:`binned`: two ``bincount`` calls per block of samples over run-offset bin ids, no
Python loop over bins, samples or runs; the blocks are spread over the CPU threads. Options
arrive validated (``metrics`` checks them).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from calib_pipeline.calibration._metrics_kernels import _gather
from calib_pipeline.calibration._metrics_threads import run_blocks

SCHEMES = ("width", "mass")
NORMS = ("l1", "l2", "max")
CLOSURES = ("right", "left")

# Samples per block of the binning pass: the block's temporaries (<= 1 MiB each) stay in cache;
# measured faster than 2^16 or 2^18 (docs/performance.md).
_SAMPLE_BLOCK = 2**17


def _width_index(confidence: torch.Tensor, edges: torch.Tensor, closure: str) -> torch.Tensor:
    """Equal-width bin of every confidence, identical to ``bucketize`` on ``edges`` (int32).

    Arithmetic is faster than bucketize's binary search: g = trunc(c M - 1/4) is the
    bin or the one below it (the rounding of c M and of the linspace edges stays far below
    1/4 bin for M up to ~10^6), and one comparison with the upper edge of g (+inf for the
    last bin, which keeps c = 1 inside) decides between them. int32 and ``index_select``
    are faster than int64 and ``take`` (measured: docs/performance.md).
    """
    infinity = torch.tensor([torch.inf], dtype=edges.dtype, device=edges.device)
    upper = torch.cat([edges[1:-1], infinity])
    guess = confidence.mul(edges.shape[0] - 1).sub_(0.25).int()
    high = _gather(upper, guess)
    if closure == "right":  # bin j is (e_j, e_{j+1}], bin 0 also holds 0
        return guess.add_(confidence > high)
    return guess.add_(confidence >= high)  # [e_j, e_{j+1}), 1 in the last


def bin_edges(confidence: torch.Tensor, n_bins: int, scheme: str) -> torch.Tensor:
    """Bin edges, in the dtype they are compared in: 1 x (M+1) shared, or R x (M+1) per run.

    ``width``: edges j/M from ``torch.linspace`` in the confidence dtype (as torchmetrics and
    Guo et al.). ``mass`` (float64): interior edge j is the midpoint between the c_j-th and
    (c_j+1)-th smallest confidence, c_j = floor(j N / M), so bins hold floor-spaced equal
    counts; tied confidences are never split (the whole tie group goes below the edge under
    ``right`` closure, above it under ``left``), which can leave bins unequal or empty.
    """
    if scheme == "width":
        return torch.linspace(
            0, 1, n_bins + 1, dtype=confidence.dtype, device=confidence.device
        ).unsqueeze(0)
    values = confidence.to(torch.float64)
    ordered = torch.nn.functional.pad(values.sort(dim=-1).values, (1, 0))
    counts_below = torch.arange(1, n_bins, device=values.device) * values.shape[-1] // n_bins
    interior = (ordered[:, counts_below] + ordered[:, counts_below + 1]) / 2
    outer = torch.ones(values.shape[0], 1, dtype=torch.float64, device=values.device)
    return torch.cat([outer * 0, interior, outer], dim=1)


def bin_index(
    confidence: torch.Tensor, edges: torch.Tensor, scheme: str, closure: str
) -> torch.Tensor:
    """Bin of every confidence, given :func:`bin_edges` (for ``mass``, of the same runs).

    ``right`` closure: bin j is (e_j, e_{j+1}] and the first bin also holds 0; ``left``:
    [e_j, e_{j+1}) and the last bin also holds 1.
    """
    if scheme == "width":
        return _width_index(confidence, edges[0], closure)
    # searchsorted(right=True) counts edges <= x, which makes [lo, hi) bins
    return torch.searchsorted(
        edges[:, 1:-1].contiguous(),
        confidence.to(edges.dtype).contiguous(),
        right=closure == "left",
    )


def _sample_blocks(runs: int, n: int, on_cuda: bool) -> list[tuple[int, int, int, int]]:
    """(first run, last run + 1, first sample, last sample + 1) blocks of ~2^17 samples.

    Blocking keeps the per-sample temporaries of the binning in cache and out of fresh
    (page-faulting) allocations; on CUDA one block avoids per-launch overhead.
    """
    if on_cuda:
        return [(0, runs, 0, n)]
    if n >= _SAMPLE_BLOCK:
        return [
            (r, r + 1, s, min(s + _SAMPLE_BLOCK, n))
            for r in range(runs)
            for s in range(0, n, _SAMPLE_BLOCK)
        ]
    rows = _SAMPLE_BLOCK // n
    return [(r, min(r + rows, runs), 0, n) for r in range(0, runs, rows)]


def _count_block(
    confidence: torch.Tensor,
    correct: torch.Tensor,
    edges: torch.Tensor,
    n_bins: int,
    scheme: str,
    closure: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Bin counts and numbers correct (int64, R x M x 2 pairs) and float64 confidence sums
    (R x M) of a block of R runs: two bincounts over run-offset bin ids (bin + M * run)."""
    block_runs = confidence.shape[0]
    index = bin_index(confidence, edges, scheme, closure)
    offsets = n_bins * torch.arange(block_runs, dtype=index.dtype, device=index.device)
    ids = (index + offsets.unsqueeze(1)).reshape(-1)
    # ids 2 (bin + M run) + correct: one count gives both the bin counts and the hits
    pairs = torch.bincount(ids * 2 + correct.reshape(-1), minlength=2 * block_runs * n_bins)
    conf_sum = torch.bincount(
        ids, confidence.reshape(-1).to(torch.float64), minlength=block_runs * n_bins
    )
    return pairs.view(block_runs, n_bins, 2), conf_sum.view(block_runs, n_bins)


def binned(
    confidence: torch.Tensor, correct: torch.Tensor, n_bins: int, scheme: str, closure: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Edges (:func:`bin_edges`) and per-bin count, confidence sum and number correct.

    Counts and sums are R x M float64.

    Two bincounts per block (:func:`_count_block`): no loop over bins or runs. The blocks
    are counted on all threads (:func:`~._metrics_threads.run_blocks`) and added up in
    block order, so the float64 sums do not depend on which thread finished first.
    """
    runs, n = confidence.shape
    edges = bin_edges(confidence, n_bins, scheme)
    blocks = _sample_blocks(runs, n, confidence.is_cuda)
    counted: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def count_blocks(indices: Iterator[int]) -> None:
        for index in indices:
            first, last, start, stop = blocks[index]
            counted[index] = _count_block(
                confidence[first:last, start:stop],
                correct[first:last, start:stop],
                edges if scheme == "width" else edges[first:last],
                n_bins,
                scheme,
                closure,
            )

    run_blocks(count_blocks, len(blocks), confidence.is_cuda)
    totals = torch.zeros(3, runs, n_bins, dtype=torch.float64, device=confidence.device)
    for index, (first, last, _, _) in enumerate(blocks):
        pairs, conf_sum = counted[index]
        totals[0, first:last] += pairs.sum(-1)
        totals[1, first:last] += conf_sum
        totals[2, first:last] += pairs[..., 1]
    return edges, totals[0], totals[1], totals[2]


def binned_error(
    confidence: torch.Tensor,
    correct: torch.Tensor,
    n_bins: int,
    scheme: str,
    norm: str,
    closure: str,
) -> torch.Tensor:
    """ECE_{bin,p} of every run (Karandikar et al. eq. 6; Guo et al. for l1, max = MCE).

    l1: sum_b (n_b/N) |acc_b - conf_b|; l2: sqrt(sum_b (n_b/N) (acc_b - conf_b)^2);
    max: max over non-empty bins of |acc_b - conf_b|.
    """
    _, count, conf_sum, hits = binned(confidence, correct, n_bins, scheme, closure)
    n = confidence.shape[-1]
    gap = (hits - conf_sum).abs() / count.clamp_min(1)
    if norm == "l1":
        return (hits - conf_sum).abs().sum(-1) / n
    if norm == "l2":
        return ((count / n) * gap.square()).sum(-1).sqrt()
    return gap.amax(-1)  # empty bins have gap 0
