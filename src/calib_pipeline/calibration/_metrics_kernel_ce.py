"""Kernel calibration errors: SKCE with its calibration test (Widmann et al. 2019) and
ECE-KDE (Popordanoska et al. 2022).

Each is ``metric(pred: Predictions, **options) -> R-vector`` like the hard metrics; runs are
scored one after the other (each costs O(N^2) kernel evaluations). Pairwise quantities are
computed in float64 over blocks of rows of the N x N kernel matrix, so memory stays
O(N * rows) whatever N; nothing N x N is ever held. Options arrive validated.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import torch

from calib_pipeline.calibration._metrics_kernels import Predictions

#: Kernel-matrix entries per row block (2^22 float64: 32 MiB per temporary).
_BLOCK_ELEMENTS = 2**22
#: Bins of each of the two histogram passes of the median heuristic (resolution
#: sqrt(2) / 2^32 ~ 3e-10 in distance, below the rounding of the distances themselves).
_MEDIAN_BINS = 2**16
#: Largest distance between two probability vectors (two vertices of the simplex).
_MAX_DISTANCE = math.sqrt(2.0)
#: log z for z = 0 in the Dirichlet kernel's log-density: finite, so that a zero exponent
#: times it gives 0 (0 log 0 = 0) in the matrix product, while a positive one gives a
#: log-density below ``_VANISHED``, which is then set to -inf (density 0). A true
#: log-density is far above it: exponents z/h <= 1e5 times log z >= -745 (the smallest
#: float64) over K classes.
_LOG_ZERO = -1e300
_VANISHED = -1e200
#: ECE-KDE's bandwidth grid (Popordanoska et al.'s code): 15 log-spaced values from 1e-5
#: to 0.1 and 0.2, 0.4, ..., 1.
KDE_BANDWIDTHS = (
    *(10.0 ** (-5 + 4 * i / 14) for i in range(15)),
    *(0.2 + 0.2 * i for i in range(5)),
)


def _row_blocks(n: int) -> Iterator[slice]:
    rows = max(1, _BLOCK_ELEMENTS // max(n, 1))
    for start in range(0, n, rows):
        yield slice(start, min(n, start + rows))


def _distances(block: torch.Tensor, points: torch.Tensor, norms: torch.Tensor) -> torch.Tensor:
    """Euclidean distances between the rows of ``block`` and of ``points`` (``norms``: the
    squared norms of ``points``'s rows), by the Gram identity, clamped at 0 before the
    root (rounding can make a squared distance slightly negative)."""
    squared = torch.addmm(block.square().sum(-1, keepdim=True) + norms, block, points.T, alpha=-2)
    return squared.clamp_min_(0).sqrt_()


def _upper_bins(probs: torch.Tensor, width: float) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Row blocks of the distances ||p_i - p_j||, j >= i, flattened, with the index of
    each in bins of ``width`` (the last bin holding everything above); the pairs j <= i go
    to the extra bin ``_MEDIAN_BINS`` (a fill, not boolean indexing: cheaper)."""
    n = len(probs)
    norms = probs.square().sum(-1)
    for rows in _row_blocks(n):
        block = _distances(probs[rows], probs[rows.start :], norms[rows.start :])
        index = (block / width).long().clamp_(0, _MEDIAN_BINS - 1)
        size = rows.stop - rows.start
        lower = torch.ones(size, size, dtype=torch.bool, device=probs.device).tril_()
        index[:, :size].masked_fill_(lower, _MEDIAN_BINS)
        yield block.reshape(-1), index.reshape(-1)


def _rank_value(probs: torch.Tensor, rank: int) -> float:
    """The ``rank``-th smallest (0-based) pairwise distance, by two histogram passes over
    the blocks of distances: the coarse bin holding the rank, then, among the distances in
    it, the sub-bin; returns the smallest distance in that sub-bin (within ~3e-10 of the
    exact order statistic)."""
    width = _MAX_DISTANCE / _MEDIAN_BINS
    device = probs.device
    counts = torch.zeros(_MEDIAN_BINS + 1, dtype=torch.int64, device=device)
    for _, index in _upper_bins(probs, width):
        counts += torch.bincount(index, minlength=_MEDIAN_BINS + 1)
    cumulative = counts[:-1].cumsum(0)
    coarse = int(torch.searchsorted(cumulative, torch.tensor(rank + 1, device=device)))
    below = int(cumulative[coarse - 1]) if coarse else 0
    fine_width = width / _MEDIAN_BINS
    fine_counts = torch.zeros(_MEDIAN_BINS, dtype=torch.int64, device=device)
    smallest = torch.full((_MEDIAN_BINS,), math.inf, dtype=probs.dtype, device=device)
    for distance, index in _upper_bins(probs, width):
        inside = distance[index == coarse]
        fine = ((inside - coarse * width) / fine_width).long().clamp_(0, _MEDIAN_BINS - 1)
        fine_counts += torch.bincount(fine, minlength=_MEDIAN_BINS)
        smallest.scatter_reduce_(0, fine, inside, reduce="amin")
    target = torch.tensor(rank + 1 - below, device=device)
    return float(smallest[int(torch.searchsorted(fine_counts.cumsum(0), target))])


def median_distance(probs: torch.Tensor) -> float:
    """The median heuristic: the median of the N(N-1)/2 distances ||p_i - p_j||, i < j
    (mean of the two middle ones for an even count), in O(N^2 K) time and block memory."""
    pairs = len(probs) * (len(probs) - 1) // 2
    middle = {(pairs - 1) // 2, pairs // 2}
    return sum(_rank_value(probs, rank) for rank in middle) / len(middle)


def _kernel(distance: torch.Tensor, kernel: str, bandwidth: float) -> torch.Tensor:
    """The scalar factor k(p, p') of the matrix-valued kernel k(p, p') I_K."""
    if kernel == "laplacian":
        return torch.exp(-distance / bandwidth)
    return torch.exp(-distance.square() / (2 * bandwidth**2))


#: The smallest bandwidth the median heuristic may give: below it more than half of the
#: pairs of predictions coincide (up to the rounding of their distances).
_SMALLEST_MEDIAN = 1e-6


def _skce_inputs(
    pred: Predictions, run: int, bandwidth: float | None
) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Probabilities p_i, residuals e_{y_i} - p_i (float64) and the bandwidth of one run
    of at least 2 samples (``None``: the median heuristic).

    Raises:
        ValueError: the median heuristic gives a bandwidth below ``_SMALLEST_MEDIAN``.
    """
    probs = pred.probs[run].to(torch.float64)
    residual = -probs
    residual[torch.arange(pred.n_samples, device=probs.device), pred.labels[run]] += 1
    if bandwidth is None:
        bandwidth = median_distance(probs)
        if bandwidth < _SMALLEST_MEDIAN:
            raise ValueError(
                f"the median heuristic gives the SKCE kernel bandwidth {bandwidth!r}: more "
                "than half of the pairs of predictions are identical; pass bandwidth="
            )
    return probs, residual, bandwidth


def _h_blocks(
    probs: torch.Tensor, residual: torch.Tensor, kernel: str, bandwidth: float
) -> Iterator[tuple[slice, torch.Tensor]]:
    """Row blocks of the matrix h_ij = k(p_i, p_j) <e_{y_i} - p_i, e_{y_j} - p_j>
    (Widmann et al. 2019, with the matrix-valued kernel k(p, p') I_K), diagonal included."""
    norms = probs.square().sum(-1)
    for rows in _row_blocks(len(probs)):
        weight = _kernel(_distances(probs[rows], probs, norms), kernel, bandwidth)
        yield rows, weight * (residual[rows] @ residual.T)


def _skce_run(
    pred: Predictions, run: int, kernel: str, bandwidth: float | None, estimator: str
) -> float:
    n = pred.n_samples
    if n < 2:
        return math.nan
    probs, residual, bandwidth = _skce_inputs(pred, run, bandwidth)
    if estimator == "linear":
        half = n // 2
        first, second = slice(0, 2 * half, 2), slice(1, 2 * half, 2)
        distance = (probs[first] - probs[second]).norm(dim=-1)
        inner = (residual[first] * residual[second]).sum(-1)
        return float((_kernel(distance, kernel, bandwidth) * inner).mean())
    total = 0.0
    for rows, h in _h_blocks(probs, residual, kernel, bandwidth):
        total += float(h.sum() - h.diagonal(offset=rows.start).sum())
    return total / (n * (n - 1))


def _per_run(pred: Predictions, score: Callable[[int], float]) -> torch.Tensor:
    values = [score(run) for run in range(pred.labels.shape[0])]
    return torch.tensor(values, dtype=torch.float64, device=pred.labels.device)


def skce(
    pred: Predictions,
    *,
    kernel: str = "laplacian",
    bandwidth: float | None = None,
    estimator: str = "quadratic",
) -> torch.Tensor:
    """Squared kernel calibration error (Widmann et al. 2019), unbiased estimators.

    h_ij = k(p_i, p_j) (e_{y_i} - p_i)^T (e_{y_j} - p_j) with the matrix-valued kernel
    k(p, p') I_K, k = exp(-||p - p'|| / nu) (``laplacian``, the paper's) or
    exp(-||p - p'||^2 / (2 nu^2)) (``gaussian``); nu = ``bandwidth``, by default the median
    of the pairwise distances. ``quadratic``: SKCE_uq = (2 / (N(N-1))) sum_{i<j} h_ij;
    ``linear``: SKCE_ul = (1/floor(N/2)) sum_i h_{2i-1,2i}. Unbiased, so it can be
    negative; NaN for N < 2.
    """
    return _per_run(pred, lambda run: _skce_run(pred, run, kernel, bandwidth, estimator))


def _skce_test_run(
    pred: Predictions, run: int, kernel: str, bandwidth: float | None, n_resamples: int, seed: int
) -> float:
    """p-value of the bootstrap test of one run (see :func:`skce_p_value`)."""
    n = pred.n_samples
    if n < 2:
        return math.nan
    probs, residual, bandwidth = _skce_inputs(pred, run, bandwidth)
    generator = torch.Generator(device="cpu").manual_seed(seed)
    draws = torch.randint(n, (n_resamples, n), generator=generator).to(probs.device)
    counts = torch.zeros(n_resamples, n, dtype=torch.float64, device=probs.device)
    counts.scatter_add_(1, draws, torch.ones_like(counts))
    counts = counts.T.contiguous()
    row_sums = torch.empty(n, dtype=torch.float64, device=probs.device)
    diagonal = torch.empty_like(row_sums)
    quadratic = torch.zeros(n_resamples, dtype=torch.float64, device=probs.device)
    for rows, h in _h_blocks(probs, residual, kernel, bandwidth):
        row_sums[rows] = h.sum(-1)
        diagonal[rows] = h.diagonal(offset=rows.start)
        quadratic += (counts[rows] * (h @ counts)).sum(0)
    total = float(row_sums.sum())
    statistic = (total - float(diagonal.sum())) / (n - 1)  # n SKCE_uq
    resampled = (
        (quadratic - diagonal @ counts) / n
        - 2 * (n - 1) / n**2 * (row_sums @ counts)
        + (n - 1) * total / n**2
    )
    return float((resampled >= statistic).to(torch.float64).mean())


def skce_p_value(
    pred: Predictions,
    *,
    kernel: str = "laplacian",
    bandwidth: float | None = None,
    n_resamples: int = 1000,
    seed: int = 0,
) -> torch.Tensor:
    """p-value of Widmann et al.'s (2019) asymptotic calibration test with SKCE_uq.

    Under the null hypothesis "the model is calibrated", N SKCE_uq is a degenerate
    U-statistic whose law is approximated by the bootstrap of Arcones & Gine (1992):
    for B = ``n_resamples`` resamples Z* of the N samples (torch generator seeded with
    ``seed``), T = (2/N) sum_{i<j} [h(Z*_i, Z*_j) - (1/N) sum_r h(Z*_i, Z_r)
    - (1/N) sum_r h(Z_r, Z*_j) + (1/N^2) sum_{r,s} h(Z_r, Z_s)]; the p-value is the
    fraction of the B values with T >= N SKCE_uq. Kernel and bandwidth as in ``skce``.
    """
    return _per_run(
        pred, lambda run: _skce_test_run(pred, run, kernel, bandwidth, n_resamples, seed)
    )


def _dirichlet_log_kernels(
    points: torch.Tensor, bandwidths: tuple[float, ...]
) -> Iterator[tuple[slice, int, torch.Tensor]]:
    """Row blocks of L_ij = log Dir(z_i; z_j / h + 1), the log-density at z_i of the
    Dirichlet kernel centred on z_j, with L_ii = -inf (leave-one-out), for every h of
    ``bandwidths``, as (rows, index of h, L).

    L_ij = (sum_k z_jk log z_ik) / h - log B(z_j / h + 1): the matrix product does not
    depend on h, so it is computed once per block for all bandwidths.
    """
    log_points = points.log().clamp_min(_LOG_ZERO)
    log_betas = []
    for bandwidth in bandwidths:
        alpha = points / bandwidth + 1
        log_betas.append(torch.lgamma(alpha).sum(-1) - torch.lgamma(alpha.sum(-1)))
    for rows in _row_blocks(len(points)):
        inner = log_points[rows] @ points.T
        for index, bandwidth in enumerate(bandwidths):
            block = inner / bandwidth - log_betas[index]
            block.masked_fill_(block < _VANISHED, -math.inf)
            block.diagonal(offset=rows.start).fill_(-math.inf)
            yield rows, index, block


def kde_bandwidth(points: torch.Tensor) -> float:
    """The bandwidth of :data:`KDE_BANDWIDTHS` that maximises the leave-one-out criterion
    of Popordanoska et al.'s code, sum_i log[(1 / ((N-1) h)) sum_{j != i} Dir(z_i; z_j / h
    + 1)] (including its 1/h factor), for the points (N x K on the simplex); the smallest h
    on ties."""
    n = len(points)
    scores = [-n * math.log((n - 1) * h) for h in KDE_BANDWIDTHS]
    for _, index, block in _dirichlet_log_kernels(points, KDE_BANDWIDTHS):
        scores[index] += float(torch.logsumexp(block, -1).sum())
    return KDE_BANDWIDTHS[max(range(len(scores)), key=lambda i: (scores[i], -i))]


def _kde_error(points: torch.Tensor, targets: torch.Tensor, bandwidth: float | None, p: float):
    """(1/N) sum_i sum_k abs(r_ik - z_ik)^p over the first ``targets.shape[1]`` columns,
    with r_i = sum_{j != i} K(z_i, z_j) y_j / sum_{j != i} K(z_i, z_j) the leave-one-out
    Dirichlet-kernel regression of the one-hot targets (0 where every weight is 0)."""
    n = len(points)
    if n < 2:
        return math.nan
    bandwidth = kde_bandwidth(points) if bandwidth is None else bandwidth
    total = 0.0
    for rows, _, block in _dirichlet_log_kernels(points, (bandwidth,)):
        peak = block.amax(-1, keepdim=True)
        weight = torch.exp(block - peak.clamp_min(-torch.finfo(block.dtype).max))
        mass = weight.sum(-1, keepdim=True)
        ratio = torch.where(mass > 0, weight @ targets / mass.clamp_min(1e-300), 0.0)
        total += float((ratio - points[rows, : targets.shape[1]]).abs().pow(p).sum())
    return total / n


def ece_kde(pred: Predictions, *, bandwidth: float | None = None, p: float = 1.0) -> torch.Tensor:
    """Canonical ECE-KDE (Popordanoska et al. 2022, eq. 9): an estimate of
    (E ||E[y | f(x)] - f(x)||_p^p)^{1/p} with E[y | f(x) = z_i] estimated by the
    leave-one-out Dirichlet kernel regression r_i = sum_{j != i} K(z_i, z_j) e_{y_j} /
    sum_{j != i} K(z_i, z_j), K(z, z') = Dir(z; z'/h + 1):
    ((1/N) sum_i ||r_i - z_i||_p^p)^{1/p}. ``bandwidth`` h, by default the leave-one-out
    maximum-likelihood choice over :data:`KDE_BANDWIDTHS`; ``p`` = 1 by default."""

    def score(run: int) -> float:
        probs = pred.probs[run].to(torch.float64)
        onehot = torch.nn.functional.one_hot(pred.labels[run], pred.n_classes).to(probs.dtype)
        return _kde_error(probs, onehot, bandwidth, p) ** (1 / p)

    return _per_run(pred, score)


def ece_kde_top(
    pred: Predictions, *, bandwidth: float | None = None, p: float = 1.0
) -> torch.Tensor:
    """Top-label ECE-KDE (Popordanoska et al. 2022): ``ece_kde`` of the top-label
    confidence c_i against 1[correct_i] with the Beta kernel Beta(c; c'/h + 1,
    (1 - c')/h + 1) (the Dirichlet kernel of (c, 1 - c)): ((1/N) sum_i abs(r_i - c_i)^p)^{1/p};
    the bandwidth is selected on the confidences."""

    def score(run: int) -> float:
        confidence = pred.confidence[run].to(torch.float64)
        points = torch.stack([confidence, 1 - confidence], dim=-1)
        correct = pred.correct[run].to(torch.float64).unsqueeze(-1)
        return _kde_error(points, correct, bandwidth, p) ** (1 / p)

    return _per_run(pred, score)
