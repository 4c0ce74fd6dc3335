"""The accuracy-preserving calibrators of Zhang, Kailkhura & Han (ICML 2020, "Mix-n-Match"):
ensemble temperature scaling (ETS) and multi-class isotonic regression (IRM).

Both map every class's probability the same order-preserving way, so the predicted class
never changes.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from scipy.optimize import minimize, minimize_scalar
from torch import Tensor

from calib_pipeline.calibration._posthoc_base import Calibrator, register
from calib_pipeline.calibration._posthoc_binning import IsotonicMap
from calib_pipeline.calibration._posthoc_temperature import fit_temperature_nll
from calib_pipeline.registry import check_choice, check_range

ETS_LOSSES = ("mse", "nll")

# Probabilities are floored here inside the NLL of the weight fit: a weight vector with no
# uniform share can give a label probability 0, whose log would stop the optimiser.
SMALLEST_PROBABILITY = 1e-300


def _brier_of_temperature(log_temperature: float, logits: Tensor, one_hot: Tensor) -> float:
    """Mean over the N×K entries of ``(softmax(z / T) − onehot)²`` at ``T = exp(log T)``."""
    probabilities = torch.softmax(logits / math.exp(log_temperature), dim=1)
    return float(((probabilities - one_hot) ** 2).mean())


def _mixture_loss(
    weights: np.ndarray, components: Tensor, one_hot: Tensor, loss: str
) -> tuple[float, np.ndarray]:
    """Loss and gradient in the weights of ``p = Σ_j w_j·P_j`` (``components`` 3×N×K)."""
    w = torch.from_numpy(weights)
    mixed = torch.einsum("j,jnk->nk", w, components)
    if loss == "mse":
        residual = mixed - one_hot
        gradient = 2 * torch.einsum("nk,jnk->j", residual, components) / residual.numel()
        return float((residual**2).mean()), gradient.numpy()
    label_probability = (mixed * one_hot).sum(dim=1).clamp(min=SMALLEST_PROBABILITY)
    label_components = (components * one_hot).sum(dim=2)
    gradient = -(label_components / label_probability).mean(dim=1)
    return float(-label_probability.log().mean()), gradient.numpy()


@register
class EnsembleTemperatureScaling(Calibrator):
    """Ensemble temperature scaling (ETS; Zhang et al. 2020):
    ``p = w₁·softmax(z/T) + w₂·softmax(z) + w₃·1/K``, w on the probability simplex.

    T is fitted first, then the three weights, both on the validation set and both by
    ``loss``: ``"mse"`` (the authors' code: the mean squared error over the N×K entries,
    i.e. the Brier score / K) or ``"nll"``. For ``"nll"`` T is ``fit_temperature_nll``'s exact
    optimum; for ``"mse"`` it is a bounded Brent search in log T on ``[t_min, t_max]``. The
    weights are fitted by SLSQP on the simplex from ``(1, 0, 0)`` (plain temperature
    scaling), with the exact gradient. Every component ranks the classes as ``z`` does, so
    the argmax never changes -- unless ``w₁ = w₂ = 0`` (the model no better than uniform),
    which is warned.

    Hyperparameters: loss (``"mse"``), t_min (0.01), t_max (100).
    """

    name = "ets"
    fitted_attributes = ("temperature", "weights")

    def __init__(self, *, loss: str = "mse", t_min: float = 0.01, t_max: float = 100.0) -> None:
        loss = check_choice("loss", loss, ETS_LOSSES)
        t_min = check_range("t_min", t_min, low=1e-6, high=1e6)
        t_max = check_range("t_max", t_max, low=t_min, high=1e6, low_inclusive=False)
        super().__init__(loss=loss, t_min=t_min, t_max=t_max)

    def _fit(self, logits: Tensor, labels: Tensor) -> bool:
        logits, labels = logits.cpu(), labels.cpu()
        one_hot = torch.nn.functional.one_hot(labels, logits.shape[1]).to(torch.float64)
        self.temperature = self._fit_temperature(logits, labels, one_hot)
        components = self._components(logits)
        result = minimize(
            _mixture_loss,
            np.array([1.0, 0.0, 0.0]),
            args=(components, one_hot, self.hyperparameters["loss"]),
            jac=True,
            method="SLSQP",
            bounds=[(0.0, 1.0)] * 3,
            constraints={"type": "eq", "fun": lambda w: w.sum() - 1.0, "jac": lambda w: np.ones(3)},
            options={"ftol": 1e-12, "maxiter": 1000},
        )
        weights = np.clip(result.x, 0.0, 1.0)
        self.weights = torch.from_numpy(weights / weights.sum())
        if float(self.weights[:2].sum()) == 0.0:
            self._warn("the fitted mixture is all uniform: every prediction is a tie")
        return self._checked_convergence(bool(result.success), f"SLSQP: {result.message}")

    def _fit_temperature(self, logits: Tensor, labels: Tensor, one_hot: Tensor) -> float:
        options = self.hyperparameters
        if options["loss"] == "nll":
            fit = fit_temperature_nll(
                logits, labels, t_min=options["t_min"], t_max=options["t_max"]
            )
            if not fit.identifiable:
                self._warn("the temperature is not identifiable on these logits; T = 1 kept")
            return fit.temperature
        bounds = (math.log(options["t_min"]), math.log(options["t_max"]))
        result = minimize_scalar(
            _brier_of_temperature,
            bounds=bounds,
            args=(logits, one_hot),
            method="bounded",
            options={"xatol": 1e-8},
        )
        return math.exp(float(result.x))

    def _components(self, logits: Tensor) -> Tensor:
        """``softmax(z/T)``, ``softmax(z)`` and the uniform distribution, stacked (3×N×K)."""
        uniform = torch.full_like(logits, 1.0 / logits.shape[1])
        scaled = torch.softmax(logits / self.temperature, dim=1)
        return torch.stack([scaled, torch.softmax(logits, dim=1), uniform])

    def _predict_proba(self, logits: Tensor) -> Tensor:
        weights = self.weights.to(logits.device)
        return torch.einsum("j,jnk->nk", weights, self._components(logits))

    def _learned(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "weights": self.weights.tolist()}


# IRM breaks ties of the shared isotonic map by the uncalibrated probability, with this weight
# (the authors' code's): it keeps the argmax and is far below any difference that matters.
TIE_BREAK = 1e-9


@register
class MulticlassIsotonic(Calibrator):
    """Accuracy-preserving multi-class isotonic regression (IRM; Zhang et al. 2020).

    One isotonic map is fitted on the N·K pairs ``(p_ik, 1[y_i = k])`` of every class at
    once (the same scikit-learn settings as ``isotonic_top_label``) and applied to every
    entry: ``q_ik = g(p_ik) + 1e-9·p_ik``, rows renormalised. ``g`` is non-decreasing and the
    tie-break term strictly increasing, so a row's order, hence the argmax, is kept (tied
    entries stay tied, and the first of them stays the argmax).
    """

    name = "irm"
    fitted_attributes = ("map",)

    def __init__(self) -> None:
        super().__init__()

    def _fit(self, logits: Tensor, labels: Tensor) -> bool:
        probabilities = torch.softmax(logits, dim=1).cpu()
        one_hot = torch.nn.functional.one_hot(labels.cpu(), logits.shape[1])
        self.map = IsotonicMap.fit(
            probabilities.reshape(-1).numpy(), one_hot.reshape(-1).to(torch.float64).numpy()
        )
        return True

    def _predict_proba(self, logits: Tensor) -> Tensor:
        probabilities = torch.softmax(logits, dim=1)
        mapped = self.map(probabilities.cpu().numpy().reshape(-1)).reshape(probabilities.shape)
        mapped = torch.as_tensor(mapped, dtype=torch.float64, device=logits.device)
        scores = mapped + TIE_BREAK * probabilities
        return scores / scores.sum(dim=1, keepdim=True)

    def _learned(self) -> dict[str, Any]:
        return self.map.learned()
