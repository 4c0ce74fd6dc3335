"""Bayesian binning into quantiles (BBQ; Naeini, Cooper & Hauskrecht, AAAI 2015), on the
top-label confidence.

BBQ averages equal-mass histogram-binning models of every bin count B in a range, each
weighted by its Bayesian (BDeu) score. Here it calibrates the top-label confidence
``c = max_k softmax(z)_k`` against correctness, as the other top-label calibrators do, so
the predicted class never changes (netcal's BBQ fits one model per class, one-vs-rest,
and renormalises, which can change it).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from scipy.special import gammaln
from torch import Tensor

from calib_pipeline.calibration._metrics_binning import binned
from calib_pipeline.calibration._posthoc_base import TopLabel, TopLabelCalibrator, register
from calib_pipeline.calibration._posthoc_binning import BinnedMap
from calib_pipeline.registry import check_range

# A bin's prior mean is its midpoint, kept this far inside (0, 1) so that the Beta prior of
# a bin of confidences tied at exactly 1 (or 0) stays proper.
PRIOR_MEAN_MARGIN = 1e-12


def bin_counts_range(n: int, range_factor: float) -> range:
    """The bin counts of the averaged models: ``⌊N^{1/3}/C⌋ … ⌈C·N^{1/3}⌉`` (Naeini et al.
    2015), at least 1 and at most N."""
    cube_root = n ** (1.0 / 3.0)
    low = max(1, math.floor(cube_root / range_factor))
    high = max(low, min(n, math.ceil(range_factor * cube_root)))
    return range(low, high + 1)


def bdeu_binning(
    edges: np.ndarray, counts: np.ndarray, hits: np.ndarray, equivalent_sample_size: float
) -> tuple[float, np.ndarray]:
    """Log BDeu score and posterior-mean bin values of one binning model.

    With B bins, prior strength ``N'`` and bin midpoints ``p_b``, each bin has the Beta prior
    ``α_b = N'/B·p_b``, ``β_b = N'/B·(1 − p_b)``; with ``N_b`` samples of which ``m_b`` are
    correct (``n_b = N_b − m_b``) the score is
    ``Σ_b [lnΓ(N'/B) − lnΓ(N_b + N'/B) + lnΓ(m_b + α_b) − lnΓ(α_b) + lnΓ(n_b + β_b) − lnΓ(β_b)]``
    and the bin's value the posterior mean ``(m_b + α_b)/(N_b + N'/B)``.
    """
    strength = equivalent_sample_size / counts.size
    prior_mean = np.clip((edges[:-1] + edges[1:]) / 2, PRIOR_MEAN_MARGIN, 1 - PRIOR_MEAN_MARGIN)
    alpha, beta = strength * prior_mean, strength * (1 - prior_mean)
    misses = counts - hits
    log_score = (
        gammaln(strength)
        - gammaln(counts + strength)
        + gammaln(hits + alpha)
        - gammaln(alpha)
        + gammaln(misses + beta)
        - gammaln(beta)
    ).sum()
    return float(log_score), (hits + alpha) / (counts + strength)


@register
class BayesianBinningQuantiles(TopLabelCalibrator):
    """BBQ on the top-label confidence (module docstring).

    For every bin count B of ``bin_counts_range(N, range_factor)``, equal-mass bins of the
    validation confidences are formed with the metrics' binning (``binned``, equal mass: inner
    edges at midpoints between order statistics, tied confidences never split, ``(lo, hi]``
    closure, as ``metrics.reliability_bins(scheme="mass")``) and scored by ``bdeu_binning``.
    The calibrated confidence is the average of the models' bin values weighted by
    ``softmax(log scores)`` (a uniform prior over models).

    Hyperparameters:
        equivalent_sample_size: the BDeu prior strength N' (default 2, the paper's).
        range_factor: C of the bin-count range (default 10, the paper's).
    """

    name = "bbq"
    fitted_attributes = ("maps", "model_weights")

    def __init__(self, *, equivalent_sample_size: float = 2.0, range_factor: float = 10.0) -> None:
        super().__init__(
            equivalent_sample_size=check_range(
                "equivalent_sample_size", equivalent_sample_size, low=0.0, low_inclusive=False
            ),
            range_factor=check_range("range_factor", range_factor, low=1.0),
        )

    def _fit_top_label(
        self, logits: Tensor, labels: Tensor, top: TopLabel, correct: Tensor
    ) -> bool:
        options = self.hyperparameters
        confidence, outcomes = top.confidence.unsqueeze(0), correct.unsqueeze(0).long()
        self.maps, log_scores = [], []
        for n_bins in bin_counts_range(labels.numel(), options["range_factor"]):
            edges, counts, _, hits = (
                value[0].cpu().numpy()
                for value in binned(confidence, outcomes, n_bins, "mass", "right")
            )
            log_score, values = bdeu_binning(
                edges.astype(np.float64), counts, hits, options["equivalent_sample_size"]
            )
            self.maps.append(BinnedMap(edges, values, counts.astype(np.int64)))
            log_scores.append(log_score)
        self.model_weights = torch.softmax(torch.tensor(log_scores, dtype=torch.float64), dim=0)
        return True

    def _calibrate_top_label(self, top: TopLabel) -> Tensor:
        weights = self.model_weights.to(top.confidence.device)
        return sum(weight * model(top.confidence) for weight, model in zip(weights, self.maps))

    def _learned(self) -> dict[str, Any]:
        return {
            "bin_counts": [int(model.counts.numel()) for model in self.maps],
            "model_weights": self.model_weights.tolist(),
        }
