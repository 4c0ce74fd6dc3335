"""Calibrators of the top-label confidence (histogram binning, isotonic regression, Platt
scaling, scaling-binning) and one-vs-rest isotonic regression.

Binning is the metrics module's (``metrics.reliability_bins``): the same edges
(equal-size ``j/M`` or equal-mass midpoints) and the same ``(lo, hi]`` closure, first
bin ``[0, hi]`` — the convention of Guo et al., Mukhoti et al. and Kumar et al. — so a
histogram-binning map and the ECE bins it is scored with agree exactly.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from scipy.optimize import minimize
from sklearn.isotonic import IsotonicRegression
from torch import Tensor

from calib_pipeline.calibration import metrics
from calib_pipeline.calibration._posthoc_base import (
    CONFIDENCE_FLOOR_MARGIN,
    Calibrator,
    FittedMap,
    TopLabel,
    TopLabelCalibrator,
    redistribute_top_label,
    register,
)
from calib_pipeline.registry import check_bins, check_bool, check_choice, check_int, check_range

BINNING_SCHEMES = {"equal_size": "width", "equal_mass": "mass"}


class BinnedMap(FittedMap):
    """A piecewise-constant map on [0, 1]: ``(lo, hi]`` bins (first ``[0, hi]``), one value each.

    Built from ``metrics.reliability_bins`` output; a bin that was empty at fit time has
    value NaN and leaves its scores unchanged.
    """

    tensor_names = ("edges", "values", "counts")

    def __init__(self, edges: np.ndarray, values: np.ndarray, counts: np.ndarray) -> None:
        self.edges = torch.as_tensor(edges, dtype=torch.float64)
        self.values = torch.as_tensor(values, dtype=torch.float64)
        self.counts = torch.as_tensor(counts, dtype=torch.int64)

    def __call__(self, scores: Tensor) -> Tensor:
        index = torch.bucketize(scores, self.edges[1:-1].to(scores.device), right=False)
        mapped = self.values.to(scores.device)[index]
        return torch.where(torch.isnan(mapped), scores, mapped)

    def learned(self) -> dict[str, list[Any]]:
        """Edges, values (``None`` for an empty bin) and counts as JSON-friendly lists."""
        return {
            "bin_edges": self.edges.tolist(),
            "bin_values": [None if math.isnan(v) else v for v in self.values.tolist()],
            "bin_counts": self.counts.tolist(),
        }


@register
class HistogramBinning(TopLabelCalibrator):
    """Histogram binning of the top-label confidence (Zadrozny & Elkan 2001; Wang et al.).

    Fit: the validation confidences are binned; each bin's value is the accuracy of the
    validation predictions in it. Predict: a confidence is replaced by its bin's value;
    a bin that was empty at fit time leaves the confidence unchanged.

    Hyperparameters:
        n_bins: number of bins (default 15, as in Wang et al.).
        binning: ``"equal_size"`` (edges ``j/M``, default) or ``"equal_mass"``
            (inner edges at midpoints between the ``floor(j·N/M)``-th and next smallest
            validation confidence; ties are never split).
    """

    name = "histogram_binning"
    fitted_attributes = ("map",)

    def __init__(self, *, n_bins: int = 15, binning: str = "equal_size") -> None:
        n_bins = check_bins("n_bins", n_bins)
        binning = check_choice("binning", binning, tuple(BINNING_SCHEMES))
        super().__init__(n_bins=n_bins, binning=binning)

    def _fit_top_label(
        self, logits: Tensor, labels: Tensor, top: TopLabel, correct: Tensor
    ) -> bool:
        bins = metrics.reliability_bins(
            logits,
            labels,
            n_bins=self.hyperparameters["n_bins"],
            scheme=BINNING_SCHEMES[self.hyperparameters["binning"]],
        )
        self.map = BinnedMap(bins["edges"], bins["accuracy"], bins["counts"])
        return True

    def _calibrate_top_label(self, top: TopLabel) -> Tensor:
        return self.map(top.confidence)

    def _learned(self) -> dict[str, Any]:
        return self.map.learned()


class IsotonicMap(FittedMap):
    """scikit-learn's increasing isotonic fit on [0, 1], kept as its knots (thresholds).

    ``IsotonicRegression(out_of_bounds="clip").predict`` clips scores to the first and
    last knot and interpolates linearly with ``np.interp`` (scipy's ``interp1d``
    delegates float64 linear interpolation to it); ``np.interp`` on the knots, constant
    beyond them, is therefore the same map to the last bit, and the fitted state is two
    tensors rather than a scikit-learn object.
    """

    tensor_names = ("x_thresholds", "y_thresholds")

    def __init__(
        self, x_thresholds: np.ndarray | Tensor, y_thresholds: np.ndarray | Tensor
    ) -> None:
        self.x_thresholds = torch.as_tensor(x_thresholds, dtype=torch.float64)
        self.y_thresholds = torch.as_tensor(y_thresholds, dtype=torch.float64)

    @classmethod
    def fit(cls, scores: np.ndarray, targets: np.ndarray) -> IsotonicMap:
        """The isotonic regression of ``targets`` on ``scores``, bounded to [0, 1]."""
        model = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip")
        model.fit(scores, targets)
        return cls(model.X_thresholds_, model.y_thresholds_)

    def __call__(self, scores: np.ndarray) -> np.ndarray:
        return np.interp(scores, self.x_thresholds.numpy(), self.y_thresholds.numpy())

    def learned(self) -> dict[str, list[float]]:
        """The knots as JSON-friendly lists."""
        return {
            "x_thresholds": self.x_thresholds.tolist(),
            "y_thresholds": self.y_thresholds.tolist(),
        }


@register
class TopLabelIsotonic(TopLabelCalibrator):
    """Isotonic regression of correctness on the top-label confidence (scikit-learn).

    The map is scikit-learn's ``IsotonicRegression(y_min=0, y_max=1, increasing=True,
    out_of_bounds="clip")`` fitted on ``(confidence, correct)``: piecewise-linear between
    its thresholds, constant outside them, monotone non-decreasing in the confidence.
    Fewer than two distinct validation confidences warn (the map is a constant).
    """

    name = "isotonic_top_label"
    fitted_attributes = ("map",)

    def __init__(self) -> None:
        super().__init__()

    def _fit_top_label(
        self, logits: Tensor, labels: Tensor, top: TopLabel, correct: Tensor
    ) -> bool:
        scores = top.confidence.cpu().numpy()
        if np.unique(scores).size < 2:
            self._warn("fewer than 2 distinct validation confidences; the isotonic map is constant")
        self.map = IsotonicMap.fit(scores, correct.cpu().numpy())
        return True

    def _calibrate_top_label(self, top: TopLabel) -> Tensor:
        mapped = self.map(top.confidence.cpu().numpy())
        return torch.as_tensor(mapped, dtype=torch.float64, device=top.confidence.device)

    def _learned(self) -> dict[str, Any]:
        return self.map.learned()


@register
class OneVsRestIsotonic(Calibrator):
    """One-vs-rest isotonic regression (Zadrozny & Elkan 2002) on softmax probabilities.

    Class ``k``'s map is fitted on ``(p_k, 1[y = k])`` (same scikit-learn settings as the
    top-label variant); predictions are the K mapped columns renormalised to sum to 1.
    A row whose mapped columns are all 0 keeps its uncalibrated probabilities. Unlike
    the top-label calibrators this may change the argmax. ``learned()`` reports the
    thresholds of every class.
    """

    name = "isotonic_one_vs_rest"
    fitted_attributes = ("maps",)

    def __init__(self) -> None:
        super().__init__()

    def _fit(self, logits: Tensor, labels: Tensor) -> bool:
        probabilities = torch.softmax(logits, dim=1).cpu().numpy()
        labels_np = labels.cpu().numpy()
        self.maps = [
            IsotonicMap.fit(probabilities[:, k], (labels_np == k).astype(np.float64))
            for k in range(probabilities.shape[1])
        ]
        return True

    def _predict_proba(self, logits: Tensor) -> Tensor:
        probabilities = torch.softmax(logits, dim=1)
        columns = probabilities.cpu().numpy()
        mapped = np.stack([isotonic(columns[:, k]) for k, isotonic in enumerate(self.maps)], axis=1)
        mapped = torch.as_tensor(mapped, dtype=torch.float64, device=logits.device)
        totals = mapped.sum(dim=1, keepdim=True)
        return torch.where(totals > 0, mapped / totals.clamp(min=1e-300), probabilities)

    def _learned(self) -> dict[str, Any]:
        per_class = [isotonic.learned() for isotonic in self.maps]
        return {
            "x_thresholds": [entry["x_thresholds"] for entry in per_class],
            "y_thresholds": [entry["y_thresholds"] for entry in per_class],
        }


def fit_platt(
    log_odds: Tensor, correct: Tensor, *, target_smoothing: bool
) -> tuple[float, float, bool, str]:
    """Logistic regression ``σ(a·s + b)`` of correctness on the log-odds ``s`` (Platt 1999).

    Minimises the mean binary cross-entropy ``mean[softplus(u) − t·u]``, ``u = a·s + b``,
    by scipy's exact-Hessian trust-region Newton (convex in (a, b)), from the identity
    ``a = 1, b = 0``. With ``target_smoothing`` the targets are Platt's
    ``t+ = (N+ + 1)/(N+ + 2)`` and ``t− = 1/(N− + 2)``, which keeps (a, b) finite when
    the validation predictions are all correct or separable.

    Returns:
        ``(a, b, converged, optimiser message)``.
    """
    s = log_odds.cpu().numpy()
    y = correct.cpu().numpy()
    if target_smoothing:
        positives = y.sum()
        negatives = y.size - positives
        y = np.where(y > 0, (positives + 1) / (positives + 2), 1 / (negatives + 2))
    features = np.stack([s, np.ones_like(s)], axis=1)

    def loss_and_gradient(theta: np.ndarray) -> tuple[float, np.ndarray]:
        u = features @ theta
        loss = np.mean(np.logaddexp(0.0, u) - y * u)
        return float(loss), features.T @ (_sigmoid(u) - y) / u.size

    def hessian(theta: np.ndarray) -> np.ndarray:
        p = _sigmoid(features @ theta)
        return (features * (p * (1 - p))[:, None]).T @ features / p.size

    result = minimize(
        loss_and_gradient,
        np.array([1.0, 0.0]),
        jac=True,
        hess=hessian,
        method="trust-exact",
        options={"gtol": 1e-8},
    )
    return float(result.x[0]), float(result.x[1]), bool(result.success), str(result.message)


def platt_map(log_odds: Tensor, slope: float, intercept: float) -> Tensor:
    """Platt's calibrated confidence ``σ(a·s + b)`` of log-odds ``s``."""
    return torch.sigmoid(slope * log_odds + intercept)


def _sigmoid(u: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * u))


@register
class PlattScaling(TopLabelCalibrator):
    """Platt scaling of the top-label confidence: ``c' = σ(a·logit(c) + b)`` (``fit_platt``).

    ``logit(c)`` is computed from the logits as ``−log Σ_{k≠top} exp(z_k − z_top)``, so
    it stays finite for saturated confidences.

    Hyperparameters:
        target_smoothing: Platt's smoothed targets (default True).
    """

    name = "platt_top_label"
    fitted_attributes = ("slope", "intercept")

    def __init__(self, *, target_smoothing: bool = True) -> None:
        target_smoothing = check_bool("target_smoothing", target_smoothing)
        super().__init__(target_smoothing=target_smoothing)

    def _fit_top_label(
        self, logits: Tensor, labels: Tensor, top: TopLabel, correct: Tensor
    ) -> bool:
        self.slope, self.intercept, converged, message = fit_platt(
            top.log_odds, correct, target_smoothing=self.hyperparameters["target_smoothing"]
        )
        return self._checked_convergence(converged, message)

    def _calibrate_top_label(self, top: TopLabel) -> Tensor:
        return platt_map(top.log_odds, self.slope, self.intercept)

    def _learned(self) -> dict[str, Any]:
        return {"slope": self.slope, "intercept": self.intercept}


@register
class ScalingBinning(TopLabelCalibrator):
    """Scaling-binning calibrator of Kumar et al. (2019), on the top-label confidence.

    1. A seeded random ``fit_fraction`` of the validation set fits Platt scaling
       ``g(c) = σ(a·logit(c) + b)``.
    2. On the rest, ``n_bins`` equal-mass bins of ``g`` are formed (the metrics'
       ``scheme="mass"`` edges) and each bin's value is the mean of ``g`` in it — the
       mean of the *scaled* confidences, not of the labels; this is what gives the
       method its lower sample complexity than histogram binning.
    3. Predict: a confidence maps to the value of the bin its ``g`` falls in (``g``
       itself for a bin empty at fit time).

    ``g`` is floored at ``1/K + 1e-9`` before binning, as every top-label output is.

    Hyperparameters:
        n_bins (15), fit_fraction (0.5), seed (0), target_smoothing (True, for step 1).
    """

    name = "scaling_binning"
    fitted_attributes = ("slope", "intercept", "map")

    def __init__(
        self,
        *,
        n_bins: int = 15,
        fit_fraction: float = 0.5,
        seed: int = 0,
        target_smoothing: bool = True,
    ) -> None:
        n_bins = check_bins("n_bins", n_bins)
        fit_fraction = check_range(
            "fit_fraction",
            fit_fraction,
            low=0.0,
            high=1.0,
            low_inclusive=False,
            high_inclusive=False,
        )
        seed = check_int("seed", seed, low=0)
        target_smoothing = check_bool("target_smoothing", target_smoothing)
        super().__init__(
            n_bins=n_bins, fit_fraction=fit_fraction, seed=seed, target_smoothing=target_smoothing
        )

    def _fit_top_label(
        self, logits: Tensor, labels: Tensor, top: TopLabel, correct: Tensor
    ) -> bool:
        options = self.hyperparameters
        n = labels.numel()
        if n < 2:
            raise ValueError(f"scaling_binning needs at least 2 validation samples, got {n}")
        generator = torch.Generator().manual_seed(options["seed"])
        order = torch.randperm(n, generator=generator).to(labels.device)
        n_fit = min(max(round(options["fit_fraction"] * n), 1), n - 1)
        fit_part, bin_part = order[:n_fit], order[n_fit:]
        self.slope, self.intercept, converged, message = fit_platt(
            top.log_odds[fit_part], correct[fit_part], target_smoothing=options["target_smoothing"]
        )
        if bin_part.numel() < options["n_bins"]:
            self._warn(
                f"only {bin_part.numel()} samples to form {options['n_bins']} bins; "
                "some bins are empty"
            )
        # Binning the rebuilt probabilities makes their top-label confidence — the scaled
        # confidence g, floored at 1/K like every output — the binned score, so the
        # equal-mass edges and per-bin means of g come from the metrics' binning.
        scaled = redistribute_top_label(
            logits[bin_part], top.prediction[bin_part], self._scale(top.log_odds[bin_part])
        )
        bins = metrics.reliability_bins(
            scaled, labels[bin_part], n_bins=options["n_bins"], scheme="mass", inputs="probs"
        )
        self.map = BinnedMap(bins["edges"], bins["confidence"], bins["counts"])
        return self._checked_convergence(converged, message)

    def _scale(self, log_odds: Tensor) -> Tensor:
        return platt_map(log_odds, self.slope, self.intercept)

    def _calibrate_top_label(self, top: TopLabel) -> Tensor:
        floor = 1.0 / self.n_classes + CONFIDENCE_FLOOR_MARGIN
        return self.map(self._scale(top.log_odds).clamp(min=floor))

    def _learned(self) -> dict[str, Any]:
        return {"slope": self.slope, "intercept": self.intercept, **self.map.learned()}
