"""Calibration metrics: one documented suite for every number the five papers report.

Every metric is a function ``name(logits, labels, *, ...) -> torch.Tensor`` (0-d) taking
torch tensors or NumPy arrays on any device (``inputs="probs"`` for probabilities);
``calibration_metrics`` returns all of them as floats and ``calibration_metrics_batched``
scores R runs (R x N x K) at once. Exact definitions, edge conventions and the relation to
torchmetrics, netcal, relplot and the papers' code are in ``docs/metrics.md``.

Design: inputs are validated once (``validation.py``); a :class:`_Predictions` object holds
the validated R x N x K scores and computes the per-sample statistics (confidence,
correctness, log-probabilities) lazily and once; each metric is a reduction of those
statistics over the N samples of every run, vectorised over runs and bins
(bucketize/searchsorted + bincount; no Python loop over bins, samples or runs, except
smooth_ece's data-dependent bandwidth search, which loops over runs).

Hard metrics are computed on detached scores and return float64; the differentiable
estimators (``sece``, ``sb_ece``, ``dece``) keep the autograd graph and the scores' dtype.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

from calib_pipeline.calibration.validation import (
    check_batched_logits_labels,
    check_finite,
    check_logits_labels,
)

SCHEMES = ("width", "mass")
NORMS = ("l1", "l2", "max")
CLOSURES = ("right", "left")

#: SB-ECE default soft-binning temperature: the decay rule of the authors' code
#: (uncertainty-baselines, ``soft_binning_decay_factor=1e-4``): T = 1 / (M^2 ln 10^4) with
#: M = 15, so that a confidence at one bin centre gives the neighbouring bin 10^-4 times
#: the membership of its own.
SB_ECE_TEMPERATURE = 1.0 / (15**2 * math.log(1e4))

# Logits per block and CPU thread when scanning logits: 2^19 floats (2 MiB; with the work
# buffer in L3 cache) stay in cache across the max / exp2 / sum passes, so the logits are
# read from memory once, while the per-block overhead (~6 torch calls of ~5 us each) stays
# a few percent; 2^17 floats made the scan ~20% slower, 2^20 no faster.
_BLOCK_ELEMENTS = 2**19
# Kernel-matrix entries per block for the O(N^2) SECE kernel (1 MiB in float32, in cache).
_KERNEL_BLOCK_ELEMENTS = 2**18
_LOG2_E = 1.0 / math.log(2.0)
# Below K = 24 classes a block of rows is scanned transposed (see _scan_columns); measured
# 1.2-1.7x faster than row-wise for K = 2..20, slower from K = 24 on.
_SHORT_ROWS = 24
# torch's exp takes a slow path (~50x) where it underflows; the kernels use exp2 of an
# argument floored at -115 (2^-115 ~ 2e-35, a normal float32 that no sum can notice).
_EXP2_FLOOR = -115.0
# Samples per block of the binning pass: the block's temporaries (<= 1 MiB each) stay in cache;
# measured 10-20% faster than 2^16 or 2^18.
_SAMPLE_BLOCK = 2**17


# --------------------------------------------------------------------------- options


def _check_n_bins(n_bins: int) -> int:
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    return int(n_bins)


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


def _check_positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        # a hyperparameter of the wrong type is a bad value for registries: ValueError
        raise ValueError(f"{name} must be a positive number, got {value!r}")  # noqa: TRY004
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


# --------------------------------------------------------------------------- per-sample statistics


def _scan_rows(
    block: torch.Tensor, peak: torch.Tensor, mass: torch.Tensor | None, work: torch.Tensor
) -> None:
    """Row max of an n x K block into ``peak``; for logits, sum_k 2^((z_k - max) log2 e).

    The sums go to ``mass``; they are computed over all rows of the ``work`` buffer (rows x
    K, and ``mass`` has rows entries), past n in a short last block (see
    :func:`_block_rows`). exp2 of the scaled difference is about twice as fast as exp; the
    row sum as a matrix-vector product is faster than ``sum(dim=1)``.
    """
    size = block.shape[0]
    torch.amax(block, dim=1, out=peak)
    if mass is not None:
        torch.sub(block, peak.unsqueeze(1), out=work[:size]).mul_(_LOG2_E)
        ones = torch.ones(block.shape[1], dtype=block.dtype, device=block.device)
        torch.mv(work.exp2_(), ones, out=mass)


def _scan_columns(
    block: torch.Tensor, peak: torch.Tensor, mass: torch.Tensor | None, work: torch.Tensor
) -> None:
    """:func:`_scan_rows` for short rows (K < ``_SHORT_ROWS``) on CPU; ``work`` is K x rows.

    torch does not vectorise reductions over short rows, so the block is copied transposed
    into ``work`` (``stack`` of its columns is faster than ``copy_``) and max, exp2 and a
    pairwise sum run along dim 0, vectorised across rows.
    """
    size = block.shape[0]
    columns = torch.stack(block.unbind(1), out=work[:, :size])
    torch.amax(columns, dim=0, out=peak)
    if mass is not None:
        torch.sub(columns, peak, out=columns).mul_(_LOG2_E)
        mass.copy_(_pairwise_sum_rows(work.exp2_()))


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
    """Rows per block of the top-label scan: all n on CUDA; on CPU a cache-sized share per
    thread (parallel ops split a block and stay in cache), at most n, a multiple of 64 rows.

    torch's exp2, sum and mv round differently (by an ulp) in their scalar remainder loops
    than in their vector loops. The scans apply them to whole blocks of a multiple of 64
    rows (a short last block is padded with stale rows of the work buffer), which split
    into whole vectors on 1 or 2 threads, so that a row's confidence does not depend on its
    position (a batched run scores exactly as the single run; on more threads an ulp can
    differ for some block sizes).
    """
    if on_cuda:
        return n
    share = max(1, _BLOCK_ELEMENTS * torch.get_num_threads() // (64 * n_classes))
    return min(share, -(-n // 64)) * 64


def _scan(
    flat: torch.Tensor,
    targets: torch.Tensor,
    logits: bool,
    on_non_finite: Callable[[], None] | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Row max, label score and (for logits) sum_k exp(z_k - max) of n x K scores.

    One cache-sized block at a time, so each block is read from memory once and its
    temporaries stay in one reused work buffer. ``on_non_finite``, if given, is called
    (and raises) when a score is NaN or inf: each block's ``aminmax`` is then the pass that
    reads it from memory, instead of a separate pass that reads all scores once more.
    """
    n, n_classes = flat.shape
    dtype, device = flat.dtype, flat.device
    rows = _block_rows(n, n_classes, flat.is_cuda)
    columns = n_classes < _SHORT_ROWS and not flat.is_cuda
    scan = _scan_columns if columns else _scan_rows
    n_blocks = -(-n // rows)
    top = torch.empty(n, dtype=dtype, device=device)
    label_score = torch.empty_like(top)
    mass = torch.empty(n_blocks * rows, dtype=dtype, device=device) if logits else None
    bounds = torch.zeros(n_blocks, 2, dtype=dtype, device=device)
    row_offsets = torch.arange(rows, device=device) * n_classes
    # zeros: the rows past a short last block are computed too
    work = torch.zeros(
        (n_classes, rows) if columns else (rows, n_classes), dtype=dtype, device=device
    )
    for index, start in enumerate(range(0, n, rows)):
        block = flat[start : start + rows]
        part = slice(start, start + block.shape[0])
        if on_non_finite is not None:
            torch.aminmax(block, out=(bounds[index, 0], bounds[index, 1]))
        scan(block, top[part], None if mass is None else mass[start : start + rows], work)
        label_index = row_offsets[: block.shape[0]] + targets[part]
        torch.index_select(block.reshape(-1), 0, label_index, out=label_score[part])
    if on_non_finite is not None and not bool(torch.isfinite(bounds).all()):
        on_non_finite()
    return top, label_score, None if mass is None else mass[:n]


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
    its label scores the maximum and, where two classes could tie (sum_k exp(z_k - max) >= 2
    for logits, p_max <= 1/2 + tolerance for probabilities), argmax confirms it.
    """
    flat = scores.reshape(-1, scores.shape[-1])
    targets = labels.reshape(-1)
    top, label_score, mass = _scan(flat, targets, inputs == "logits", on_non_finite)
    correct = label_score == top
    if mass is None:
        confidence, tie_possible = (
            top,
            top <= 0.51,
        )  # two maxima need 2 p <= 1 + tolerance (<= 1e-2)
    else:
        tie_possible, confidence = mass >= 2, mass.reciprocal_()
    suspect = (correct & tie_possible).nonzero().squeeze(1)
    if suspect.numel():
        argmax = flat.index_select(0, suspect).argmax(dim=1)
        correct[suspect] = argmax == targets.index_select(0, suspect)
    return confidence.reshape(labels.shape), correct.reshape(labels.shape)


class _Predictions:
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
    def single(cls, logits: Any, labels: Any, inputs: str) -> _Predictions:
        deferred = inputs == "logits"
        scores, targets = check_logits_labels(logits, labels, inputs=inputs, finite=not deferred)
        return cls(scores.unsqueeze(0), targets.unsqueeze(0), inputs, scores if deferred else None)

    @classmethod
    def batched(cls, logits: Any, labels: Any, inputs: str) -> _Predictions:
        deferred = inputs == "logits"
        scores, targets = check_batched_logits_labels(
            logits, labels, inputs=inputs, finite=not deferred
        )
        return cls(scores, targets, inputs, scores if deferred else None)

    def resample(self, index: torch.Tensor) -> _Predictions:
        """Bootstrap view: run r of the result is run 0 at samples ``index[r]``."""
        return _ResampledPredictions(self, index)

    def _cached(self, key: str, compute: Callable[[], torch.Tensor]) -> torch.Tensor:
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

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
        return self._cached("confidence", self._top_label)

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

        return self._cached("log_probs", compute)

    @property
    def probs(self) -> torch.Tensor:
        """R x N x K probabilities, detached."""

        def compute() -> torch.Tensor:
            scores = self.scores.detach()
            return self.log_probs.exp() if self.inputs == "logits" else scores

        return self._cached("probs", compute)


class _ResampledPredictions(_Predictions):
    """Resampled runs of a single-run parent; gathers the parent's cached statistics."""

    def __init__(self, parent: _Predictions, index: torch.Tensor) -> None:
        self.parent = parent
        self.index = index
        self.inputs = parent.inputs
        self.labels = parent.labels[0][index]
        self._cache = {}

    @property
    def scores(self) -> torch.Tensor:  # type: ignore[override]
        return self._cached("scores", lambda: self.parent.scores[0][self.index])

    @property
    def n_classes(self) -> int:
        return self.parent.n_classes

    def _top_label(self) -> torch.Tensor:
        self._cache["correct"] = self.parent.correct[0][self.index]
        return self.parent.confidence[0][self.index]

    @property
    def log_probs(self) -> torch.Tensor:
        return self._cached("log_probs", lambda: self.parent.log_probs[0][self.index])


# --------------------------------------------------------------------------- binning


def _width_index(confidence: torch.Tensor, edges: torch.Tensor, closure: str) -> torch.Tensor:
    """Equal-width bin of every confidence, identical to ``bucketize`` on ``edges`` (int32).

    Arithmetic is ~15x faster than bucketize's binary search: g = trunc(c M - 1/4) is the
    bin or the one below it (the rounding of c M and of the linspace edges stays far below
    1/4 bin for M up to ~10^6), and one comparison with the upper edge of g (+inf for the
    last bin, which keeps c = 1 inside) decides between them. int32 and ``index_select``
    are ~3x faster than int64 and ``take``.
    """
    infinity = torch.tensor([torch.inf], dtype=edges.dtype, device=edges.device)
    upper = torch.cat([edges[1:-1], infinity])
    guess = confidence.mul(edges.shape[0] - 1).sub_(0.25).int()
    high = upper.index_select(0, guess.reshape(-1)).view(guess.shape)
    if closure == "right":  # bin j is (e_j, e_{j+1}], bin 0 also holds 0
        return guess.add_(confidence > high)
    return guess.add_(confidence >= high)  # [e_j, e_{j+1}), 1 in the last


def _bin_edges(confidence: torch.Tensor, n_bins: int, scheme: str) -> torch.Tensor:
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


def _bin_index(
    confidence: torch.Tensor, edges: torch.Tensor, scheme: str, closure: str
) -> torch.Tensor:
    """Bin of every confidence, given :func:`_bin_edges` (for ``mass``, of the same runs).

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


def _binned(
    confidence: torch.Tensor, correct: torch.Tensor, n_bins: int, scheme: str, closure: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Edges (:func:`_bin_edges`) and per-bin count, confidence sum and number correct.

    Counts and sums are R x M float64.

    Two bincounts per block over run-offset bin ids (bin + M * run): no loop over bins or runs.
    """
    n_bins = _check_n_bins(n_bins)
    _check_choice("scheme", scheme, SCHEMES)
    _check_choice("closure", closure, CLOSURES)
    runs, n = confidence.shape
    edges = _bin_edges(confidence, n_bins, scheme)
    totals = torch.zeros(3, runs, n_bins, dtype=torch.float64, device=confidence.device)
    for first, last, start, stop in _sample_blocks(runs, n, confidence.is_cuda):
        block = confidence[first:last, start:stop]
        index = _bin_index(
            block, edges if scheme == "width" else edges[first:last], scheme, closure
        )
        block_runs = last - first
        offsets = n_bins * torch.arange(block_runs, dtype=index.dtype, device=index.device)
        ids = (index + offsets.unsqueeze(1)).reshape(-1)
        hits = correct[first:last, start:stop].reshape(-1)
        # ids 2 (bin + M run) + correct: one count gives both the bin counts and the hits
        pairs = torch.bincount(ids * 2 + hits, minlength=2 * block_runs * n_bins)
        pairs = pairs.view(block_runs, n_bins, 2)
        conf_sum = torch.bincount(
            ids, block.reshape(-1).to(torch.float64), minlength=block_runs * n_bins
        )
        totals[0, first:last] += pairs.sum(-1)
        totals[1, first:last] += conf_sum.view(block_runs, n_bins)
        totals[2, first:last] += pairs[..., 1]
    return edges, totals[0], totals[1], totals[2]


def _binned_error(
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
    _check_choice("norm", norm, NORMS)
    _, count, conf_sum, hits = _binned(confidence, correct, n_bins, scheme, closure)
    n = confidence.shape[-1]
    gap = (hits - conf_sum).abs() / count.clamp_min(1)
    if norm == "l1":
        return (hits - conf_sum).abs().sum(-1) / n
    if norm == "l2":
        return ((count / n) * gap.square()).sum(-1).sqrt()
    return gap.amax(-1)  # empty bins have gap 0


# --------------------------------------------------------------------------- metric registry

METRICS: dict[str, Callable[..., torch.Tensor]] = {}
_RUN_METRICS: dict[str, Callable[..., torch.Tensor]] = {}


def metric_names() -> list[str]:
    """Keys of every metric, in the documented order (the keys of ``calibration_metrics``)."""
    return list(METRICS)


_METRIC_ARGS_DOC = """

    Args:
        logits: N x K logits, or probabilities with ``inputs="probs"`` (torch or NumPy, any
            device; a 1-D array is a binary problem, scored top-label).
        labels: N integer class labels.
        inputs: ``"logits"`` or ``"probs"``.
        Further keywords: the options in the signature (see docs/metrics.md).

    Returns:
        0-d tensor: float64 and detached for hard metrics; in the scores' dtype with the
        autograd graph for ``sece``, ``sb_ece`` and ``dece``.

    Raises:
        ValueError: invalid input (see ``validation.check_logits_labels``) or option.
    """


def _metric(key: str) -> Callable[[Callable[..., torch.Tensor]], Callable[..., torch.Tensor]]:
    """Register ``compute(pred: _Predictions, **options) -> R-vector`` under ``key``.

    The returned public function has the signature ``(logits, labels, *, inputs="logits",
    **options)`` with ``compute``'s documented options, validates its input and returns the
    0-d value of the single run.
    """

    def decorator(compute: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        options = [p for p in inspect.signature(compute).parameters.values()][1:]

        @functools.wraps(compute)
        def metric(
            logits: Any, labels: Any, *, inputs: str = "logits", **kwargs: Any
        ) -> torch.Tensor:
            _check_options(key, kwargs)
            return compute(_Predictions.single(logits, labels, inputs), **kwargs)[0]

        params = [
            inspect.Parameter("logits", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Any),
            inspect.Parameter("labels", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Any),
            inspect.Parameter(
                "inputs", inspect.Parameter.KEYWORD_ONLY, default="logits", annotation=str
            ),
            *options,
        ]
        signature = inspect.Signature(params, return_annotation=torch.Tensor)
        metric.__signature__ = signature  # type: ignore[attr-defined]
        metric.__name__ = metric.__qualname__ = key
        metric.__doc__ = (compute.__doc__ or "").rstrip() + _METRIC_ARGS_DOC
        METRICS[key] = metric
        _RUN_METRICS[key] = compute
        return metric

    return decorator


def _accepted_options(key: str) -> list[str]:
    return list(inspect.signature(_RUN_METRICS[key]).parameters)[1:]


def _check_options(key: str, options: dict[str, Any]) -> None:
    unknown = sorted(set(options) - set(_accepted_options(key)))
    if unknown:
        raise ValueError(
            f"metric {key!r} got unknown option(s) {unknown}; it accepts: "
            f"{', '.join(_accepted_options(key)) or 'no options'}"
        )


# --------------------------------------------------------------------------- hard metrics


@_metric("accuracy")
def accuracy(pred: _Predictions) -> torch.Tensor:
    """Fraction of samples whose first maximal class equals the label."""
    return pred.correct.to(torch.float64).mean(-1)


@_metric("error")
def error(pred: _Predictions) -> torch.Tensor:
    """1 - accuracy."""
    return 1 - accuracy.__wrapped__(pred)


@_metric("nll")
def nll(pred: _Predictions) -> torch.Tensor:
    """Negative log-likelihood -(1/N) sum_i log p_{i,y_i}.

    +inf if a probability input gives a label probability 0 (no clipping).
    """
    picked = pred.log_probs.gather(-1, pred.labels.unsqueeze(-1)).squeeze(-1)
    return -picked.to(torch.float64).mean(-1)


@_metric("brier")
def brier(pred: _Predictions) -> torch.Tensor:
    """Multiclass Brier score (1/N) sum_i sum_k (p_ik - 1[y_i = k])^2, in [0, 2]."""
    probs = pred.probs.to(torch.float64)
    true_prob = probs.gather(-1, pred.labels.unsqueeze(-1)).squeeze(-1)
    return (probs.square().sum(-1) - 2 * true_prob + 1).mean(-1)


@_metric("mean_confidence")
def mean_confidence(pred: _Predictions) -> torch.Tensor:
    """(1/N) sum_i max_k p_ik."""
    return pred.confidence.to(torch.float64).mean(-1)


@_metric("mean_entropy")
def mean_entropy(pred: _Predictions) -> torch.Tensor:
    """(1/N) sum_i -sum_k p_ik log p_ik in nats (0 log 0 = 0)."""
    probs = pred.probs.to(torch.float64)
    return -torch.special.xlogy(probs, probs).sum(-1).mean(-1)


@_metric("ece")
def ece(
    pred: _Predictions,
    *,
    n_bins: int = 15,
    scheme: str = "width",
    norm: str = "l1",
    closure: str = "right",
) -> torch.Tensor:
    """Top-label binned ECE (Guo et al.; Karandikar eq. 6).

    l1: sum_b (n_b/N) |acc_b - conf_b|; l2: sqrt(sum_b (n_b/N)(acc_b - conf_b)^2);
    max: max over non-empty bins.
    """
    return _binned_error(pred.confidence, pred.correct, n_bins, scheme, norm, closure)


@_metric("ece_em")
def ece_em(
    pred: _Predictions, *, n_bins: int = 15, norm: str = "l1", closure: str = "right"
) -> torch.Tensor:
    """Adaptive (equal-mass) top-label ECE (Nixon et al. 'ACE' as in Mukhoti's AdaECE)."""
    return _binned_error(pred.confidence, pred.correct, n_bins, "mass", norm, closure)


@_metric("mce")
def mce(
    pred: _Predictions, *, n_bins: int = 15, scheme: str = "width", closure: str = "right"
) -> torch.Tensor:
    """Maximum calibration error max_b |acc_b - conf_b| over non-empty bins (Naeini et al.)."""
    return _binned_error(pred.confidence, pred.correct, n_bins, scheme, "max", closure)


@_metric("ece_l2")
def ece_l2(
    pred: _Predictions, *, n_bins: int = 15, scheme: str = "mass", closure: str = "right"
) -> torch.Tensor:
    """RMS calibration error sqrt(sum_b (n_b/N)(acc_b - conf_b)^2).

    Equal-mass by default, as reported by Karandikar et al. (paper 002).
    """
    return _binned_error(pred.confidence, pred.correct, n_bins, scheme, "l2", closure)


@_metric("ece_lb")
def ece_lb(
    pred: _Predictions,
    *,
    n_bins: int = 15,
    scheme: str = "mass",
    norm: str = "l2",
    closure: str = "right",
) -> torch.Tensor:
    """Label-binned ECE (Roelofs et al.; Karandikar eq. 7): ((1/N) sum_i |A_{b_i} - c_i|^p)^{1/p}.

    ``max`` gives max_i |A_{b_i} - c_i|. By Jensen, ece_lb >= the binned ECE of the same norm.
    """
    _check_choice("norm", norm, NORMS)
    confidence = pred.confidence.to(torch.float64)
    edges, count, _, hits = _binned(pred.confidence, pred.correct, n_bins, scheme, closure)
    index = _bin_index(pred.confidence, edges, scheme, closure)
    bin_accuracy = (hits / count.clamp_min(1)).gather(-1, index.long())
    deviation = (bin_accuracy - confidence).abs()
    if norm == "max":
        return deviation.amax(-1)
    power = 1.0 if norm == "l1" else 2.0
    return deviation.pow(power).mean(-1).pow(1 / power)


@_metric("classwise_ece")
def classwise_ece(
    pred: _Predictions,
    *,
    n_bins: int = 15,
    scheme: str = "width",
    norm: str = "l1",
    closure: str = "right",
) -> torch.Tensor:
    """Classwise ECE (Kull et al.; Mukhoti et al.): (1/K) sum_k ECE of p_k against 1[y = k].

    Every class k in 0..K-1 of the scores counts, including classes absent from the labels.
    """
    probs = pred.probs
    runs, n, k = probs.shape
    class_conf = probs.transpose(1, 2).reshape(runs * k, n)
    classes = torch.arange(k, device=probs.device)
    is_class = (pred.labels.unsqueeze(1) == classes.view(1, k, 1)).reshape(runs * k, n)
    per_class = _binned_error(class_conf, is_class, n_bins, scheme, norm, closure)
    return per_class.view(runs, k).mean(-1)


@_metric("overconfidence_error")
def overconfidence_error(
    pred: _Predictions, *, n_bins: int = 15, scheme: str = "width", closure: str = "right"
) -> torch.Tensor:
    """OE (Thulasidasan et al.): sum_b (n_b/N) conf_b max(conf_b - acc_b, 0)."""
    _, count, conf_sum, hits = _binned(pred.confidence, pred.correct, n_bins, scheme, closure)
    mean_conf = conf_sum / count.clamp_min(1)
    return (mean_conf * (conf_sum - hits).clamp_min(0)).sum(-1) / pred.n_samples


@_metric("debiased_ece_l2")
def debiased_ece_l2(
    pred: _Predictions, *, n_bins: int = 15, scheme: str = "mass", closure: str = "right"
) -> torch.Tensor:
    """Debiased l2 ECE of Kumar et al. (2019).

    sqrt(max(0, sum_b (n_b/N)[(acc_b - conf_b)^2 - acc_b (1 - acc_b)/(n_b - 1)])): the
    plug-in squared gap minus the binomial variance of acc_b. Bins with fewer than 2 samples
    contribute 0 (their variance term is undefined), as in Kumar et al.'s library.
    """
    _, count, conf_sum, hits = _binned(pred.confidence, pred.correct, n_bins, scheme, closure)
    safe = count.clamp_min(1)
    acc, conf = hits / safe, conf_sum / safe
    variance = acc * (1 - acc) / (count - 1).clamp_min(1)
    term = torch.where(count >= 2, (acc - conf).square() - variance, torch.zeros_like(acc))
    return ((count / pred.n_samples) * term).sum(-1).clamp_min(0).sqrt()


def _average_ranks(values: torch.Tensor) -> torch.Tensor:
    """1-based ranks along the last dim, ties given their average rank (R x N, float64)."""
    ordered = values.sort(dim=-1).values
    below = torch.searchsorted(ordered, values, right=False)
    through = torch.searchsorted(ordered, values, right=True)
    return (below + through + 1).to(torch.float64) / 2


@_metric("auroc")
def auroc(pred: _Predictions) -> torch.Tensor:
    """Refinement AUROC (Singh et al. 000): P(conf of a correct > conf of a wrong), ties 1/2.

    Mann-Whitney form (sum of average ranks of correct samples - P(P+1)/2) / (P N_wrong);
    NaN when all predictions are correct or all wrong.
    """

    def compute() -> torch.Tensor:
        correct = pred.correct.to(torch.float64)
        ranks = _average_ranks(pred.confidence.contiguous())
        positives = correct.sum(-1)
        negatives = pred.n_samples - positives
        u_statistic = (ranks * correct).sum(-1) - positives * (positives + 1) / 2
        return u_statistic / (positives * negatives)

    return pred._cached("auroc", compute)  # decomp_beta reuses it


@_metric("decomp_alpha")
def decomp_alpha(pred: _Predictions) -> torch.Tensor:
    """alpha = E[C], the mean confidence (Singh et al. 000, eq. 9: ECE = alpha - beta - gamma)."""
    return mean_confidence.__wrapped__(pred)


@_metric("decomp_beta")
def decomp_beta(pred: _Predictions) -> torch.Tensor:
    """beta = r 2PN/n^2 (Singh et al. 000, eq. 9).

    r is the AUROC, P and N the numbers of correct and wrong predictions; 0 when PN = 0.
    """
    positives = pred.correct.to(torch.float64).sum(-1)
    negatives = pred.n_samples - positives
    product = 2 * positives * negatives / pred.n_samples**2
    return torch.where(product > 0, auroc.__wrapped__(pred) * product, torch.zeros_like(product))


@_metric("decomp_gamma")
def decomp_gamma(pred: _Predictions) -> torch.Tensor:
    """gamma = (P^2 + N^2) / (2 n^2) (Singh et al. 000, eq. 9)."""
    positives = pred.correct.to(torch.float64).sum(-1)
    negatives = pred.n_samples - positives
    return (positives.square() + negatives.square()) / (2 * pred.n_samples**2)


# ----------------------------------------------------------------- differentiable estimators


def _soft_bins(logits: torch.Tensor) -> torch.Tensor:
    """softmax over the last dim, differentiable, without torch's slow underflowing exp.

    Sharp soft bins put most memberships far below e^-87, where ``torch.softmax``'s exp
    takes a ~50x slower path; exp2 of the max-shifted argument floored at -115 gives the
    same values to float32 precision (floored terms are < 2^-115 of the largest).
    """
    shifted = (logits - logits.amax(-1, keepdim=True).detach()) * _LOG2_E
    weights = torch.exp2(shifted.clamp(min=_EXP2_FLOOR))
    return weights / weights.sum(-1, keepdim=True)


def _soft_top_label(pred: _Predictions, tau_a: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Differentiable confidence and all-pairs soft accuracy (Bohdal et al.; Qin et al. 2010).

    rank_i = 1 + sum_{k != y_i} sigmoid(tau_a (p_ik - p_iy_i)); soft accuracy
    relu(2 - rank_i). Only the label's rank is needed, so this is O(N K), not O(N K^2).
    """
    tau_a = _check_positive("tau_a", tau_a)
    scores = pred.scores
    probs = torch.softmax(scores, -1) if pred.inputs == "logits" else scores
    confidence = probs.amax(-1)
    true_prob = probs.gather(-1, pred.labels.unsqueeze(-1))
    # the k = y term contributes sigmoid(0) = 1/2; adding 1/2 makes the rank start at 1
    rank = torch.sigmoid(tau_a * (probs - true_prob)).sum(-1) + 0.5
    return confidence, torch.relu(2 - rank)


@_metric("sece")
def sece(pred: _Predictions, *, bandwidth: float = 0.01, tau_a: float = 100.0) -> torch.Tensor:
    """Smooth ECE of the meta-regularisation paper (004, eq. 5-7), differentiable.

    SACC_i = sum_j K(c_i, c_j) a_j / sum_j K(c_i, c_j) with K = exp(-(c_i - c_j)^2 / (2 h^2))
    (the normalised Nadaraya-Watson form of eq. 12), a_j the all-pairs soft accuracy, and
    SECE = (1/N) sum_i |SACC_i - c_i|. O(N^2) time; memory is bounded by row blocks when no
    gradient is needed, O(N^2) under autograd.
    """
    bandwidth = _check_positive("bandwidth", bandwidth)
    confidence, soft_accuracy = _soft_top_label(pred, tau_a)
    n = confidence.shape[-1]
    rows = max(1, _KERNEL_BLOCK_ELEMENTS // (n * confidence.shape[0]))
    smoothed = []
    scale = _LOG2_E / (2 * bandwidth**2)
    for start in range(0, n, rows):
        block = confidence[:, start : start + rows]
        exponent = (block.unsqueeze(-1) - confidence.unsqueeze(-2)).square() * scale
        kernel = torch.exp2(-exponent.clamp(max=-_EXP2_FLOOR))
        smoothed.append((kernel @ soft_accuracy.unsqueeze(-1)).squeeze(-1) / kernel.sum(-1))
    return (torch.cat(smoothed, dim=-1) - confidence).abs().mean(-1)


@_metric("sb_ece")
def sb_ece(
    pred: _Predictions,
    *,
    n_bins: int = 15,
    temperature: float = SB_ECE_TEMPERATURE,
    label_binned: bool = False,
    p: float = 2.0,
) -> torch.Tensor:
    """Soft-binned ECE (Karandikar et al. eq. 11-12), differentiable; the p-th root is taken.

    u_j(c) = softmax_j(-(c - xi_j)^2 / T), xi_j = (j - 1/2)/M; S_j = sum_i u_j(c_i),
    C_j, A_j the u-weighted mean confidence and (hard) accuracy.
    Binned: (sum_j (S_j/N) |A_j - C_j|^p)^{1/p}; label-binned:
    ((1/N) sum_i sum_j u_j(c_i) |A_j - c_i|^p)^{1/p}.
    """
    n_bins = _check_n_bins(n_bins)
    temperature = _check_positive("temperature", temperature)
    p = _check_positive("p", p)
    scores = pred.scores
    probs = torch.softmax(scores, -1) if pred.inputs == "logits" else scores
    confidence = probs.amax(-1)
    hits = pred.correct.to(confidence.dtype)
    centres = (
        torch.arange(n_bins, dtype=confidence.dtype, device=confidence.device) + 0.5
    ) / n_bins
    membership = _soft_bins(-(confidence.unsqueeze(-1) - centres).square() / temperature)
    size = membership.sum(-2)
    safe = size.clamp_min(torch.finfo(size.dtype).tiny)
    bin_conf = (membership * confidence.unsqueeze(-1)).sum(-2) / safe
    bin_acc = (membership * hits.unsqueeze(-1)).sum(-2) / safe
    n = confidence.shape[-1]
    if label_binned:
        deviation = (bin_acc.unsqueeze(-2) - confidence.unsqueeze(-1)).abs().pow(p)
        return ((membership * deviation).sum((-1, -2)) / n).pow(1 / p)
    return ((size / n) * (bin_acc - bin_conf).abs().pow(p)).sum(-1).pow(1 / p)


@_metric("dece")
def dece(
    pred: _Predictions, *, n_bins: int = 15, tau_a: float = 100.0, tau_b: float = 0.01
) -> torch.Tensor:
    """Differentiable ECE of Bohdal et al. (meta-calibration), as used by 004.

    Soft bins u(c) = softmax((w c + b) / tau_b) with w = (1..M), b = cumsum(-(0, 1/M, ..,
    (M-1)/M)) (a DNDT soft binning whose hard limit is the equal-width bins), smoothed
    u <- (u + 1e-6)/(1 + M 1e-6); soft accuracy from the all-pairs rank;
    DECE = sum_j (S_j/N) |A_j - C_j|.
    """
    n_bins = _check_n_bins(n_bins)
    tau_b = _check_positive("tau_b", tau_b)
    confidence, soft_accuracy = _soft_top_label(pred, tau_a)
    dtype, device = confidence.dtype, confidence.device
    cuts = torch.arange(n_bins, dtype=dtype, device=device) / n_bins
    slopes = torch.arange(1, n_bins + 1, dtype=dtype, device=device)
    logits = (confidence.unsqueeze(-1) * slopes + torch.cumsum(-cuts, 0)) / tau_b
    membership = (_soft_bins(logits) + 1e-6) / (1 + n_bins * 1e-6)
    size = membership.sum(-2)
    bin_conf = (membership * confidence.unsqueeze(-1)).sum(-2) / size
    bin_acc = (membership * soft_accuracy.unsqueeze(-1)).sum(-2) / size
    return ((size / confidence.shape[-1]) * (bin_acc - bin_conf).abs()).sum(-1)


# --------------------------------------------------------------------------- smooth ECE (relplot)


def _grid_deposit(points: torch.Tensor, weights: torch.Tensor, size: int) -> torch.Tensor:
    """Spread weights (W x N) linearly onto the two nearest of ``size`` grid nodes on [0, 1]."""
    scaled = points * (size - 1)
    left = scaled.long().clamp(0, size - 2)
    frac = scaled - left
    grid = torch.zeros(weights.shape[0], size, dtype=torch.float64, device=points.device)
    grid.index_add_(1, left, (1 - frac) * weights)
    grid.index_add_(1, left + 1, frac * weights)
    return grid


def _reflected_smooth(grid: torch.Tensor, sigma: float) -> torch.Tensor:
    """Convolve each row of grid values with a Gaussian (std sigma), reflecting at 0 and 1."""
    size = grid.shape[-1]
    nodes = torch.linspace(0, 1, size, dtype=torch.float64, device=grid.device)
    kernel = torch.exp(-(nodes - 0.5).square() / (2 * sigma**2)) / (math.sqrt(2 * math.pi) * sigma)
    extended = torch.cat([grid.flip(-1)[:, :-1], grid, grid.flip(-1)[:, 1:]], dim=-1)
    # zero-padding to a power of two keeps the FFT fast; the linear convolution is unchanged
    length = 1 << (extended.shape[-1] + size - 2).bit_length()
    spectrum = torch.fft.rfft(extended, length) * torch.fft.rfft(kernel, length)
    full = torch.fft.irfft(spectrum, length)
    # 'valid' part of the full convolution starts at size - 1; keep the centred size nodes
    start = size - 1 + size // 2
    return full[:, start : start + size]


def _interpolate(nodes_eval: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Linear interpolation of rows of values on a uniform grid over [0, 1] at nodes_eval."""
    size = values.shape[-1]
    left = (nodes_eval * (size - 1)).long().clamp(0, size - 2)
    frac = (nodes_eval - left / (size - 1)) * (size - 1)
    return values[:, left] * (1 - frac) + values[:, left + 1] * frac


def _smooth_ece_at(confidence: torch.Tensor, residual: torch.Tensor, sigma: float) -> float:
    """smECE_sigma, discretised exactly as relplot 1.0.3 (grid ~sigma/10, density + 1e-4)."""
    n_eval = max(round(10 / sigma), 200)
    size = max(2000, round(20 / sigma)) // 2 + 1
    nodes_eval = torch.linspace(0, 1, n_eval, dtype=torch.float64, device=confidence.device)
    weights = torch.stack([residual, torch.ones_like(residual)])
    smoothed = _interpolate(
        nodes_eval, _reflected_smooth(_grid_deposit(confidence, weights, size), sigma)
    )
    density = smoothed[1] + 1e-4
    return float(((smoothed[0] / density).abs() * density).sum() / density.sum())


def _smooth_ece_run(
    confidence: torch.Tensor, correct: torch.Tensor, bandwidth: float | None
) -> float:
    confidence = confidence.to(torch.float64)
    residual = confidence - correct.to(torch.float64)
    if bandwidth is not None:
        return _smooth_ece_at(confidence, residual, bandwidth)

    # Fixed point smECE_sigma = sigma by 10 bisection steps on (0, 1] (relplot's search).
    def below_fixed_point(sigma: float) -> bool:
        return sigma < 1e-3 or sigma < _smooth_ece_at(confidence, residual, sigma)

    high, low = 1.0, 0.0
    if not below_fixed_point(high):
        for _ in range(10):
            middle = (high + low) / 2
            if below_fixed_point(middle):
                low = middle
            else:
                high = middle
    return _smooth_ece_at(confidence, residual, high)


@_metric("smooth_ece")
def smooth_ece(pred: _Predictions, *, bandwidth: float | None = None) -> torch.Tensor:
    """Smooth ECE of Blasiok & Nakkiran (2023) on (confidence, correct), as relplot.smECE.

    smECE_sigma = int |r_sigma(t)| d_sigma(t) dt / int d_sigma, with r_sigma the
    reflected-Gaussian kernel regression of the residual c_i - 1[correct] and d_sigma the
    kernel density; ``bandwidth=None`` takes sigma at the fixed point smECE_sigma = sigma
    (bisection, resolution 2^-10, floor 1e-3). One Python loop over runs (data-dependent search).
    """
    if bandwidth is not None:
        bandwidth = _check_positive("bandwidth", bandwidth)
    values = [
        _smooth_ece_run(conf, hit, bandwidth)
        for conf, hit in zip(pred.confidence, pred.correct, strict=True)
    ]
    return torch.tensor(values, dtype=torch.float64, device=pred.confidence.device)


# --------------------------------------------------------------------------- suite entry points


def _run_suite(
    pred: _Predictions, n_bins: int, keys: Iterable[str] | None, options: dict[str, Any]
) -> dict[str, torch.Tensor]:
    keys = metric_names() if keys is None else list(keys)
    for key in keys:
        if key not in METRICS:
            raise ValueError(
                f"unknown metric {key!r}; valid metrics are: {', '.join(metric_names())}"
            )
    accepted = {name for key in keys for name in _accepted_options(key)}
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise ValueError(
            f"unknown option(s) {unknown}; the selected metrics accept: "
            f"{', '.join(sorted(accepted))}"
        )
    options = {"n_bins": n_bins, **options}
    results = {}
    with torch.no_grad():
        for key in keys:
            wanted = {
                name: value for name, value in options.items() if name in _accepted_options(key)
            }
            results[key] = _RUN_METRICS[key](pred, **wanted)
    return results


def calibration_metrics(
    logits: Any,
    labels: Any,
    *,
    n_bins: int = 15,
    inputs: str = "logits",
    keys: Iterable[str] | None = None,
    **options: Any,
) -> dict[str, float]:
    """Every metric of the suite on one run, as floats.

    Args:
        logits: N x K logits (or probabilities with ``inputs="probs"``), torch or NumPy.
        labels: N integer labels.
        n_bins: bin count for every binned metric (and the soft-binned ones).
        inputs: ``"logits"`` or ``"probs"``.
        keys: subset of :func:`metric_names` to compute (default: all).
        **options: forwarded to each metric that accepts the keyword (``scheme``, ``norm``,
            ``closure``, ``bandwidth``, ``temperature``, ``tau_a``, ...); a keyword no
            selected metric accepts raises ``ValueError``. ``bandwidth`` is shared by
            ``sece`` and ``smooth_ece`` -- compute them separately to set it per metric.

    Returns:
        ``{key: value}`` in :func:`metric_names` order.
    """
    pred = _Predictions.single(logits, labels, inputs)
    return {key: float(value[0]) for key, value in _run_suite(pred, n_bins, keys, options).items()}


def calibration_metrics_batched(
    logits: Any,
    labels: Any,
    *,
    n_bins: int = 15,
    inputs: str = "logits",
    keys: Iterable[str] | None = None,
    **options: Any,
) -> dict[str, np.ndarray]:
    """Every metric on R runs at once: logits R x N x K, labels N (shared) or R x N.

    Vectorised across runs (one bincount over run-offset bins for the binned metrics; only
    smooth_ece loops over runs). Same options as :func:`calibration_metrics`.

    Returns:
        ``{key: float64 array of shape (R,)}``.
    """
    pred = _Predictions.batched(logits, labels, inputs)
    return {
        key: value.cpu().numpy() for key, value in _run_suite(pred, n_bins, keys, options).items()
    }


def reliability_bins(
    logits: Any,
    labels: Any,
    *,
    n_bins: int = 15,
    scheme: str = "width",
    closure: str = "right",
    inputs: str = "logits",
) -> dict[str, np.ndarray]:
    """Per-bin statistics of the top-label confidence, for reliability diagrams.

    Returns:
        ``edges`` (n_bins + 1), ``counts`` (int64), ``confidence`` (mean confidence per bin)
        and ``accuracy`` (fraction correct per bin); NaN for empty bins. Same binning as
        :func:`ece`.
    """
    pred = _Predictions.single(logits, labels, inputs)
    edges, count, conf_sum, hits = _binned(pred.confidence, pred.correct, n_bins, scheme, closure)
    empty = count == 0
    safe = count.clamp_min(1)
    nan = torch.full_like(conf_sum, float("nan"))
    return {
        "edges": edges[0].to(torch.float64).cpu().numpy(),
        "counts": count[0].to(torch.int64).cpu().numpy(),
        "confidence": torch.where(empty, nan, conf_sum / safe)[0].cpu().numpy(),
        "accuracy": torch.where(empty, nan, hits / safe)[0].cpu().numpy(),
    }


def bootstrap_ci(
    logits: Any,
    labels: Any,
    metric: str = "ece",
    *,
    n_resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    inputs: str = "logits",
    **options: Any,
) -> dict[str, float]:
    """Percentile bootstrap confidence interval of one metric over the samples.

    Resamples N samples with replacement ``n_resamples`` times (torch generator seeded with
    ``seed``) and scores the resamples as runs of the batched path, in blocks that bound
    memory; per-sample statistics are computed once and gathered.

    Returns:
        ``point`` (metric on the data), ``low``/``high`` (the (1 -+ level)/2 quantiles of
        the resampled values, NaN-ignoring), ``level``, ``n_resamples``.
    """
    if metric not in METRICS:
        raise ValueError(
            f"unknown metric {metric!r}; valid metrics are: {', '.join(metric_names())}"
        )
    _check_options(metric, options)
    if (
        isinstance(n_resamples, bool)
        or not isinstance(n_resamples, (int, np.integer))
        or n_resamples < 1
    ):
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    pred = _Predictions.single(logits, labels, inputs)
    compute = _RUN_METRICS[metric]
    n, k = pred.n_samples, pred.n_classes
    generator = torch.Generator(device="cpu").manual_seed(seed)
    index = torch.randint(n, (n_resamples, n), generator=generator).to(pred.labels.device)
    block = max(1, 2**24 // (n * k))
    with torch.no_grad():
        point = float(compute(pred, **options)[0])
        values = torch.cat(
            [
                compute(pred.resample(index[s : s + block]), **options)
                for s in range(0, n_resamples, block)
            ]
        )
    low, high = np.nanquantile(values.cpu().numpy(), [(1 - level) / 2, (1 + level) / 2])
    return {
        "point": point,
        "low": float(low),
        "high": float(high),
        "level": float(level),
        "n_resamples": int(n_resamples),
    }
