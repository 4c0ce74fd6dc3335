"""Affine calibrators on logits or log-probabilities: vector scaling, matrix scaling with
ODIR, and Dirichlet calibration (Kull et al., 2019).

All three compute ``z' = W·φ(z) + b`` and output ``softmax(z')``:

==================  =====================  =============  =====================
registry name       φ(z)                   W              default regulariser
==================  =====================  =============  =====================
vector_scaling      z                      diagonal       none
matrix_scaling      z                      full K×K       ODIR λ = μ = 100
dirichlet           log softmax(z)         full K×K       ODIR λ = μ = 100
==================  =====================  =============  =====================

ODIR (Kull et al.'s off-diagonal and intercept regularisation) adds
``λ/(K(K−1))·Σ_{i≠j} W_ij² + μ/K·Σ_j b_j²`` to the mean NLL: the diagonal (a per-class
temperature) is free, cross-class terms and biases are shrunk. Kull et al. choose λ and
μ by cross-validation; the default 100 is ours, a strong prior chosen because the
K(K+1) free parameters overfit badly otherwise (on 2,500 validation samples with
K = 100, λ = μ = 1 gives a held-out NLL ten times that of temperature scaling; see
docs/posthoc.md). Studies should sweep them.
Fitting starts at the identity ``W = I, b = 0`` (so ``z' = φ(z)`` and the output equals
the uncalibrated softmax) and runs scipy's L-BFGS-B on the exact float64 gradient with
its default tolerances (relative NLL change 2.2e-9, projected gradient 1e-5).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import torch
from scipy.optimize import minimize
from threadpoolctl import threadpool_limits
from torch import Tensor

from calib_pipeline.calibration._posthoc_base import LogitCalibrator, register
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
        n, k = features.shape
        one_hot = torch.nn.functional.one_hot(labels.cpu(), k).to(torch.float64)
        weight_shape = (k,) if self.diagonal else (k, k)
        n_weights = int(np.prod(weight_shape))
        off_diagonal = (
            torch.zeros(weight_shape, dtype=torch.float64)
            if self.diagonal
            else (1.0 - torch.eye(k, dtype=torch.float64))
        )
        lam = self.hyperparameters["off_diagonal_l2"] / (k * (k - 1))
        mu = self.hyperparameters["intercept_l2"] / k

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
            bias_gradient = residual.sum(dim=0) + 2 * mu * bias
            gradient = torch.cat([weight_gradient.reshape(-1), bias_gradient])
            return float(loss), gradient.numpy()

        identity = np.ones(k) if self.diagonal else np.eye(k)
        theta, converged = self._minimise(
            loss_and_gradient, np.concatenate([identity.reshape(-1), np.zeros(k)])
        )
        parameters = torch.from_numpy(np.ascontiguousarray(theta))
        self.weights = parameters[:n_weights].reshape(weight_shape).clone()
        self.bias = parameters[n_weights:].clone()
        return converged

    def _minimise(
        self, loss_and_gradient: Callable[[np.ndarray], tuple[float, np.ndarray]], start: np.ndarray
    ) -> tuple[np.ndarray, bool]:
        """L-BFGS-B from ``start`` for at most ``max_iter`` iterations (``start`` itself,
        with a warning, for 0): the parameters found and whether it converged."""
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
