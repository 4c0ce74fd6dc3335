"""Soft estimators: SECE, SB-ECE and DECE (differentiable) and relplot's smooth ECE.

Each is ``metric(pred: Predictions, **options) -> R-vector`` like the hard metrics
(``_metrics_hard``). ``sece``, ``sb_ece`` and ``dece`` keep the autograd graph and the
scores' dtype; ``smooth_ece`` is computed on detached float64 statistics. Options arrive
validated (``metrics`` checks them).
"""

from __future__ import annotations

import math

import torch

from calib_pipeline.calibration._metrics_exp2 import EXP2_FLOOR, LOG2_E
from calib_pipeline.calibration._metrics_kernels import Predictions


def sb_ece_temperature(n_bins: int) -> float:
    """SB-ECE's default soft-binning temperature for ``n_bins`` bins,
    T = 1 / (M^2 ln 10^4): a confidence at one bin centre gives the neighbouring bin 10^-4
    times the membership of its own, whatever M. The decay factor 10^-4 is the authors'
    code's (uncertainty-baselines, ``soft_binning_decay_factor``); the formula here is
    derived from that property, not copied from their expression."""
    return 1.0 / (n_bins**2 * math.log(1e4))


#: The default temperature at the usual M = 15 bins (~4.83e-4).
SB_ECE_TEMPERATURE = sb_ece_temperature(15)

# Kernel-matrix entries per block for the O(N^2) SECE kernel (1 MiB in float32, in cache).
_KERNEL_BLOCK_ELEMENTS = 2**18


def _soft_bins(logits: torch.Tensor) -> torch.Tensor:
    """softmax over the last dim, differentiable, without torch's slow underflowing exp.

    Sharp soft bins put most memberships far below e^-87, where ``torch.softmax``'s exp
    takes a much slower path; exp2 of the max-shifted argument floored at -115 gives the
    same values to float32 precision (floored terms are < 2^-115 of the largest).
    """
    shifted = (logits - logits.amax(-1, keepdim=True).detach()) * LOG2_E
    weights = torch.exp2(shifted.clamp(min=EXP2_FLOOR))
    return weights / weights.sum(-1, keepdim=True)


def _soft_top_label(pred: Predictions, tau_a: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Differentiable confidence and all-pairs soft accuracy (Bohdal et al.; Qin et al. 2010).

    rank_i = 1 + sum_{k != y_i} sigmoid(tau_a (p_ik - p_iy_i)); soft accuracy
    relu(2 - rank_i). Only the label's rank is needed, so this is O(N K), not O(N K^2).
    """
    scores = pred.scores
    probs = torch.softmax(scores, -1) if pred.inputs == "logits" else scores
    confidence = probs.amax(-1)
    true_prob = probs.gather(-1, pred.labels.unsqueeze(-1))
    # the k = y term contributes sigmoid(0) = 1/2; adding 1/2 makes the rank start at 1
    rank = torch.sigmoid(tau_a * (probs - true_prob)).sum(-1) + 0.5
    return confidence, torch.relu(2 - rank)


def sece(pred: Predictions, *, bandwidth: float = 0.01, tau_a: float = 100.0) -> torch.Tensor:
    """Smooth ECE of the meta-regularisation paper (004, eq. 5-7), differentiable.

    SACC_i = sum_j K(c_i, c_j) a_j / sum_j K(c_i, c_j) with K = exp(-(c_i - c_j)^2 / (2 h^2))
    (the normalised Nadaraya-Watson form of eq. 12), a_j the all-pairs soft accuracy, and
    SECE = (1/N) sum_i |SACC_i - c_i|. O(N^2) time; memory is bounded by row blocks when no
    gradient is needed, O(N^2) under autograd.
    """
    confidence, soft_accuracy = _soft_top_label(pred, tau_a)
    n = confidence.shape[-1]
    rows = max(1, _KERNEL_BLOCK_ELEMENTS // (n * confidence.shape[0]))
    smoothed = []
    scale = LOG2_E / (2 * bandwidth**2)
    for start in range(0, n, rows):
        block = confidence[:, start : start + rows]
        exponent = (block.unsqueeze(-1) - confidence.unsqueeze(-2)).square() * scale
        kernel = torch.exp2(-exponent.clamp(max=-EXP2_FLOOR))
        smoothed.append((kernel @ soft_accuracy.unsqueeze(-1)).squeeze(-1) / kernel.sum(-1))
    return (torch.cat(smoothed, dim=-1) - confidence).abs().mean(-1)


def sb_ece(
    pred: Predictions,
    *,
    n_bins: int = 15,
    temperature: float | None = None,
    label_binned: bool = False,
    p: float = 2.0,
) -> torch.Tensor:
    """Soft-binned ECE (Karandikar et al. eq. 11-12), differentiable; the p-th root is taken.

    ``temperature`` defaults to :func:`sb_ece_temperature` of ``n_bins``.

    u_j(c) = softmax_j(-(c - xi_j)^2 / T), xi_j = (j - 1/2)/M; S_j = sum_i u_j(c_i),
    C_j, A_j the u-weighted mean confidence and (hard) accuracy.
    Binned: (sum_j (S_j/N) |A_j - C_j|^p)^{1/p}; label-binned:
    ((1/N) sum_i sum_j u_j(c_i) |A_j - c_i|^p)^{1/p}.
    """
    scores = pred.scores
    probs = torch.softmax(scores, -1) if pred.inputs == "logits" else scores
    confidence = probs.amax(-1)
    hits = pred.correct.to(confidence.dtype)
    centres = (
        torch.arange(n_bins, dtype=confidence.dtype, device=confidence.device) + 0.5
    ) / n_bins
    if temperature is None:
        temperature = sb_ece_temperature(n_bins)
    membership = _soft_bins(-(confidence.unsqueeze(-1) - centres).square() / temperature)
    size = membership.sum(-2)
    safe = size.clamp_min(torch.finfo(size.dtype).tiny)
    bin_conf = (membership * confidence.unsqueeze(-1)).sum(-2) / safe
    bin_acc = (membership * hits.unsqueeze(-1)).sum(-2) / safe
    n = confidence.shape[-1]
    if label_binned:
        deviation = (bin_acc.unsqueeze(-2) - confidence.unsqueeze(-1)).abs().pow(p)
        return _root((membership * deviation).sum((-1, -2)) / n, p)
    return _root(((size / n) * (bin_acc - bin_conf).abs().pow(p)).sum(-1), p)


def _root(total: torch.Tensor, p: float) -> torch.Tensor:
    """``total ** (1/p)`` whose gradient at 0 is 0, not inf.

    An all-correct batch whose softmax saturates at confidence 1 has SB-ECE exactly 0; the
    p-th root's derivative there is infinite and inf * 0 would put NaN in every logit's
    gradient (and one training step would make the weights NaN). 0 is SB-ECE's minimum,
    so the subgradient 0 is the natural value; the value itself is unchanged.
    """
    positive = total > 0
    return torch.where(positive, torch.where(positive, total, 1.0).pow(1 / p), 0.0)


def dece(
    pred: Predictions, *, n_bins: int = 15, tau_a: float = 100.0, tau_b: float = 0.01
) -> torch.Tensor:
    """Differentiable ECE of Bohdal et al. (meta-calibration), as used by 004.

    Soft bins u(c) = softmax((w c + b) / tau_b) with w = (1..M), b = cumsum(-(0, 1/M, ..,
    (M-1)/M)) (a DNDT soft binning whose hard limit is the equal-width bins), smoothed
    u <- (u + 1e-6)/(1 + M 1e-6); soft accuracy from the all-pairs rank;
    DECE = sum_j (S_j/N) |A_j - C_j|.
    """
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


# ----------------------------------------------------------------- smooth ECE (relplot)


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


def smooth_ece(pred: Predictions, *, bandwidth: float | None = None) -> torch.Tensor:
    """Smooth ECE of Blasiok & Nakkiran (2023) on (confidence, correct), as relplot.smECE.

    smECE_sigma = int |r_sigma(t)| d_sigma(t) dt / int d_sigma, with r_sigma the
    reflected-Gaussian kernel regression of the residual c_i - 1[correct] and d_sigma the
    kernel density; ``bandwidth=None`` takes sigma at the fixed point smECE_sigma = sigma
    (bisection, resolution 2^-10, floor 1e-3). One Python loop over runs (data-dependent search).
    """
    values = [
        _smooth_ece_run(conf, hit, bandwidth)
        for conf, hit in zip(pred.confidence, pred.correct, strict=True)
    ]
    return torch.tensor(values, dtype=torch.float64, device=pred.confidence.device)
