"""Parameterised temperature scaling (PTS; Tomani, Cremers & Buettner, ECCV 2022): a small
network maps the sorted top logits of each sample to its own temperature.

``T(z) = |f(sort(z)[:k])|`` with ``f`` a multilayer perceptron (ReLU hidden layers, one
linear output), and the output is ``softmax(z / T(z))``; a positive per-sample temperature
keeps the argmax, so accuracy never changes. The authors train ``f`` (k = 10, two hidden
layers of 5 units) by Adam on the mean squared error between the calibrated probabilities
and the one-hot labels for 100,000 steps; here the same loss (or the NLL) is minimised
full-batch by L-BFGS-B on the float64 gradient, which is deterministic and ends at a
stationary point without a learning rate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from scipy.optimize import minimize
from torch import Tensor

from calib_pipeline.calibration._posthoc_base import LogitCalibrator, register
from calib_pipeline.registry import check_choice, check_int

PTS_LOSSES = ("mse", "nll")

# T(z) is floored here: |f| can reach 0, where z / T is undefined.
MIN_TEMPERATURE = 1e-2


def network_shapes(n_inputs: int, hidden: Sequence[int]) -> list[tuple[int, int]]:
    """``(fan_out, fan_in)`` of each linear layer of the temperature network."""
    sizes = [n_inputs, *hidden, 1]
    return list(zip(sizes[1:], sizes[:-1]))


def unpack(parameters: Tensor, shapes: list[tuple[int, int]]) -> list[tuple[Tensor, Tensor]]:
    """The flat parameter vector as ``(weight, bias)`` per layer."""
    layers, start = [], 0
    for fan_out, fan_in in shapes:
        weight = parameters[start : start + fan_out * fan_in].reshape(fan_out, fan_in)
        start += fan_out * fan_in
        layers.append((weight, parameters[start : start + fan_out]))
        start += fan_out
    return layers


def sample_temperatures(logits: Tensor, layers: list[tuple[Tensor, Tensor]], k: int) -> Tensor:
    """``max(|f(sort(z)[:k])|, 1e-2)`` for every row (N,)."""
    hidden = torch.topk(logits, k, dim=1).values
    for index, (weight, bias) in enumerate(layers):
        hidden = hidden @ weight.T + bias
        if index < len(layers) - 1:
            hidden = torch.relu(hidden)
    return hidden.squeeze(1).abs().clamp(min=MIN_TEMPERATURE)


def initial_parameters(shapes: list[tuple[int, int]], seed: int) -> np.ndarray:
    """Seeded start: hidden layers uniform in ``±1/√fan_in`` (PyTorch's ``Linear`` default),
    the output layer's weights 0 and bias 1, so the fit starts at T = 1 (the identity map)."""
    generator = torch.Generator().manual_seed(seed)
    pieces = []
    for index, (fan_out, fan_in) in enumerate(shapes):
        if index == len(shapes) - 1:
            pieces += [torch.zeros(fan_out * fan_in), torch.ones(fan_out)]
            continue
        bound = 1.0 / math.sqrt(fan_in)
        for size in (fan_out * fan_in, fan_out):
            pieces.append((torch.rand(size, generator=generator) * 2 - 1) * bound)
    return torch.cat(pieces).to(torch.float64).numpy()


@register
class ParameterizedTemperatureScaling(LogitCalibrator):
    """Parameterised temperature scaling (Tomani et al. 2022), module docstring.

    ``transform_logits(z) = z / T(z)``. The network's input is the ``k = min(top_k, K)``
    largest logits of a row, in decreasing order; the logits themselves, not only their
    softmax, so it needs logits.

    Hyperparameters:
        top_k (10), hidden (``[5, 5]``: units per hidden layer), loss (``"mse"``, the
        paper's, or ``"nll"``), seed (0: the start of the hidden layers), max_iter (2000:
        fits converge in several hundred iterations, docs/performance.md).
    """

    name = "parameterized_ts"
    fitted_attributes = ("parameters", "k", "iterations")
    needs_logits = True

    def __init__(
        self,
        *,
        top_k: int = 10,
        hidden: Sequence[int] = (5, 5),
        loss: str = "mse",
        seed: int = 0,
        max_iter: int = 2000,
    ) -> None:
        if isinstance(hidden, (str, bytes)) or not isinstance(hidden, Sequence):
            raise ValueError(f"hidden must be a list of layer widths, got {hidden!r}")
        super().__init__(
            top_k=check_int("top_k", top_k, low=1),
            hidden=[check_int("hidden layer width", width, low=1) for width in hidden],
            loss=check_choice("loss", loss, PTS_LOSSES),
            seed=check_int("seed", seed, low=0),
            max_iter=check_int("max_iter", max_iter, low=1),
        )

    def _fit(self, logits: Tensor, labels: Tensor) -> bool:
        options = self.hyperparameters
        logits, labels = logits.cpu(), labels.cpu()
        self.k = min(options["top_k"], logits.shape[1])
        shapes = network_shapes(self.k, options["hidden"])
        one_hot = torch.nn.functional.one_hot(labels, logits.shape[1]).to(torch.float64)

        def loss_and_gradient(theta: np.ndarray) -> tuple[float, np.ndarray]:
            parameters = torch.from_numpy(theta).requires_grad_(True)
            temperatures = sample_temperatures(logits, unpack(parameters, shapes), self.k)
            scaled = logits / temperatures.unsqueeze(1)
            if options["loss"] == "mse":
                loss = ((torch.softmax(scaled, dim=1) - one_hot) ** 2).mean()
            else:
                loss = torch.nn.functional.cross_entropy(scaled, labels)
            (gradient,) = torch.autograd.grad(loss, parameters)
            return loss.item(), gradient.numpy()

        result = minimize(
            loss_and_gradient,
            initial_parameters(shapes, options["seed"]),
            jac=True,
            method="L-BFGS-B",
            options={"maxiter": options["max_iter"]},
        )
        self.parameters = torch.from_numpy(result.x).clone()
        self.iterations = int(result.nit)
        return self._checked_convergence(bool(result.success), f"L-BFGS-B: {result.message}")

    def temperatures(self, logits: Tensor | np.ndarray) -> Tensor:
        """The per-sample temperature ``T(z)`` of each row (N,)."""
        return self._temperatures(self._checked_logits(logits))

    def _temperatures(self, logits: Tensor) -> Tensor:
        shapes = network_shapes(self.k, self.hyperparameters["hidden"])
        layers = unpack(self.parameters.to(logits.device), shapes)
        return sample_temperatures(logits, layers, self.k)

    def _transform_logits(self, logits: Tensor) -> Tensor:
        return logits / self._temperatures(logits).unsqueeze(1)

    def _learned(self) -> dict[str, Any]:
        return {"parameters": self.parameters.tolist(), "k": self.k, "iterations": self.iterations}
