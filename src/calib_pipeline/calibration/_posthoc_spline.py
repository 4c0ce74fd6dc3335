"""Spline calibration of the top-label confidence (Gupta, Rahimi, Ajanthan, Mensink,
Sminchisescu & Hartley, ICLR 2021).

The validation confidences are sorted; with ``x_i = i/(N−1)`` (the authors' code) the
cumulative sums ``Ã(x_i) = Σ_{j≤i} a_j / N`` of correctness and ``H̃(x_i) = Σ_{j≤i} c_j / N``
of confidence are the empirical cumulative distributions the KS error compares.
A natural cubic spline ``S`` with ``n_knots`` equally spaced knots on ``[0, 1]`` is fitted by
least squares to ``Ã − H̃``, and the recalibrated confidence at the i-th sorted score is
``c_i + S'(x_i)`` -- the derivative of the fitted cumulative accuracy.
A test confidence is mapped by linear interpolation between the validation scores,
constant beyond them; the result is clipped to ``[0, 1]``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from scipy.interpolate import CubicSpline
from torch import Tensor

from calib_pipeline.calibration._posthoc_base import (
    FittedMap,
    TopLabel,
    TopLabelCalibrator,
    register,
)
from calib_pipeline.registry import check_int


class InterpolatedMap(FittedMap):
    """A map of scores by linear interpolation between knots, constant beyond them."""

    tensor_names = ("scores", "values")

    def __init__(self, scores: np.ndarray | Tensor, values: np.ndarray | Tensor) -> None:
        self.scores = torch.as_tensor(scores, dtype=torch.float64)
        self.values = torch.as_tensor(values, dtype=torch.float64)

    def __call__(self, scores: Tensor) -> Tensor:
        mapped = np.interp(scores.cpu().numpy(), self.scores.numpy(), self.values.numpy())
        return torch.as_tensor(mapped, dtype=torch.float64, device=scores.device)


def fit_spline_recalibration(
    confidence: np.ndarray, correct: np.ndarray, n_knots: int
) -> tuple[np.ndarray, np.ndarray]:
    """The recalibration knots of Gupta et al. (see the module docstring).

    Returns:
        ``(scores, values)``: the distinct validation confidences, increasing, and their
        recalibrated values in ``[0, 1]`` (tied confidences get the mean of their values, so
        a tie -- e.g. many confidences that round to 1 -- maps to one value).
    """
    order = np.argsort(confidence, kind="stable")
    scores, outcomes = confidence[order], correct[order]
    n = scores.size
    position = np.linspace(0.0, 1.0, n)
    gap = (np.cumsum(outcomes) - np.cumsum(scores)) / n
    # natural cubic splines on fixed knots are linear in the knot values: the spline through
    # the unit vectors gives the basis, and least squares the knot values
    basis = CubicSpline(np.linspace(0.0, 1.0, n_knots), np.eye(n_knots), bc_type="natural")
    knot_values = np.linalg.lstsq(basis(position), gap, rcond=None)[0]
    recalibrated = np.clip(scores + basis.derivative()(position) @ knot_values, 0.0, 1.0)
    distinct, group = np.unique(scores, return_inverse=True)
    values = np.bincount(group, weights=recalibrated) / np.bincount(group)
    return distinct, values


@register
class SplineCalibration(TopLabelCalibrator):
    """Spline recalibration of the top-label confidence (Gupta et al. 2021), module docstring.

    Hyperparameters:
        n_knots: knots of the natural cubic spline (default 6, the authors' setting);
            at least 2 (2 knots: a straight line).
    """

    name = "spline"
    fitted_attributes = ("map",)

    def __init__(self, *, n_knots: int = 6) -> None:
        super().__init__(n_knots=check_int("n_knots", n_knots, low=2, high=1000))

    def _fit_top_label(
        self, logits: Tensor, labels: Tensor, top: TopLabel, correct: Tensor
    ) -> bool:
        n_knots = self.hyperparameters["n_knots"]
        if labels.numel() < n_knots:
            self._warn(
                f"{labels.numel()} validation samples for {n_knots} spline knots: "
                "the least-squares fit is underdetermined"
            )
        scores, values = fit_spline_recalibration(
            top.confidence.cpu().numpy(), correct.cpu().numpy(), n_knots
        )
        self.map = InterpolatedMap(scores, values)
        return True

    def _calibrate_top_label(self, top: TopLabel) -> Tensor:
        return self.map(top.confidence)

    def _learned(self) -> dict[str, Any]:
        return {"scores": self.map.scores.tolist(), "values": self.map.values.tolist()}
