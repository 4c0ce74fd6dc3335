"""Affine calibrators on logits or log-probabilities: vector scaling, matrix scaling with
ODIR, and Dirichlet calibration (Kull et al., 2019).

All three compute ``z' = W·φ(z) + b`` and output ``softmax(z')``:

==================  =====================  =============  =====================
registry name       φ(z)                   W              default regulariser
==================  =====================  =============  =====================
vector_scaling      z                      diagonal       none
matrix_scaling      z                      full K×K       ODIR λ = μ = 100
dirichlet           log softmax(z)         full K×K       ODIR λ = μ = 100
dirichlet_cv        log softmax(z)         full K×K       ODIR λ = μ by k-fold CV
==================  =====================  =============  =====================

ODIR (Kull et al.'s off-diagonal and intercept regularisation) adds
``λ/(K(K−1))·Σ_{i≠j} W_ij² + μ/K·Σ_j b_j²`` to the mean NLL: the diagonal (a per-class
temperature) is free, cross-class terms and biases are shrunk. Kull et al. choose λ and
μ by cross-validation; the default 100 is ours, a strong prior chosen because the
K(K+1) free parameters overfit badly otherwise (on 2,500 validation samples with
K = 100, λ = μ = 1 gives a held-out NLL ten times that of temperature scaling; see
docs/posthoc.md). Studies should sweep them; ``dirichlet_cv`` chooses λ = μ from a grid by
k-fold cross-validation on the fitting data, as Kull et al. do.
Fitting starts at the identity ``W = I, b = 0`` (so ``z' = φ(z)`` and the output equals
the uncalibrated softmax) and runs scipy's L-BFGS-B on the exact float64 gradient with
its default tolerances (relative NLL change 2.2e-9, projected gradient 1e-5).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
import torch
from scipy.optimize import minimize
from threadpoolctl import threadpool_limits
from torch import Tensor

from calib_pipeline.calibration._posthoc_base import LogitCalibrator, register
from calib_pipeline.calibration._posthoc_temperature import fit_temperature_nll
from calib_pipeline.data.splits import stratified_folds
from calib_pipeline.registry import check_int, check_range


class AffineCalibration(LogitCalibrator):
    """``z' = W·φ(z) + b``, fitted by mean NLL + ODIR with L-BFGS-B from the identity."""

    diagonal: ClassVar[bool]
    log_probability_features: ClassVar[bool]
    fitted_attributes = ("weights", "bias", "iterations")

    def __init__(self, *, off_diagonal_l2: float, intercept_l2: float, max_iter: int) -> None:
        off_diagonal_l2 = check_range("off_diagonal_l2", off_diagonal_l2, low=0.0)
        intercept_l2 = check_range("intercept_l2", intercept_l2, low=0.0)
        max_iter = check_int("max_iter", max_iter, low=0)
        super().__init__(
            off_diagonal_l2=off_diagonal_l2, intercept_l2=intercept_l2, max_iter=max_iter
        )
        self.iterations = 0

    def _features(self, logits: Tensor) -> Tensor:
        return torch.log_softmax(logits, dim=1) if self.log_probability_features else logits

    def _affine(self, features: Tensor, weights: Tensor, bias: Tensor) -> Tensor:
        if self.diagonal:
            return features * weights + bias
        return features @ weights.T + bias

    def _transform_logits(self, logits: Tensor) -> Tensor:
        device = logits.device
        return self._affine(self._features(logits), self.weights.to(device), self.bias.to(device))

    def _fit(self, logits: Tensor, labels: Tensor) -> bool:
        features = self._features(logits).cpu()
        theta, converged = self._solve(
            features,
            labels.cpu(),
            self.hyperparameters["off_diagonal_l2"],
            self.hyperparameters["intercept_l2"],
        )
        self._keep(theta, features.shape[1])
        return converged

    def _keep(self, theta: np.ndarray, k: int) -> None:
        """Store the parameter vector ``theta`` of ``k`` classes as ``weights`` and ``bias``."""
        parameters = torch.from_numpy(np.ascontiguousarray(theta))
        shape = (k,) if self.diagonal else (k, k)
        self.weights = parameters[: parameters.numel() - k].reshape(shape).clone()
        self.bias = parameters[parameters.numel() - k :].clone()

    def _solve(
        self,
        features: Tensor,
        labels: Tensor,
        off_diagonal_l2: float,
        intercept_l2: float,
        start: np.ndarray | None = None,
        *,
        warn: bool = True,
    ) -> tuple[np.ndarray, bool]:
        """The minimiser of mean NLL + ODIR on ``features`` (from the identity, or ``start``)
        and whether L-BFGS-B converged (a warning when not, unless ``warn`` is false)."""
        n, k = features.shape
        one_hot = torch.nn.functional.one_hot(labels, k).to(torch.float64)
        weight_shape = (k,) if self.diagonal else (k, k)
        n_weights = int(np.prod(weight_shape))
        identity = torch.ones(k, dtype=torch.float64)
        if not self.diagonal:
            identity = torch.diag(identity)
        off_diagonal = 1.0 - identity if not self.diagonal else torch.zeros_like(identity)
        lam, nu, mu = self._penalty_strengths(off_diagonal_l2, intercept_l2, n, k)

        def loss_and_gradient(theta: np.ndarray) -> tuple[float, np.ndarray]:
            parameters = torch.from_numpy(theta)
            weights = parameters[:n_weights].reshape(weight_shape)
            bias = parameters[n_weights:]
            scores = self._affine(features, weights, bias)
            log_p = torch.log_softmax(scores, dim=1)
            penalised_weights = weights * off_diagonal
            loss = (
                -(log_p * one_hot).sum() / n
                + lam * (penalised_weights**2).sum()
                + mu * (bias**2).sum()
            )
            residual = (log_p.exp() - one_hot) / n
            if self.diagonal:
                weight_gradient = (residual * features).sum(dim=0)
            else:
                weight_gradient = residual.T @ features
            weight_gradient += 2 * lam * penalised_weights
            if nu:  # the structured maps shrink the diagonal towards the identity's 1
                diagonal_shift = (weights - 1.0) * identity
                loss = loss + nu * (diagonal_shift**2).sum()
                weight_gradient += 2 * nu * diagonal_shift
            bias_gradient = residual.sum(dim=0) + 2 * mu * bias
            gradient = torch.cat([weight_gradient.reshape(-1), bias_gradient])
            return float(loss), gradient.numpy()

        if start is None:
            start = np.concatenate([identity.numpy().reshape(-1), np.zeros(k)])
        return self._minimise(loss_and_gradient, start, warn=warn)

    def _penalty_strengths(
        self, off_diagonal_l2: float, intercept_l2: float, n: int, k: int
    ) -> tuple[float, float, float]:
        """The coefficients of ``Σ_{i≠j} W_ij²``, ``Σ_i (W_ii − 1)²`` and ``Σ_j b_j²`` in
        the loss: ODIR's ``λ/(K(K−1))``, none, ``μ/K``."""
        return off_diagonal_l2 / (k * (k - 1)), 0.0, intercept_l2 / k

    def _minimise(
        self,
        loss_and_gradient: Callable[[np.ndarray], tuple[float, np.ndarray]],
        start: np.ndarray,
        *,
        warn: bool = True,
    ) -> tuple[np.ndarray, bool]:
        """L-BFGS-B from ``start`` for at most ``max_iter`` iterations (``start`` itself,
        with a warning, for 0): the parameters found and whether it converged (a warning
        when not, unless ``warn`` is false)."""
        max_iter = self.hyperparameters["max_iter"]
        if max_iter == 0:
            self._warn("max_iter = 0: the identity map was kept without fitting")
            return start, False
        # L-BFGS-B's BLAS calls are on short vectors: threads only add sync overhead,
        # which on a loaded machine costs more than the whole fit.
        with threadpool_limits(limits=1, user_api="blas"):
            result = minimize(
                loss_and_gradient,
                start,
                jac=True,
                method="L-BFGS-B",
                options={"maxiter": max_iter},
            )
        self.iterations = int(result.nit)
        if not warn:
            return result.x, bool(result.success)
        converged = self._checked_convergence(bool(result.success), f"L-BFGS-B: {result.message}")
        return result.x, converged

    def _learned(self) -> dict[str, Any]:
        return {
            "weights": self.weights.tolist(),
            "bias": self.bias.tolist(),
            "iterations": self.iterations,
        }


@register
class VectorScaling(AffineCalibration):
    """Vector scaling (Guo et al., 2017): ``z' = w ⊙ z + b``, unregularised by default."""

    name = "vector_scaling"
    diagonal = True
    log_probability_features = False
    needs_logits = True  # W·(z - c) ≠ W·z - c: a row's constant does not cancel

    def __init__(self, *, intercept_l2: float = 0.0, max_iter: int = 1000) -> None:
        super().__init__(off_diagonal_l2=0.0, intercept_l2=intercept_l2, max_iter=max_iter)

    def build_arguments(self) -> dict[str, Any]:
        """The hyperparameters but ``off_diagonal_l2``, which is always 0 (not an argument)."""
        return {k: v for k, v in self.hyperparameters.items() if k != "off_diagonal_l2"}


@register
class MatrixScaling(AffineCalibration):
    """Matrix scaling with ODIR (Kull et al., 2019): ``z' = W z + b``."""

    name = "matrix_scaling"
    diagonal = False
    log_probability_features = False
    needs_logits = True  # W·(z - c) ≠ W·z - c: a row's constant does not cancel

    def __init__(
        self, *, off_diagonal_l2: float = 100.0, intercept_l2: float = 100.0, max_iter: int = 1000
    ) -> None:
        super().__init__(
            off_diagonal_l2=off_diagonal_l2, intercept_l2=intercept_l2, max_iter=max_iter
        )


@register
class DirichletCalibration(AffineCalibration):
    """Dirichlet calibration (Kull et al., 2019): ``softmax(W·log p + b)`` with ODIR.

    ``transform_logits`` returns ``W·log p + b`` — at the identity that is ``log p``,
    which equals the input logits up to a per-row constant (same softmax).
    """

    name = "dirichlet"
    diagonal = False
    log_probability_features = True

    def __init__(
        self, *, off_diagonal_l2: float = 100.0, intercept_l2: float = 100.0, max_iter: int = 1000
    ) -> None:
        super().__init__(
            off_diagonal_l2=off_diagonal_l2, intercept_l2=intercept_l2, max_iter=max_iter
        )


# λ = μ candidates of dirichlet_cv: this module's ODIR scale (the penalty is divided by K(K-1)
# and K, so one grid serves every K), a factor 10 apart from 1 to 1e7: at K = 100 and a few
# thousand samples 1e5 or more wins, at K = 20 and 1,000 samples 1e4.
DEFAULT_L2_GRID = (1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6, 1e7)
# dirichlet_cv stops weakening λ after this many in a row did worse than the best so far
# (what it saves on 100 classes: docs/performance.md, "Figures behind choices in the code").
STOP_AFTER_WORSE = 2


@register
class DirichletCrossValidated(DirichletCalibration):
    """Dirichlet calibration with its ODIR strength chosen by k-fold cross-validation on the
    fitting data, as Kull et al. (2019) do: for each λ = μ of ``l2_grid`` the mean held-out
    NLL over ``folds`` stratified folds (seeded by ``seed``); the λ with the lowest is then
    fitted on all of it. Within a fold, λ runs from the strongest down and each fit starts
    from the previous one's solution, so weak λ start near a good map.
    """

    name = "dirichlet_cv"
    fitted_attributes = ("weights", "bias", "iterations", "chosen_l2", "cv_nll", "cv_unconverged")

    def __init__(
        self,
        *,
        l2_grid: Sequence[float] = DEFAULT_L2_GRID,
        folds: int = 5,
        seed: int = 0,
        max_iter: int = 1000,
    ) -> None:
        if isinstance(l2_grid, (str, bytes)) or not isinstance(l2_grid, Sequence) or not l2_grid:
            raise ValueError(f"l2_grid must be a non-empty list of numbers >= 0, got {l2_grid!r}")
        grid = [check_range("l2_grid value", value, low=0.0) for value in l2_grid]
        if len(set(grid)) != len(grid):
            raise ValueError(f"l2_grid must hold distinct values, got {grid}")
        LogitCalibrator.__init__(
            self,
            l2_grid=grid,
            folds=check_int("folds", folds, low=2),
            seed=check_int("seed", seed),
            max_iter=check_int("max_iter", max_iter, low=0),
        )
        self.iterations = 0

    def _fit(self, logits: Tensor, labels: Tensor) -> bool:
        features, labels = self._features(logits).cpu(), labels.cpu()
        self.cv_nll, self.cv_unconverged = self._cross_validated_nll(features, labels)
        grid = self.hyperparameters["l2_grid"]
        tried = [(nll, l2) for nll, l2 in zip(self.cv_nll, grid) if nll is not None]
        self.chosen_l2 = min(tried)[1]
        if self.chosen_l2 in (min(grid), max(grid)) and len(grid) > 1:
            self._warn(
                f"the cross-validated λ = {self.chosen_l2:g} is at an end of l2_grid "
                f"{grid}: widen the grid"
            )
        theta, converged = self._solve(features, labels, self.chosen_l2, self.chosen_l2)
        self._keep(theta, features.shape[1])
        return converged

    def _cross_validated_nll(
        self, features: Tensor, labels: Tensor
    ) -> tuple[list[float | None], int]:
        """Mean held-out NLL of each λ of ``l2_grid`` (in its order; None for a λ not tried)
        and the number of fold fits that stopped without converging.

        λ runs from the strongest down; within a fold each fit starts from the previous λ's
        solution. Once ``STOP_AFTER_WORSE`` λ in a row did worse than the best so far, the
        weaker ones are not tried: the held-out NLL rises as ODIR weakens past its optimum,
        and the weak fits are the slow ones (many iterations, many classes).
        """
        grid = self.hyperparameters["l2_grid"]
        fold_of = torch.from_numpy(
            stratified_folds(
                labels.numpy(), self.hyperparameters["folds"], self.hyperparameters["seed"]
            )
        )
        folds = range(self.hyperparameters["folds"])
        starts: dict[int, np.ndarray | None] = dict.fromkeys(folds)
        held_out: list[float | None] = [None] * len(grid)
        unconverged, worse = 0, 0
        for position in sorted(range(len(grid)), key=lambda i: -grid[i]):
            total = 0.0
            for fold in folds:
                fit, check = fold_of != fold, fold_of == fold
                starts[fold], converged = self._solve(
                    features[fit],
                    labels[fit],
                    grid[position],
                    grid[position],
                    starts[fold],
                    warn=False,
                )
                unconverged += not converged
                total += self._summed_nll(features[check], labels[check], starts[fold])
            best = min((v for v in held_out if v is not None), default=math.inf)
            held_out[position] = total / labels.numel()
            worse = worse + 1 if held_out[position] > best else 0
            if worse == STOP_AFTER_WORSE:
                break
        return held_out, unconverged

    def _summed_nll(self, features: Tensor, labels: Tensor, theta: np.ndarray) -> float:
        k = features.shape[1]
        parameters = torch.from_numpy(np.ascontiguousarray(theta))
        weights, bias = parameters[: k * k].reshape(k, k), parameters[k * k :]
        scores = self._affine(features, weights, bias)
        return float(torch.nn.functional.cross_entropy(scores, labels, reduction="sum"))

    def _learned(self) -> dict[str, Any]:
        return {
            **super()._learned(),
            "chosen_l2": self.chosen_l2,
            "cv_nll": list(self.cv_nll),
            "cv_unconverged": self.cv_unconverged,
        }


class StructuredScaling(AffineCalibration):
    """Structured scaling (Berta, Holzmüller, Jordan & Bach, 2026): temperature scaling, then
    an affine map of its log-probabilities shrunk towards the identity.

    ``z' = W·log softmax(z / T) + b`` with T the exact NLL temperature of the fitting data
    (``fit_temperature_nll``, unregularised) and W, b minimising the mean NLL plus
    ``λ_b·Σ b_j² + λ_d·Σ (W_jj − 1)² + λ_o·Σ_{i≠j} W_ij²``, where
    ``λ_b = intercept_l2·K^ρ/N^τ``, ``λ_d = diagonal_l2·K^ρ/N^τ`` and
    ``λ_o = off_diagonal_l2·(K(K−1))^ρ/N^τ`` (N fitting samples): the penalty fades as N
    grows and the map tends to unregularised vector or matrix scaling.
    """

    fitted_attributes = ("temperature", "weights", "bias", "iterations")
    log_probability_features = True

    def __init__(self, **hyperparameters: float) -> None:
        checked = {
            key: check_range(key, value, low=0.0)
            for key, value in hyperparameters.items()
            if key != "max_iter"
        }
        LogitCalibrator.__init__(
            self, **checked, max_iter=check_int("max_iter", hyperparameters["max_iter"], low=0)
        )
        self.iterations = 0
        self.temperature = 1.0

    def _features(self, logits: Tensor) -> Tensor:
        return torch.log_softmax(logits / self.temperature, dim=1)

    def _fit(self, logits: Tensor, labels: Tensor) -> bool:
        fit = fit_temperature_nll(logits, labels)
        self.temperature = fit.temperature
        if not fit.identifiable:
            self._warn("the temperature of the first stage is not identifiable; T = 1 kept")
        features = self._features(logits).cpu()
        theta, converged = self._solve(features, labels.cpu(), 0.0, 0.0)
        self._keep(theta, features.shape[1])
        return converged

    def _penalty_strengths(
        self, off_diagonal_l2: float, intercept_l2: float, n: int, k: int
    ) -> tuple[float, float, float]:
        """``(λ_o, λ_d, λ_b)`` of the class docstring (the ODIR arguments are unused)."""
        options = self.hyperparameters
        shrink = k ** options["rho"] / n ** options["tau"]
        off_diagonal = options.get("off_diagonal_l2", 0.0) * (k * (k - 1)) ** options["rho"]
        return (
            off_diagonal / n ** options["tau"],
            options["diagonal_l2"] * shrink,
            options["intercept_l2"] * shrink,
        )

    def _learned(self) -> dict[str, Any]:
        return {"temperature": self.temperature, **super()._learned()}


@register
class StructuredVectorScaling(StructuredScaling):
    """Structured vector scaling (SVS; Berta et al. 2026): diagonal W (``StructuredScaling``).

    Hyperparameters (probmetrics' ``svs`` defaults): intercept_l2 (1), diagonal_l2 (1),
    rho (1), tau (1), max_iter (1000).
    """

    name = "structured_vector_scaling"
    diagonal = True

    def __init__(
        self,
        *,
        intercept_l2: float = 1.0,
        diagonal_l2: float = 1.0,
        rho: float = 1.0,
        tau: float = 1.0,
        max_iter: int = 1000,
    ) -> None:
        super().__init__(
            intercept_l2=intercept_l2, diagonal_l2=diagonal_l2, rho=rho, tau=tau, max_iter=max_iter
        )


@register
class StructuredMatrixScaling(StructuredScaling):
    """Structured matrix scaling (SMS; Berta et al. 2026): full W (``StructuredScaling``).

    Hyperparameters (probmetrics' ``sms`` defaults): intercept_l2 (1), diagonal_l2 (1),
    off_diagonal_l2 (1), rho (1), tau (1), max_iter (1000).
    """

    name = "structured_matrix_scaling"
    diagonal = False

    def __init__(
        self,
        *,
        intercept_l2: float = 1.0,
        diagonal_l2: float = 1.0,
        off_diagonal_l2: float = 1.0,
        rho: float = 1.0,
        tau: float = 1.0,
        max_iter: int = 1000,
    ) -> None:
        super().__init__(
            intercept_l2=intercept_l2,
            diagonal_l2=diagonal_l2,
            off_diagonal_l2=off_diagonal_l2,
            rho=rho,
            tau=tau,
            max_iter=max_iter,
        )
