"""Per-sample statistics of the metrics: the top-label scan kernels and ``Predictions``.

``Predictions`` holds the validated R x N x K scores of R runs and computes, lazily and
once, what the metrics reduce: top-label confidence and correctness (one cache-blocked scan
of the scores, :func:`_scan`, its blocks spread over the CPU threads), log-probabilities
and probabilities. The metrics themselves live in ``_metrics_hard`` and ``_metrics_soft``;
``metrics`` is the public module.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from calib_pipeline.calibration._metrics_exp2 import LOG2_E
from calib_pipeline.calibration._metrics_threads import run_blocks
from calib_pipeline.calibration.validation import (
    check_batched_logits_labels,
    check_finite,
    check_logits_labels,
)

# Below K = 24 classes a block of rows is scanned transposed (see _scan_columns); measured
# faster than row-wise for K = 2..20, slower from K = 24 on (docs/performance.md).
SHORT_ROWS = 24
# Logits per block (each block is scanned by one CPU thread): 2^20 floats (4 MiB; with the
# work buffer in L3 cache) stay in cache across the max / exp2 / sum passes, so the logits are
# read from memory once, while the per-block overhead (~25 torch calls of a few us each,
# under the GIL while threads dispatch) stays a few percent. Smaller blocks measured slower
# on 2 threads, 2^21 (twice the cache) barely faster (1,000,000 x 100; docs/performance.md).
_BLOCK_ELEMENTS = 2**20


def _scan_rows(
    block: torch.Tensor,
    peak: torch.Tensor,
    mass: torch.Tensor | None,
    work: torch.Tensor,
    bounds: torch.Tensor | None = None,
) -> None:
    """Row max of an n x K block into ``peak``; for logits, sum_k 2^((z_k - max) log2 e).

    The sums go to ``mass``; they are computed over all rows of the ``work`` buffer (rows x
    K, and ``mass`` has rows entries), past n in a short last block (see
    :func:`_block_rows`). exp2 of the scaled difference is faster than exp; the
    row sum as a matrix-vector product is faster than ``sum(dim=1)``. ``bounds``, if given
    (logits), receives the block's :func:`_finiteness_witness`.
    """
    size = block.shape[0]
    torch.amax(block, dim=1, out=peak)
    if mass is not None:
        scaled = torch.sub(block, peak.unsqueeze(1), out=work[:size]).mul_(LOG2_E)
        if bounds is not None:
            _finiteness_witness(scaled, peak, bounds)
        ones = torch.ones(block.shape[1], dtype=block.dtype, device=block.device)
        torch.mv(work.exp2_(), ones, out=mass)


def _scan_columns(
    block: torch.Tensor,
    peak: torch.Tensor,
    mass: torch.Tensor | None,
    work: torch.Tensor,
    bounds: torch.Tensor | None = None,
) -> None:
    """:func:`_scan_rows` for short rows (K < ``SHORT_ROWS``) on CPU; ``work`` is K x rows.

    torch does not vectorise reductions over short rows, so the block is copied transposed
    into ``work`` (``stack`` of its columns is faster than ``copy_``) and max, exp2 and a
    pairwise sum run along dim 0, vectorised across rows.
    """
    size = block.shape[0]
    columns = torch.stack(block.unbind(1), out=work[:, :size])
    torch.amax(columns, dim=0, out=peak)
    if mass is not None:
        torch.sub(columns, peak, out=columns).mul_(LOG2_E)
        if bounds is not None:
            _finiteness_witness(columns, peak, bounds)
        mass.copy_(_pairwise_sum_rows(work.exp2_()))


def _finiteness_witness(scaled: torch.Tensor, peak: torch.Tensor, bounds: torch.Tensor) -> None:
    """Two numbers into ``bounds`` that are finite when a block's logits are: the smallest
    scaled difference (z - max) log2 e and the largest row max.

    NaN or +inf in a row makes its max NaN or +inf (``amax`` propagates NaN); -inf makes a
    difference -inf, or NaN if the whole row is -inf. Finite logits give finite values,
    unless a difference overflows (logits beyond ~1e38): a false alarm that the exact check
    then clears. Reading the scaled differences, which are in cache, replaced an
    ``aminmax`` of the block that read the logits from memory once more: the scan measured
    faster (docs/performance.md).
    """
    torch.amin(scaled, out=bounds[0])
    torch.amax(peak, out=bounds[1])


def _pairwise_sum_rows(work: torch.Tensor) -> torch.Tensor:
    """Sum of the rows of ``work`` (overwritten), adding halves pairwise in place.

    Rounding error O(log K), as a row-wise vectorised sum, rather than the O(K) of
    ``sum(dim=0)``, which adds the rows in sequence.
    """
    rows = work.shape[0]
    while rows > 1:
        half = rows // 2
        work[:half] += work[rows - half : rows]
        rows -= half
    return work[0]


def _block_rows(n: int, n_classes: int, on_cuda: bool) -> int:
    """Rows per block of the top-label scan: all n on CUDA; on CPU a cache-sized block for
    one thread (:func:`~._metrics_threads.run_blocks` gives each thread whole blocks), at
    most n, a multiple of 64 rows.

    torch's exp2, sum and mv round differently (by an ulp) in their scalar remainder loops
    than in their vector loops. The scans apply them to whole blocks of a multiple of 64
    rows (a short last block is padded with stale rows of the work buffer), which split
    into whole vectors, so that a row's confidence does not depend on its position (a
    batched run scores exactly as the single run). One thread runs all ops of a block, so
    this holds on any number of threads (it did on 1 or 2 when the ops of a block were
    split between the threads).
    """
    if on_cuda:
        return n
    share = max(1, _BLOCK_ELEMENTS // (64 * n_classes))
    return min(share, -(-n // 64)) * 64


def _finish_block(
    top: torch.Tensor,
    label_score: torch.Tensor,
    mass: torch.Tensor | None,
    correct: torch.Tensor,
    suspect: torch.Tensor,
) -> None:
    """Confidence (for logits 1 / sum_k exp(z_k - max), in place of ``mass``), correctness
    and the rows whose correctness argmax must confirm (see :func:`_top_label_from_scores`),
    of the rows of one scanned block: elementwise, so they need no pass of their own.
    """
    torch.eq(label_score, top, out=correct)
    if mass is None:
        torch.le(top, 0.51, out=suspect)  # two maxima need 2 p <= 1 (+ a tolerance <= 1e-2)
    else:
        torch.ge(mass, 2, out=suspect)
        mass.reciprocal_()
    suspect &= correct


def _scan(
    flat: torch.Tensor,
    targets: torch.Tensor,
    logits: bool,
    on_non_finite: Callable[[], None] | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Confidence, correctness by label score (the label scores the row maximum) and which
    of those rows argmax must confirm (two classes could tie for the maximum), of n x K
    scores (:func:`_finish_block`); for CPU logits the compiled scan (:func:`_scan_fused`),
    whose correctness is exact (the first maximal class), and None for the rows to confirm.

    One cache-sized block at a time, so each block is read from memory once and its
    temporaries stay in a work buffer that each thread reuses; the blocks are spread over
    the threads by :func:`~._metrics_threads.run_blocks`. ``on_non_finite``, if given, is
    called (and raises) when a score may be NaN or inf: for logits when a block's
    :func:`_finiteness_witness`, taken from its statistics, is not finite, instead of a
    separate pass that reads all scores once more.
    """
    if logits and flat.device.type == "cpu" and flat.dtype in FUSED_DTYPES and _fused() is not None:
        return _scan_fused(flat, targets, on_non_finite)
    n, n_classes = flat.shape
    dtype, device = flat.dtype, flat.device
    rows = _block_rows(n, n_classes, flat.is_cuda)
    columns = n_classes < SHORT_ROWS and not flat.is_cuda
    scan = _scan_columns if columns else _scan_rows
    n_blocks = -(-n // rows)
    top = torch.empty(n, dtype=dtype, device=device)
    label_score = torch.empty_like(top)
    mass = torch.empty(n_blocks * rows, dtype=dtype, device=device) if logits else None
    correct = torch.empty(n, dtype=torch.bool, device=device)
    suspect = torch.empty_like(correct)
    if on_non_finite is not None and not logits:
        on_non_finite()  # probabilities have no scaled differences to witness: check exactly
    checked = on_non_finite is not None and logits
    bounds = torch.zeros(n_blocks, 2, dtype=dtype, device=device) if checked else None
    row_offsets = torch.arange(rows, device=device) * n_classes

    def scan_blocks(blocks: Iterator[int]) -> None:
        # zeros: the rows past a short last block are computed too
        work = torch.zeros(
            (n_classes, rows) if columns else (rows, n_classes), dtype=dtype, device=device
        )
        for index in blocks:
            start = index * rows
            block = flat[start : start + rows]
            size = block.shape[0]
            part = slice(start, start + size)
            block_top, block_label_score = top[part], label_score[part]
            block_mass = None if mass is None else mass[start : start + rows]
            scan(block, block_top, block_mass, work, None if bounds is None else bounds[index])
            label_index = row_offsets[:size] + targets[part]
            torch.index_select(block.reshape(-1), 0, label_index, out=block_label_score)
            _finish_block(
                block_top,
                block_label_score,
                None if block_mass is None else block_mass[:size],
                correct[part],
                suspect[part],
            )

    run_blocks(scan_blocks, n_blocks, flat.is_cuda)
    if bounds is not None and not bool(torch.isfinite(bounds).all()):
        on_non_finite()
    return top if mass is None else mass[:n], correct, suspect


# dtypes of logits that the compiled scan of ``_metrics_fused`` takes on CPU
FUSED_DTYPES = (torch.float32, torch.float64)


@functools.cache
def _fused() -> Any:
    """The ``_metrics_fused`` module (imported at the first scan, as it imports numba), or
    None where numba is missing or fails to import: then the eager scan runs, after a
    warning that says why, once per process."""
    if importlib.util.find_spec("numba") is None:
        reason = "numba is not installed"
    else:
        try:
            return importlib.import_module("calib_pipeline.calibration._metrics_fused")
        except ImportError as error:  # e.g. a numba built for another NumPy
            reason = f"numba failed to import ({error})"
    warnings.warn(
        f"{reason}: the metrics scan CPU logits with the eager torch kernels (same results"
        " to rounding, about half as fast); install the project's dependencies to get it",
        RuntimeWarning,
        stacklevel=4,
    )
    return None


def _scan_fused(
    flat: torch.Tensor,
    targets: torch.Tensor,
    on_non_finite: Callable[[], None] | None,
) -> tuple[torch.Tensor, torch.Tensor, None]:
    """:func:`_scan` of float32/float64 logits on CPU by the compiled kernel of
    ``_metrics_fused``, which reads each row once; blocks as :func:`_scan` cuts them, spread
    over the threads by :func:`~._metrics_threads.run_blocks`, each thread with its own work
    buffer. ``on_non_finite`` is called when a block's witness is not finite.
    """
    fused = _fused()
    n, n_classes = flat.shape
    flat, targets = flat.contiguous(), targets.contiguous()
    rows = _block_rows(n, n_classes, on_cuda=False)
    n_blocks = -(-n // rows)
    confidence = torch.empty(n, dtype=flat.dtype)
    correct = torch.empty(n, dtype=torch.bool)
    dtype = flat.numpy().dtype
    witness = np.zeros(n_blocks, dtype=dtype)
    numbers, coefficients = fused.constants(dtype)
    short = n_classes < fused.SHORT_ROWS

    def scan_blocks(blocks: Iterator[int]) -> None:
        if short:
            chunk = fused.SHORT_CHUNK_ROWS
            kernel = fused.scan_block_short
            buffers = (
                np.empty((n_classes, chunk), dtype=dtype),
                np.empty(chunk, dtype=dtype),
                np.empty(chunk, dtype=dtype),
                np.empty(chunk, dtype=np.int64),
            )
        else:
            chunk = fused.chunk_rows(n_classes)
            kernel = fused.scan_block
            buffers = (np.empty(chunk * n_classes, dtype=dtype), np.empty(chunk, dtype=dtype))
        for index in blocks:
            part = slice(index * rows, min(n, (index + 1) * rows))
            witness[index] = kernel(
                flat[part].numpy(),
                targets[part].numpy(),
                confidence[part].numpy(),
                correct[part].numpy(),
                *buffers,
                numbers,
                coefficients,
            )

    run_blocks(scan_blocks, n_blocks, on_cuda=False)
    if on_non_finite is not None and not np.isfinite(witness).all():
        on_non_finite()
    return confidence, correct, None


def _top_label_from_scores(
    scores: torch.Tensor,
    labels: torch.Tensor,
    inputs: str,
    on_non_finite: Callable[[], None] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Confidence max_k p_k and correctness 1[argmax_k p_k = y] of every sample.

    Works on detached ``(..., K)`` scores in their dtype (:func:`_scan`; ``on_non_finite``
    as there). For logits the confidence is 1 / sum_k exp(z_k - max_j z_j). Ties for the
    maximum resolve to the first maximal class (torch/NumPy argmax): a sample is correct iff
    its label scores the maximum and no class before it does. The compiled scan of CPU
    logits decides this in its kernel; after the eager scan, where two classes could tie
    (sum_k exp(z_k - max) >= 2 for logits, p_max <= 1/2 + tolerance for probabilities),
    argmax confirms the rows whose label scores the maximum.
    """
    flat = scores.reshape(-1, scores.shape[-1])
    targets = labels.reshape(-1)
    confidence, correct, unconfirmed = _scan(flat, targets, inputs == "logits", on_non_finite)
    suspect = None if unconfirmed is None else unconfirmed.nonzero().squeeze(1)
    if suspect is not None and suspect.numel():
        argmax = flat.index_select(0, suspect).argmax(dim=1)
        correct[suspect] = argmax == targets.index_select(0, suspect)
    return confidence.reshape(labels.shape), correct.reshape(labels.shape)


class Predictions:
    """Validated scores of R runs (R x N x K) and their per-sample statistics, computed once.

    Logits are checked for NaN/inf by the top-label scan on its way through them, or by
    one ``aminmax`` pass at the first other use of :attr:`scores`, whichever comes first.

    :meth:`resample` (B x N indices into the samples of a single run) makes a bootstrap
    view: per-sample statistics are gathered from the parent and the full scores are
    gathered only if a metric needs them.
    """

    def __init__(
        self,
        scores: torch.Tensor,
        labels: torch.Tensor,
        inputs: str,
        unchecked: torch.Tensor | None = None,
    ) -> None:
        self._scores = scores
        self.labels = labels
        self.inputs = inputs
        # the scores as the caller shaped them (for the error message), while not yet
        # checked for NaN/inf
        self._unchecked = unchecked
        self._cache: dict[str, torch.Tensor] = {}

    @classmethod
    def single(cls, logits: Any, labels: Any, inputs: str) -> Predictions:
        deferred = inputs == "logits"
        scores, targets = check_logits_labels(logits, labels, inputs=inputs, finite=not deferred)
        return cls(scores.unsqueeze(0), targets.unsqueeze(0), inputs, scores if deferred else None)

    @classmethod
    def batched(cls, logits: Any, labels: Any, inputs: str) -> Predictions:
        deferred = inputs == "logits"
        scores, targets = check_batched_logits_labels(
            logits, labels, inputs=inputs, finite=not deferred
        )
        return cls(scores, targets, inputs, scores if deferred else None)

    def resample(self, index: torch.Tensor) -> Predictions:
        """Bootstrap view: run r of the result is run 0 at samples ``index[r]``."""
        return _ResampledPredictions(self, index)

    def cached(self, key: str, compute: Callable[[], torch.Tensor]) -> torch.Tensor:
        """``compute()``, computed at the first request of ``key`` only (shared by metrics)."""
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    def per_sample(self, key: str, compute: Callable[[Predictions], torch.Tensor]) -> torch.Tensor:
        """R x N per-sample statistic ``compute(self)``, computed once; a resampled view
        gathers its parent's instead of gathering the N x K scores it is computed from."""
        return self.cached(key, lambda: compute(self))

    def _check_finite(self) -> None:
        if self._unchecked is not None:
            check_finite(self._unchecked, "logits")
            self._unchecked = None

    @property
    def scores(self) -> torch.Tensor:
        """R x N x K validated scores (raises ``ValueError`` for NaN/inf logits)."""
        self._check_finite()
        return self._scores

    @property
    def n_samples(self) -> int:
        return self.labels.shape[-1]

    @property
    def n_classes(self) -> int:
        return self._scores.shape[-1]

    def _top_label(self) -> torch.Tensor:
        confidence, correct = _top_label_from_scores(
            self._scores.detach(),
            self.labels,
            self.inputs,
            None if self._unchecked is None else self._check_finite,
        )
        self._unchecked = None
        self._cache["correct"] = correct
        return confidence

    @property
    def confidence(self) -> torch.Tensor:
        """R x N top-label confidence, detached, in the scores' dtype."""
        return self.cached("confidence", self._top_label)

    @property
    def correct(self) -> torch.Tensor:
        """R x N bool: prediction (first maximal class) equals the label."""
        self.confidence  # noqa: B018 -- computes and caches correctness with it
        return self._cache["correct"]

    @property
    def log_probs(self) -> torch.Tensor:
        """R x N x K log-probabilities, detached (log 0 = -inf for probability input)."""

        def compute() -> torch.Tensor:
            scores = self.scores.detach()
            return torch.log_softmax(scores, -1) if self.inputs == "logits" else scores.log()

        return self.cached("log_probs", compute)

    @property
    def probs(self) -> torch.Tensor:
        """R x N x K probabilities, detached."""

        def compute() -> torch.Tensor:
            scores = self.scores.detach()
            return self.log_probs.exp() if self.inputs == "logits" else scores

        return self.cached("probs", compute)


def _gather(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``values[index]`` for an index of any shape into dim 0 of ``values``: index_select
    of the flattened index. On a quiet CPU at least as fast as advanced indexing; beside
    busy processes advanced indexing stalls in its parallel regions, and
    ``bootstrap_ci`` with it (measured: docs/performance.md)."""
    picked = values.index_select(0, index.reshape(-1))
    return picked.view(*index.shape, *values.shape[1:])


class _ResampledPredictions(Predictions):
    """Resampled runs of a single-run parent; gathers the parent's cached statistics."""

    def __init__(self, parent: Predictions, index: torch.Tensor) -> None:
        self.parent = parent
        self.index = index
        self.inputs = parent.inputs
        self.labels = _gather(parent.labels[0], index)
        self._cache = {}

    @property
    def scores(self) -> torch.Tensor:  # type: ignore[override]
        return self.cached("scores", lambda: _gather(self.parent.scores[0], self.index))

    @property
    def n_classes(self) -> int:
        return self.parent.n_classes

    def _top_label(self) -> torch.Tensor:
        self._cache["correct"] = _gather(self.parent.correct[0], self.index)
        return _gather(self.parent.confidence[0], self.index)

    @property
    def log_probs(self) -> torch.Tensor:
        return self.cached("log_probs", lambda: _gather(self.parent.log_probs[0], self.index))

    def per_sample(self, key: str, compute: Callable[[Predictions], torch.Tensor]) -> torch.Tensor:
        return self.cached(
            key, lambda: _gather(self.parent.per_sample(key, compute)[0], self.index)
        )


# --------------------------------------------------------------------------- binning
