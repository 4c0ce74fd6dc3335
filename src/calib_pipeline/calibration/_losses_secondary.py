"""Batch-level calibration losses used as secondary terms: MMCE, AvUC, AvUC-GS, S-AvUC, SB-ECE,
MDCA.

Each maps ``(logits, targets)`` of one batch to a 0-d tensor. All but MDCA (which compares
each class's mean probability with its frequency) are defined on the top-label confidence
``r_i = max_k p_ik`` and the correctness ``a_i`` of the top-1 prediction. With target
probabilities ``q`` (mixup) the correctness is its expectation ``a_i = q_{i, argmax_k p_ik}``,
which is the 0/1 indicator for class indices; the accurate/inaccurate sums below are then
weighted by ``a_i`` and ``1 - a_i``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from calib_pipeline.calibration._losses_elementwise import is_soft
from calib_pipeline.calibration.metrics import sb_ece as soft_binned_ece

MMCE_ESTIMATORS = ("weighted_code", "weighted", "unweighted")
# sqrt(x + eps) as in Kumar et al.'s and Mukhoti et al.'s code: finite gradient at x = 0.
_SQRT_EPS = 1e-10
# Keeps AvUC's ratio finite when a batch has no accurate-certain/inaccurate-uncertain mass
# (Krishnan & Tickoo's code uses the same constant).
_RATIO_EPS = 1e-10
# Clamp of the normalised entropy inside logit() for S-AvUC's soft uncertainty.
_LOGIT_EPS = 1e-6


def confidence_and_correctness(logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Top-label confidence, (expected) correctness and log-probabilities of a batch.

    Returns:
        ``(confidence (N,), correctness (N,), log_probs (N, K))``; correctness carries no
        gradient.
    """
    log_probs = F.log_softmax(logits, dim=1)
    log_confidence, predicted = log_probs.max(dim=1)
    if is_soft(targets):
        correct = targets.gather(1, predicted[:, None])[:, 0]
    else:
        correct = (predicted == targets).to(logits.dtype)
    return log_confidence.exp(), correct, log_probs


def mmce(logits: Tensor, targets: Tensor, *, width: float, estimator: str) -> Tensor:
    """Maximum mean calibration error (Kumar et al. 2018) with a Laplacian kernel.

    All estimators are ``sqrt(w^T K w + 1e-10)`` with ``K_ij = exp(-|r_i - r_j| / width)``
    and a per-sample weight ``w_i`` (``m = sum a``, ``n = sum (1 - a)``, ``N`` batch size):

    * ``"unweighted"`` (MMCE_m): ``w_i = (a_i - r_i) / N``.
    * ``"weighted"`` (MMCE_w as written): ``w_i = a_i (1 - r_i) / m - (1 - a_i) r_i / n``,
      i.e. the RKHS distance between the mean embeddings of the correct samples weighted
      by ``1 - r`` and of the incorrect ones weighted by ``r``.
    * ``"weighted_code"``: ``w_i = a_i (1 - r_i) / m^2 - (1 - a_i) r_i / n^2``, the scaling
      that Kumar et al.'s and Mukhoti et al.'s released code computes (a mean over the pair
      matrix followed by another division by m^2, n^2, mn); Mukhoti's lambda = 2 refers to it.

    The weighted estimators are 0 (with zero gradient) on a batch whose predictions are
    all correct or all wrong, as in the authors' code.
    """
    confidence, correct, _ = confidence_and_correctness(logits, targets)
    wrong = 1.0 - correct
    if estimator == "unweighted":
        weights = (correct - confidence) / logits.shape[0]
        defined = torch.ones((), dtype=torch.bool, device=logits.device)
    else:
        power = 2 if estimator == "weighted_code" else 1
        m, n = correct.sum(), wrong.sum()
        # counts clamped to 1, not to a tiny float: tiny**2 underflows to 0 in float32 and
        # 0/0 = NaN would reach the gradient through torch.where even when masked out
        weights = correct * (1.0 - confidence) / m.clamp_min(1.0) ** power
        weights = weights - wrong * confidence / n.clamp_min(1.0) ** power
        defined = (m > 0) & (n > 0)
    kernel = torch.exp(-(confidence[:, None] - confidence[None, :]).abs() / width)
    squared = weights @ kernel @ weights
    return torch.where(defined, torch.sqrt(squared.clamp_min(0.0) + _SQRT_EPS), 0.0)


def _normalised_entropy(log_probs: Tensor) -> tuple[Tensor, Tensor]:
    """Entropy ``h`` in nats and ``h* = h / log K`` in [0, 1]."""
    entropy = -(log_probs.exp() * log_probs).sum(1)
    return entropy, entropy / math.log(log_probs.shape[1])


def _avu_ratio_loss(
    accurate: Tensor, inaccurate: Tensor, uncertain: Tensor, tanh_entropy: Tensor
) -> Tensor:
    """``log(1 + (n_AU + n_IC) / (n_AC + n_IU))`` from per-sample cell weights.

    ``n_AU = sum A u tanh h``, ``n_IC = sum I (1-u)(1 - tanh h)``,
    ``n_AC = sum A (1-u)(1 - tanh h)``, ``n_IU = sum I u tanh h``, with ``A`` / ``I`` the
    accurate / inaccurate weight of each sample and ``u`` its (soft) uncertain membership.
    """
    uncertain_mass = uncertain * tanh_entropy
    certain_mass = (1.0 - uncertain) * (1.0 - tanh_entropy)
    bad = (accurate * uncertain_mass + inaccurate * certain_mass).sum()
    good = (accurate * certain_mass + inaccurate * uncertain_mass).sum()
    return torch.log1p(bad / (good + _RATIO_EPS))


def avuc(logits: Tensor, targets: Tensor, *, kappa: float, stop_gradient: bool) -> Tensor:
    """AvUC (Krishnan & Tickoo 2020; Karandikar et al. eq. 13–14), optionally AvUC-GS.

    A sample is uncertain when its normalised entropy ``h / log K`` exceeds ``kappa``;
    accurate samples weigh ``A = a r`` and inaccurate ones ``I = (1 - a)(1 - r)`` (eq. 14).
    ``stop_gradient`` (AvUC-GS, Karandikar et al. App. D) stops the gradient through the
    ``r`` / ``1 - r`` multiplicands; the value is unchanged.
    """
    confidence, correct, log_probs = confidence_and_correctness(logits, targets)
    entropy, normalised = _normalised_entropy(log_probs)
    if stop_gradient:
        confidence = confidence.detach()
    return _avu_ratio_loss(
        correct * confidence,
        (1.0 - correct) * (1.0 - confidence),
        (normalised > kappa).to(logits.dtype),
        entropy.tanh(),
    )


def soft_avuc(logits: Tensor, targets: Tensor, *, kappa: float, temperature: float) -> Tensor:
    """S-AvUC (Karandikar et al. eq. 15–16).

    The hard uncertain indicator becomes the soft uncertainty
    ``t(h*) = sigmoid((logit(h*) - logit(kappa)) / T)`` (equal to the paper's
    ``logistic((1/T) log(h*(1-kappa) / ((1-h*) kappa)))``) and the confidence
    multiplicands are dropped: ``A = a``, ``I = 1 - a``.
    """
    _, correct, log_probs = confidence_and_correctness(logits, targets)
    entropy, normalised = _normalised_entropy(log_probs)
    soft_uncertain = torch.sigmoid(
        (torch.logit(normalised, eps=_LOGIT_EPS) - math.log(kappa / (1.0 - kappa))) / temperature
    )
    return _avu_ratio_loss(correct, 1.0 - correct, soft_uncertain, entropy.tanh())


def sb_ece(
    logits: Tensor,
    targets: Tensor,
    *,
    n_bins: int,
    temperature: float,
    label_binned: bool,
    p: float,
) -> Tensor:
    """Soft-binned ECE (Karandikar et al. eq. 11–12), computed by the metrics module.

    Raises:
        ValueError: for target probabilities; SB-ECE needs one label per sample.
    """
    if is_soft(targets):
        raise ValueError(
            "the sb_ece loss needs class-index targets (N,), not target probabilities; "
            "it cannot be combined with mixup"
        )
    return soft_binned_ece(
        logits, targets, n_bins=n_bins, temperature=temperature, label_binned=label_binned, p=p
    )


def mdca(logits: Tensor, targets: Tensor) -> Tensor:
    """MDCA (Hebbalaguppe, Prakash, Madan & Arora, CVPR 2022).

    ``(1/K) sum_k |mean_i p_ik - mean_i q_ik|``: per class, the batch's mean predicted
    probability against the class's frequency in the batch (the mean target probability,
    which for class indices is the share of labels equal to ``k``).
    """
    mean_probs = logits.softmax(dim=1).mean(dim=0)
    if not is_soft(targets):  # one-hot, not bincount: its output size would wait for the GPU
        targets = F.one_hot(targets, logits.shape[1]).to(logits.dtype)
    return (mean_probs - targets.mean(dim=0)).abs().mean()
