"""Per-sample training losses: each maps ``(logits, targets)`` to one value per sample.

Targets are either class indices (int64, shape ``(N,)``) or target probabilities
(float, shape ``(N, K)``, e.g. produced by mixup). Every loss here is written as an
expectation over the target distribution ``q``, so the class-index case is the
one-hot special case: for indices only the target column is gathered (cheap),
for probabilities the full ``(N, K)`` matrix is weighted by ``q``.

Notation: ``z`` logits, ``p = softmax(z)``, ``K`` classes, ``p_t`` the target-class
probability, ``q`` the target distribution.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from calib_pipeline.registry import check_range

FLSD_THRESHOLD = 0.2
FLSD_GAMMA_LOW_CONFIDENCE = 5.0
FLSD_GAMMA = 3.0
REDUCTIONS = ("mean", "sum", "none")
# added to ||z|| by LogitNorm so that a zero logit vector stays finite (the authors' code)
LOGIT_NORM_EPS = 1e-7


def prepare_targets(logits: Tensor, targets: Tensor) -> Tensor:
    """Validate a batch and return targets usable by every loss of this library.

    Args:
        logits: ``(N, K)`` floating-point logits.
        targets: ``(N,)`` integer class indices or ``(N, K')`` target probabilities
            with ``K' <= K``; missing trailing classes have probability 0 (mixup of a
            batch whose largest label is below ``K - 1`` yields ``K' < K``).

    Returns:
        ``targets`` unchanged for class indices, otherwise ``(N, K)`` probabilities
        in the logits' dtype.

    Raises:
        ValueError: on a shape or dtype that fits neither form.
    """
    if logits.ndim != 2 or not logits.is_floating_point():
        raise ValueError(
            f"logits must be a floating-point (N, K) tensor, got {tuple(logits.shape)} "
            f"{logits.dtype}"
        )
    n, k = logits.shape
    if targets.shape[:1] != (n,):
        raise ValueError(f"targets must have {n} rows like the logits, got {tuple(targets.shape)}")
    if targets.ndim == 1 and not targets.is_floating_point() and targets.dtype != torch.bool:
        return targets
    if targets.ndim == 2 and targets.is_floating_point() and targets.shape[1] <= k:
        return F.pad(targets.to(logits.dtype), (0, k - targets.shape[1]))
    raise ValueError(
        "targets must be int class indices of shape (N,) or float probabilities of shape "
        f"(N, K' <= {k}); got {tuple(targets.shape)} {targets.dtype}"
    )


def is_soft(targets: Tensor) -> bool:
    """True for target probabilities, False for class indices."""
    return targets.is_floating_point()


def target_columns(values: Tensor, targets: Tensor) -> Tensor:
    """The columns of an ``(N, K)`` matrix that the target distribution weighs.

    Returns ``values[i, y_i]`` as ``(N, 1)`` for class indices and ``values`` itself
    for probabilities; pair with ``target_expectation``.
    """
    return values if is_soft(targets) else values.gather(1, targets[:, None])


def target_expectation(values: Tensor, targets: Tensor) -> Tensor:
    """``E_{k~q}[values_k]`` per sample, from the output of ``target_columns``."""
    return (values * targets).sum(1) if is_soft(targets) else values[:, 0]


def cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    """Cross-entropy ``-sum_k q_k log p_k`` per sample (NLL for class indices)."""
    return F.cross_entropy(logits, targets, reduction="none")


def label_smoothing(logits: Tensor, targets: Tensor, *, epsilon: float) -> Tensor:
    """Cross-entropy against ``(1 - eps) q + eps / K`` (Müller et al.; Singh et al. Listing 2).

    Equals ``(1 - eps) CE(q) - eps * mean_k log p_k``; PyTorch's ``label_smoothing``
    option computes exactly this, for class indices and for probabilities.
    """
    return F.cross_entropy(logits, targets, reduction="none", label_smoothing=epsilon)


def entropy_regularized(logits: Tensor, targets: Tensor, *, beta: float) -> Tensor:
    """ERL (Pereyra et al.; Singh et al. eq. 10, Listing 1): ``CE(q) - beta * H(p)``."""
    log_probs = F.log_softmax(logits, dim=1)
    nll = -target_expectation(target_columns(log_probs, targets), targets)
    entropy = -(log_probs.exp() * log_probs).sum(1)
    return nll - beta * entropy


def _modulated_nll(
    log_probs: Tensor, log_base: Tensor, gamma: float | Tensor, detach_pt: bool
) -> Tensor:
    """``-base^gamma * log p`` elementwise, the common form of focal-type losses, with
    ``base^gamma`` computed as ``exp(gamma * log base)`` from an exact ``log base``.

    Working in log space keeps first and second derivatives finite where a float32
    softmax saturates (``p_t`` = 1 exactly): there ``(1 - p_t)^gamma`` has an infinite
    slope for gamma < 1, and the γ-Net look-ahead differentiates this loss twice.
    """
    if detach_pt:
        log_base = log_base.detach()
    return -torch.exp(gamma * log_base) * log_probs


def _log_one_minus_p(logits: Tensor, targets: Tensor, columns: Tensor) -> Tensor:
    """``log(1 - p_k)`` for the target columns.

    For class indices it is ``logsumexp(z without z_t) - logsumexp(z)``: exact and finite
    even when ``1 - p_t`` rounds to 0. For target probabilities (mixup) every column is
    needed and ``log(-expm1(log p))`` is used, floored at the smallest normal number.
    """
    if is_soft(targets):
        tiny = torch.finfo(columns.dtype).tiny
        return (-torch.expm1(columns)).clamp_min(tiny).log()
    others = logits.scatter(1, targets[:, None], float("-inf"))
    return (torch.logsumexp(others, dim=1) - torch.logsumexp(logits, dim=1))[:, None]


def _gamma_column(gamma: float | Tensor, n: int) -> float | Tensor:
    """A per-sample ``(N,)`` gamma as an ``(N, 1)`` column; scalars pass through."""
    if not isinstance(gamma, Tensor) or gamma.ndim == 0:
        return gamma
    if gamma.shape != (n,):
        raise ValueError(f"a gamma tensor must be 0-d or of shape ({n},), got {tuple(gamma.shape)}")
    return gamma[:, None]


def focal_per_sample(
    logits: Tensor, targets: Tensor, *, gamma: float | Tensor, detach_pt: bool = False
) -> Tensor:
    """Focal loss per sample: ``-sum_k q_k (1 - p_k)^gamma log p_k``.

    For class indices this is ``-(1 - p_t)^gamma log p_t`` (Lin et al.; Mukhoti et al.
    eq. in §3, Appendix A for general ``q``). ``gamma`` may be a 0-d or ``(N,)`` tensor
    and then receives gradients.
    """
    columns = target_columns(F.log_softmax(logits, dim=1), targets)
    gamma = _gamma_column(gamma, logits.shape[0])
    losses = _modulated_nll(columns, _log_one_minus_p(logits, targets, columns), gamma, detach_pt)
    return target_expectation(losses, targets)


def focal_loss(
    logits: Tensor,
    targets: Tensor,
    gamma: float | Tensor,
    *,
    detach_pt: bool = False,
    reduction: str = "mean",
) -> Tensor:
    """Focal loss ``FL_gamma = -(1 - p_t)^gamma log p_t`` with scalar or per-sample gamma.

    Differentiable with respect to a tensor ``gamma`` (γ-Net backpropagates into it).

    Args:
        logits: ``(N, K)`` logits.
        targets: ``(N,)`` class indices or ``(N, K)`` target probabilities
            (then ``-sum_k q_k (1 - p_k)^gamma log p_k``).
        gamma: a float >= 0, or a 0-d / ``(N,)`` tensor of per-sample values.
        detach_pt: stop the gradient through ``p_t`` inside the factor ``(1 - p_t)^gamma``
            (Wang et al.'s code does; Mukhoti et al.'s does not).
        reduction: ``"mean"`` (over the batch), ``"sum"`` or ``"none"`` (``(N,)``).

    Returns:
        The reduced loss (0-d) or the ``(N,)`` per-sample losses.
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if not isinstance(gamma, Tensor):
        # the rule of build_objective("focal", gamma=...): gamma = inf would make every loss 0
        gamma = check_range("gamma", gamma, low=0.0)
    losses = focal_per_sample(
        logits, prepare_targets(logits, targets), gamma=gamma, detach_pt=detach_pt
    )
    if reduction == "none":
        return losses
    return losses.mean() if reduction == "mean" else losses.sum()


def flsd53(logits: Tensor, targets: Tensor, *, detach_pt: bool = False) -> Tensor:
    """FLSD-53 (Mukhoti et al., NeurIPS 2020): focal loss with a sample-dependent gamma.

    ``gamma = 5`` where ``p_t < 0.2``, else ``3``; the choice uses ``p_t`` without
    gradient. For target probabilities the rule is applied per class to ``p_k``.
    """
    columns = target_columns(F.log_softmax(logits, dim=1), targets)
    low_confidence = (columns.detach().exp() < FLSD_THRESHOLD).to(columns.dtype)
    gamma = FLSD_GAMMA + (FLSD_GAMMA_LOW_CONFIDENCE - FLSD_GAMMA) * low_confidence
    losses = _modulated_nll(columns, _log_one_minus_p(logits, targets, columns), gamma, detach_pt)
    return target_expectation(losses, targets)


def inverse_focal(
    logits: Tensor, targets: Tensor, *, gamma: float, detach_pt: bool = False
) -> Tensor:
    """Inverse focal loss (Wang et al. eq. 4): ``-(1 + p_t)^gamma log p_t``."""
    columns = target_columns(F.log_softmax(logits, dim=1), targets)
    losses = _modulated_nll(columns, torch.log1p(columns.exp()), gamma, detach_pt)
    return target_expectation(losses, targets)


def _log_next_lower_probability(log_probs: Tensor, columns: Tensor) -> Tensor:
    """``log p_j`` for each entry of ``columns`` (log-probabilities taken from ``log_probs``'
    rows), ``p_j`` the largest probability of that row strictly below the entry's.

    ``-inf`` where no class has a smaller probability (``p_j = 0``). A binary search in the
    row sorted ascending skips classes tied with the entry; the gradient flows into the
    selected ``p_j`` (through ``sort``), not into the comparison.
    """
    ascending = log_probs.sort(dim=1).values
    below = torch.searchsorted(ascending.detach(), columns.detach().contiguous(), side="left")
    selected = ascending.gather(1, (below - 1).clamp_min(0))
    return torch.where(below > 0, selected, float("-inf"))


def dual_focal(logits: Tensor, targets: Tensor, *, gamma: float) -> Tensor:
    """Dual focal loss (Tao, Dong & Xu, ICML 2023): ``-(1 - p_t + p_j)^gamma log p_t``.

    ``p_j`` is the largest probability strictly below ``p_t`` (the class ranked right after
    the target; 0 when the target ranks last), so the factor is the focal factor plus the
    gap to the next class. For target probabilities the rule applies per class:
    ``-sum_k q_k (1 - p_k + p_j(k))^gamma log p_k``. The base is formed in log space,
    ``log(exp(log(1 - p_k)) + p_j)``, from the exact ``log(1 - p_k)`` of the focal loss.
    """
    log_probs = F.log_softmax(logits, dim=1)
    columns = target_columns(log_probs, targets)
    log_next = _log_next_lower_probability(log_probs, columns)
    log_base = torch.logaddexp(_log_one_minus_p(logits, targets, columns), log_next)
    return target_expectation(_modulated_nll(columns, log_base, gamma, False), targets)


def margin_label_smoothing(logits: Tensor, targets: Tensor, *, margin: float, lam: float) -> Tensor:
    """MbLS (Liu, Ben Ayed, Galdran & Dolz, CVPR 2022): CE plus a hinge on logit distances.

    ``CE(q) + lam * (1/K) sum_k max(0, max_j z_j - z_k - margin)``: only distances beyond
    the margin are penalised. The class mean (issue 31 states the paper's penalty as a sum
    over k) is the authors' code's, with which their lam = 0.1 was chosen (docs/objectives.md).
    """
    # max (not amax): at tied maxima the subgradient goes to one logit, as in the authors' code
    distances = logits.max(dim=1, keepdim=True).values - logits
    penalty = F.relu(distances - margin).mean(dim=1)
    return cross_entropy(logits, targets) + lam * penalty


def logit_norm(logits: Tensor, targets: Tensor, *, temperature: float) -> Tensor:
    """LogitNorm (Wei et al., ICML 2022): CE on ``z / (temperature * (||z||_2 + 1e-7))``.

    The ``1e-7`` keeps a zero logit vector finite, as in the authors' code.
    """
    norms = torch.linalg.vector_norm(logits, dim=1, keepdim=True) + LOGIT_NORM_EPS
    return cross_entropy(logits / (temperature * norms), targets)


def l1_logit_norm(logits: Tensor, targets: Tensor, *, alpha: float) -> Tensor:
    """Cross-entropy plus ``alpha * ||z||_1`` of the logit vector (Wang et al. §3)."""
    return cross_entropy(logits, targets) + alpha * logits.abs().sum(1)


def brier(logits: Tensor, targets: Tensor) -> Tensor:
    """Brier loss ``sum_k (p_k - q_k)^2`` (Mukhoti et al. §4), in ``[0, 2]``.

    Expanded as ``sum p^2 - 2 E_q[p] + sum q^2`` so that class indices need no one-hot
    matrix (``sum q^2 = 1``).
    """
    probs = logits.softmax(dim=1)
    target_sq = (targets * targets).sum(1) if is_soft(targets) else 1.0
    cross = target_expectation(target_columns(probs, targets), targets)
    return (probs * probs).sum(1) - 2.0 * cross + target_sq


def mse(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean squared error on probabilities ``(1/K) sum_k (p_k - q_k)^2`` (Karandikar et al.).

    The MSE primary loss of the soft-calibration study; the class mean (Keras'
    ``mean_squared_error`` convention) makes it ``brier / K``.
    """
    return brier(logits, targets) / logits.shape[1]
