"""Validation-adaptive objectives: AdaFocal and CALS, whose state follows the val split.

Both papers update part of the loss from the validation set once per epoch: AdaFocal
(Ghosh, Schaaf & Gormley, NeurIPS 2022) a focal γ per confidence bin, CALS (Liu et al.,
CVPR 2023) a Lagrange multiplier per class. Such an objective says so: its
``validation_feedback`` is a sentence naming what it adapts (recorded in the run's
provenance), and the training engine calls ``observe_validation(logits, labels, epoch=...)``
after every epoch with the logits of the whole val split -- the model in eval mode, after the
epoch's last step -- and with no other split. ``observe_validation`` returns 0-d statistics
for the history row. The state (γ per bin and the bin edges; multipliers, penalty weights and
the previous constraint means) is in ``state_dict`` as CPU tensors, so it is checkpointed
with the run and restored on resume. Formulas, defaults and conventions: docs/objectives.md.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from calib_pipeline.calibration._losses_elementwise import (
    _log_one_minus_p,
    _modulated_nll,
    is_soft,
    prepare_targets,
)
from calib_pipeline.calibration._metrics_binning import bin_index, binned
from calib_pipeline.registry import check_bins, check_bool, check_int, check_range

# AdaFocal bins like the project's AdaECE (``ece_em``): equal-mass edges, (lo, hi] bins.
_SCHEME, _CLOSURE = "mass", "right"


class ValidationAdaptiveObjective:
    """What AdaFocal and CALS share: a name, effective hyperparameters, a state that is
    restored only into an objective of the same name and hyperparameters."""

    uses_features = False
    validation_feedback: str  # what it adapts on the val split (each subclass says)

    def __init__(self, name: str, hyperparameters: dict[str, Any]) -> None:
        self.name = name
        self.hyperparameters = dict(hyperparameters)

    def observe_validation(
        self, logits: Tensor, labels: Tensor, *, epoch: int
    ) -> dict[str, Tensor]:
        """Adapt the state to the val split's logits and labels after ``epoch`` (1-based);
        return 0-d statistics for the epoch's history row."""
        raise NotImplementedError

    def _tensors(self) -> dict[str, Tensor | None]:
        """The adapted tensors by attribute name (None before their first use)."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """Name, hyperparameters and the adapted tensors (on the CPU; loadable with
        ``weights_only``)."""
        tensors = {k: None if v is None else v.cpu() for k, v in self._tensors().items()}
        return {"name": self.name, "hyperparameters": dict(self.hyperparameters), **tensors}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict()``; a state of another objective or configuration raises."""
        if state.get("name") != self.name:
            raise ValueError(f"state is for objective {state.get('name')!r}, not {self.name!r}")
        if state.get("hyperparameters") != self.hyperparameters:
            raise ValueError(
                f"state has hyperparameters {state.get('hyperparameters')}, objective "
                f"{self.name!r} has {self.hyperparameters}"
            )
        for key in self._tensors():
            setattr(self, key, state[key])

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.hyperparameters})"


# --- AdaFocal -------------------------------------------------------------------------------


def signed_focal_per_sample(logits: Tensor, targets: Tensor, gamma: Tensor) -> Tensor:
    """Focal loss for γ ≥ 0 and inverse focal loss with |γ| for γ < 0, per sample:
    ``-(1 - p_t)^γ log p_t`` or ``-(1 + p_t)^|γ| log p_t`` (AdaFocal's switching loss).

    Args:
        logits: ``(N, K)``.
        targets: ``(N,)`` class indices.
        gamma: ``(N,)`` signed γ per sample.
    """
    columns = F.log_softmax(logits, dim=1).gather(1, targets[:, None])
    focal_base = _log_one_minus_p(logits, targets, columns)
    base = torch.where(gamma[:, None] >= 0, focal_base, torch.log1p(columns.exp()))
    return _modulated_nll(columns, base, gamma.abs()[:, None], False)[:, 0]


def adafocal_gamma_update(
    gammas: Tensor,
    gaps: Tensor,
    *,
    lam: float,
    switch_threshold: float,
    gamma_min: float,
    gamma_max: float,
) -> Tensor:
    """One AdaFocal update of the signed γ of every bin from its val gap (confidence −
    accuracy): ``γ·exp(λ·gap)`` in focal mode (γ > 0), ``γ·exp(−λ·gap)`` in inverse-focal
    mode (γ < 0) -- |γ| grows while the bin errs the way the mode corrects, shrinks otherwise;
    a |γ| below ``switch_threshold`` switches mode at that magnitude (a γ that reached 0
    becomes +threshold); then γ is clipped to ``[gamma_min, gamma_max]``."""
    updated = gammas * torch.exp(torch.sign(gammas) * lam * gaps)
    threshold = torch.full_like(updated, switch_threshold)
    switched = torch.where(updated > 0, -threshold, threshold)
    updated = torch.where(updated.abs() < switch_threshold, switched, updated)
    return updated.clamp(gamma_min, gamma_max)


# the hyperparameters of adafocal_gamma_update
_UPDATE_OPTIONS = ("lam", "switch_threshold", "gamma_min", "gamma_max")


class AdaFocal(ValidationAdaptiveObjective):
    """AdaFocal: focal / inverse-focal loss with the γ of the val bin a sample's ``p_t``
    falls in; after every epoch each bin's γ moves by its val calibration gap
    (:func:`adafocal_gamma_update`) and the bin edges become the val split's equal-mass edges.

    Before the first update every bin has ``gamma_initial`` (equal-width edges, which then do
    not matter). Mean over the batch.
    """

    validation_feedback = (
        "AdaFocal: the focal γ of each equal-mass confidence bin of the val split, from the "
        "bin's mean confidence minus accuracy, after every epoch"
    )

    def __init__(self, hyperparameters: dict[str, Any]) -> None:
        super().__init__("adafocal", hyperparameters)
        bins = hyperparameters["n_bins"]
        self.gammas = torch.full((bins,), hyperparameters["gamma_initial"], dtype=torch.float64)
        self.edges = torch.linspace(0.0, 1.0, bins + 1, dtype=torch.float64)

    def _tensors(self) -> dict[str, Tensor | None]:
        return {"gammas": self.gammas, "edges": self.edges}

    def sample_gammas(self, logits: Tensor, targets: Tensor) -> Tensor:
        """The signed γ of every sample: that of the bin its (detached) ``p_t`` falls in."""
        if self.edges.device != logits.device:  # once, after construction or a load
            self.gammas, self.edges = self.gammas.to(logits.device), self.edges.to(logits.device)
        p_t = F.softmax(logits.detach(), dim=1).gather(1, targets[:, None]).T
        return self.gammas[bin_index(p_t, self.edges[None], _SCHEME, _CLOSURE)[0]]

    def __call__(self, logits: Tensor, targets: Tensor, **context: Any) -> Tensor:
        """The batch loss (0-d); targets must be class indices (a bin needs one ``p_t``)."""
        targets = prepare_targets(logits, targets)
        if is_soft(targets):
            raise ValueError(
                "adafocal needs class-index targets: a sample's bin is that of its p_t"
            )
        gamma = self.sample_gammas(logits, targets).to(logits.dtype)
        return signed_focal_per_sample(logits, targets, gamma).mean()

    def observe_validation(
        self, logits: Tensor, labels: Tensor, *, epoch: int
    ) -> dict[str, Tensor]:
        """Update every bin's γ from the val logits; returns the new γ per bin
        (``adafocal_gamma_bin<b>``)."""
        confidence, prediction = F.softmax(logits.float(), dim=1).max(dim=1)
        correct = (prediction == labels).long()
        edges, count, conf_sum, hits = binned(
            confidence[None], correct[None], self.hyperparameters["n_bins"], _SCHEME, _CLOSURE
        )
        gaps = (conf_sum[0] - hits[0]) / count[0].clamp_min(1)  # an empty bin's gap is 0
        options = {k: self.hyperparameters[k] for k in _UPDATE_OPTIONS}
        self.gammas = adafocal_gamma_update(self.gammas.to(gaps.device), gaps, **options)
        self.edges = edges[0]
        return {f"adafocal_gamma_bin{b:02d}": gamma for b, gamma in enumerate(self.gammas)}


def adafocal(
    n_bins: int = 15,
    lam: float = 1.0,
    gamma_initial: float = 1.0,
    gamma_min: float = -2.0,
    gamma_max: float = 20.0,
    switch_threshold: float = 0.2,
) -> AdaFocal:
    """AdaFocal with the authors' defaults (15 bins, λ = 1, γ₀ = 1, γ ∈ [−2, 20], S_th = 0.2)."""
    threshold = check_range("switch_threshold", switch_threshold, low=0.0, low_inclusive=False)
    params = {
        "n_bins": check_bins("n_bins", n_bins),
        "lam": check_range("lam", lam, low=0.0, low_inclusive=False),
        "gamma_initial": check_range("gamma_initial", gamma_initial),
        "gamma_min": check_range("gamma_min", gamma_min, high=-threshold),
        "gamma_max": check_range("gamma_max", gamma_max, low=threshold),
        "switch_threshold": threshold,
    }
    initial = params["gamma_initial"]
    if abs(initial) < threshold or not params["gamma_min"] <= initial <= params["gamma_max"]:
        raise ValueError(
            f"gamma_initial must be in [gamma_min, -switch_threshold] or "
            f"[switch_threshold, gamma_max] = [{params['gamma_min']}, {-threshold}] or "
            f"[{threshold}, {params['gamma_max']}], got {initial}"
        )
    return AdaFocal(params)


# --- CALS -----------------------------------------------------------------------------------


def logit_distance_constraints(logits: Tensor, margin: float, normalize: bool) -> Tensor:
    """CALS's constraints ``h_ik = max_j z_ij − z_ik − m`` (≤ 0 wanted), divided by ``m``
    when ``normalize``: ``(N, K)``."""
    distances = logits.amax(dim=1, keepdim=True) - logits - margin
    return distances / margin if normalize else distances


def phr_penalty(h: Tensor, multipliers: Tensor, rho: Tensor) -> Tensor:
    """The PHR penalty ``P(h; λ, ρ) = (max(0, λ + ρh)² − λ²) / (2ρ)`` elementwise."""
    return ((multipliers + rho * h).clamp_min(0).square() - multipliers.square()) / (2 * rho)


def phr_derivative(h: Tensor, multipliers: Tensor, rho: Tensor) -> Tensor:
    """``∂P/∂h = max(0, λ + ρh)``: the multiplier estimate of the augmented Lagrangian."""
    return (multipliers + rho * h).clamp_min(0)


class CALS(ValidationAdaptiveObjective):
    """Class Adaptive Label Smoothing: cross-entropy plus the mean over samples and classes of
    the PHR penalty of the logit-distance constraints, with a multiplier λ_k and a penalty
    weight ρ_k per class. After every epoch λ_k becomes the val mean of ``∂P/∂h`` (each sample's
    value and the mean clipped to ``[lambda_min, lambda_max]``); every ``rho_step`` epochs
    ρ_k grows by ``rho_growth`` (within ``[rho_min, rho_max]``) where the class's mean val
    constraint did not fall below ``rho_tolerance`` times its positive part an epoch earlier.

    λ starts at ``lambda_min`` and ρ at ``rho_min``, sized to the number of classes of the
    first logits seen.
    """

    validation_feedback = (
        "CALS: the Lagrange multiplier (and penalty weight) of each class, from the logit "
        "distances of the val split, after every epoch"
    )

    def __init__(self, hyperparameters: dict[str, Any]) -> None:
        super().__init__("cals", hyperparameters)
        self.multipliers: Tensor | None = None
        self.rho: Tensor | None = None
        self.previous_constraint: Tensor | None = None

    def _tensors(self) -> dict[str, Tensor | None]:
        return {
            "multipliers": self.multipliers,
            "rho": self.rho,
            "previous_constraint": self.previous_constraint,
        }

    def _state(self, logits: Tensor) -> tuple[Tensor, Tensor]:
        """(λ, ρ) on the logits' device, created for their number of classes on first use."""
        classes = logits.shape[1]
        if self.multipliers is None or self.rho is None:
            hp = self.hyperparameters
            self.multipliers = torch.full((classes,), hp["lambda_min"], device=logits.device)
            self.rho = torch.full((classes,), hp["rho_min"], device=logits.device)
        if self.multipliers.shape != (classes,):
            raise ValueError(
                f"cals holds multipliers of {self.multipliers.shape[0]} classes, the logits have "
                f"{classes}"
            )
        if self.multipliers.device != logits.device:  # once, after a load
            self.multipliers, self.rho = (
                self.multipliers.to(logits.device),
                self.rho.to(logits.device),
            )
        return self.multipliers, self.rho

    def constraints(self, logits: Tensor) -> Tensor:
        hp = self.hyperparameters
        return logit_distance_constraints(logits, hp["margin"], hp["normalize"])

    def __call__(self, logits: Tensor, targets: Tensor, **context: Any) -> Tensor:
        """The batch loss (0-d): CE (class indices or probabilities) + mean PHR penalty."""
        targets = prepare_targets(logits, targets)
        multipliers, rho = self._state(logits)
        penalty = phr_penalty(self.constraints(logits), multipliers, rho)
        return F.cross_entropy(logits, targets) + penalty.mean()

    def observe_validation(
        self, logits: Tensor, labels: Tensor, *, epoch: int
    ) -> dict[str, Tensor]:
        """Update λ (and, every ``rho_step`` epochs, ρ) from the val logits; returns the mean
        and largest λ and ρ and the mean val constraint."""
        hp = self.hyperparameters
        multipliers, rho = self._state(logits)
        h = self.constraints(logits.float())
        estimates = phr_derivative(h, multipliers, rho).clamp(hp["lambda_min"], hp["lambda_max"])
        self.multipliers = estimates.mean(dim=0).clamp(hp["lambda_min"], hp["lambda_max"])
        constraint = h.mean(dim=0)
        due = hp["rho_step"] > 0 and epoch % hp["rho_step"] == 0
        if due and self.previous_constraint is not None:
            previous = self.previous_constraint.to(constraint.device)
            grow = constraint > hp["rho_tolerance"] * previous.clamp_min(0)
            self.rho = torch.where(grow, rho * hp["rho_growth"], rho).clamp(
                hp["rho_min"], hp["rho_max"]
            )
        self.previous_constraint = constraint
        return {
            "cals_lambda_mean": self.multipliers.mean(),
            "cals_lambda_max": self.multipliers.max(),
            "cals_rho_mean": self.rho.mean(),
            "cals_rho_max": self.rho.max(),
            "cals_val_constraint_mean": constraint.mean(),
        }


def cals(
    margin: float = 10.0,
    normalize: bool = True,
    lambda_min: float = 1e-6,
    lambda_max: float = 1e6,
    rho_min: float = 1.0,
    rho_max: float = 10.0,
    rho_step: int = 10,
    rho_growth: float = 1.2,
    rho_tolerance: float = 0.9,
) -> CALS:
    """CALS with the authors' defaults (margin 10, normalised constraints, λ ∈ [1e-6, 1e6],
    ρ ∈ [1, 10] growing ×1.2 every 10 epochs unless the constraint fell below 0.9 of its
    previous value); ``rho_step: 0`` keeps ρ at ``rho_min``."""
    lambda_min = check_range("lambda_min", lambda_min, low=0.0, low_inclusive=False)
    rho_min = check_range("rho_min", rho_min, low=0.0, low_inclusive=False)
    return CALS(
        {
            "margin": check_range("margin", margin, low=0.0, low_inclusive=False),
            "normalize": check_bool("normalize", normalize),
            "lambda_min": lambda_min,
            "lambda_max": check_range("lambda_max", lambda_max, low=lambda_min),
            "rho_min": rho_min,
            "rho_max": check_range("rho_max", rho_max, low=rho_min),
            "rho_step": check_int("rho_step", rho_step, low=0),
            "rho_growth": check_range("rho_growth", rho_growth, low=1.0),
            "rho_tolerance": check_range("rho_tolerance", rho_tolerance, low=0.0),
        }
    )
