"""Deep ensembles from trained models' cached logits: averaged probabilities, in both orders
of pooling and post-hoc calibration (Rahaman & Thiery, NeurIPS 2021).

An ensemble of M members predicts ``p̄(x) = (1/M) Σ_m softmax(z_m(x))`` -- the mean of the
members' probabilities, not of their logits (Lakshminarayanan et al., 2017). Calibration
can come before or after the average:

- **pool-then-calibrate**: one calibrator fitted on the ensemble's validation predictions;
  calibrators read logits, so the ensemble's "logits" are ``log p̄`` (:func:`pooled_logits`),
  whose softmax is ``p̄`` again;
- **calibrate-then-pool**: each member's own calibrator (fitted on that member's
  validation logits) applied to its logits, then the calibrated probabilities averaged
  (:func:`calibrate_then_pool`).

``log p̄`` is floored at ``log`` of the smallest normal float64 (about -708.4): a class to
which every member gives probability 0 in float64 keeps a finite logit, which every
calibrator accepts.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from calib_pipeline.calibration.posthoc import Calibrator

SMALLEST_PROBABILITY = torch.finfo(torch.float64).tiny


def _stacked(member_logits: Sequence[Tensor | np.ndarray]) -> Tensor:
    """The members' logits as one float64 M × N × K tensor, checked for equal shapes."""
    if len(member_logits) < 2:
        raise ValueError(f"an ensemble needs at least 2 members, got {len(member_logits)}")
    tensors = [torch.as_tensor(z, dtype=torch.float64) for z in member_logits]
    shapes = {tuple(z.shape) for z in tensors}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise ValueError(f"members' logits must share one N × K shape, got shapes {sorted(shapes)}")
    return torch.stack(tensors)


def pooled_probabilities(member_logits: Sequence[Tensor | np.ndarray]) -> Tensor:
    """The ensemble's probabilities ``(1/M) Σ_m softmax(z_m)``, float64 N × K.

    Args:
        member_logits: each member's N × K logits on the same N samples (M >= 2).

    Raises:
        ValueError: fewer than 2 members, or members of different shapes.
    """
    return torch.softmax(_stacked(member_logits), dim=-1).mean(dim=0)


def log_probabilities(probabilities: Tensor) -> Tensor:
    """``log p`` floored at ``log(SMALLEST_PROBABILITY)``: logits whose softmax is ``p``
    (up to the floor), as calibrators read them."""
    return torch.log(probabilities.clamp_min(SMALLEST_PROBABILITY))


def pooled_logits(member_logits: Sequence[Tensor | np.ndarray]) -> Tensor:
    """The ensemble's logits ``log p̄`` (:func:`pooled_probabilities`, floored as
    :func:`log_probabilities`): what a pool-then-calibrate calibrator is fitted on and
    applied to."""
    return log_probabilities(pooled_probabilities(member_logits))


def calibrate_then_pool(
    calibrators: Sequence[Calibrator], member_logits: Sequence[Tensor | np.ndarray]
) -> Tensor:
    """``(1/M) Σ_m c_m(z_m)``: each member's fitted calibrator ``c_m`` applied to its own
    logits ``z_m``, the calibrated probabilities averaged (float64 N × K).

    Raises:
        ValueError: a calibrator count different from the member count, fewer than 2
            members, or members of different shapes.
    """
    if len(calibrators) != len(member_logits):
        raise ValueError(
            f"calibrate-then-pool needs one calibrator per member: {len(calibrators)} "
            f"calibrator(s) for {len(member_logits)} member(s)"
        )
    stacked = _stacked(member_logits)
    return torch.stack([c.predict_proba(z) for c, z in zip(calibrators, stacked)]).mean(dim=0)
