"""Training objectives of the five papers and later baselines: ``build_objective(name, **hp)``.

Every objective has the form of Karandikar et al.'s composite loss

    L = mean_i PL(z_i, q_i)  +  beta * SL(batch)  +  lambda * sum_W ||W||^2

with a per-sample primary loss PL, an optional batch-level secondary (calibration) loss
SL and an optional L2 term on the model's weight matrices / kernels. Plain objectives
(cross-entropy, focal, label smoothing, ...) are the case beta = lambda = 0; MMCE is
NLL + lambda * MMCE; ``composite`` exposes the full primary x secondary grid.

An objective is called as ``objective(logits, targets, **context)`` and returns a 0-d
tensor; ``targets`` are class indices ``(N,)`` or target probabilities ``(N, K)``;
``context`` may hold ``model`` (needed when ``l2 > 0``), ``epoch`` (1-based) and
``features`` and anything else, which objectives ignore. The training engine passes
``model`` and ``epoch`` on every step and the batch's penultimate ``features`` to an
objective whose ``uses_features`` attribute is true (computing them costs nothing extra,
but the step then runs eagerly under ``training.compile``). Mixup additionally mixes the batch
through ``objective.mix_batch(inputs, targets, generator)``. Formulas, defaults and sources are
listed in docs/objectives.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from calib_pipeline.calibration import _losses_adaptive as adaptive
from calib_pipeline.calibration import _losses_elementwise as elementwise
from calib_pipeline.calibration import _losses_secondary as secondary_losses
from calib_pipeline.calibration._losses_elementwise import focal_loss, prepare_targets
from calib_pipeline.calibration.metrics import sb_ece_temperature
from calib_pipeline.registry import (
    Registry,
    check_bins,
    check_bool,
    check_choice,
    check_range,
)

__all__ = [
    "OBJECTIVES",
    "MixupObjective",
    "Objective",
    "build_objective",
    "focal_loss",
    "objective_names",
    "weight_l2",
]

PerSampleLoss = Callable[[Tensor, Tensor], Tensor]
BatchLoss = Callable[[Tensor, Tensor], Tensor]
LossTerm = tuple[PerSampleLoss | BatchLoss, dict[str, Any]]

OBJECTIVES: Registry[Objective] = Registry("objective")
PRIMARY_LOSSES: Registry[LossTerm] = Registry("primary loss")
SECONDARY_LOSSES: Registry[LossTerm | None] = Registry("secondary loss")


def weight_l2(model: nn.Module) -> Tensor:
    """``sum_W ||W||_2^2`` over the trainable parameters with at least two dimensions.

    Conv kernels and linear weight matrices count; biases and normalisation scales
    (1-D) do not. Karandikar et al. name only "the weight normalization term with l2
    norm"; Uncertainty Baselines' code also counts the conv/dense biases
    (docs/objectives.md).
    """
    squares = [w.square().sum() for w in model.parameters() if w.requires_grad and w.ndim >= 2]
    if not squares:
        raise ValueError("the l2 term found no weight matrix or kernel in the model")
    return torch.stack(squares).sum()


def _fused_mean_options(primary: PerSampleLoss) -> dict[str, float] | None:
    """``F.cross_entropy`` options that give ``mean_i primary`` in one op, or None.

    Cross-entropy and label smoothing are ``F.cross_entropy(reduction="none")``; their batch
    mean is the same call with torch's own mean reduction (sum / N for class indices and for
    probabilities), which saves the per-sample vector, a ``mean`` and its backward on every
    step (two of the engine's ~20 operations per step beyond a bare loop's; see
    docs/performance.md, "What the engine adds per step").
    """
    if primary is elementwise.cross_entropy:
        return {}
    if (
        isinstance(primary, partial)
        and primary.func is elementwise.label_smoothing
        and not primary.args
    ):
        return {"label_smoothing": primary.keywords["epsilon"]}
    return None


class Objective:
    """A training objective ``mean_i PL + beta * SL + l2 * ||W||^2``; see the module docstring.

    Attributes:
        name: the registry name it was built under.
        hyperparameters: the effective hyperparameters (defaults filled in); calling
            ``build_objective(name, **hyperparameters)`` rebuilds the same objective.
        uses_features: whether the training step must pass the batch's penultimate
            ``features`` as context (a subclass that reads them sets it true).
    """

    uses_features: bool = False

    def __init__(
        self,
        name: str,
        hyperparameters: dict[str, Any],
        primary: PerSampleLoss,
        secondary: BatchLoss | None = None,
        beta: float = 0.0,
        l2: float = 0.0,
    ) -> None:
        self.name = name
        self.hyperparameters = hyperparameters
        self._primary = primary
        self._fused_mean = _fused_mean_options(primary)
        self._secondary = secondary
        self._beta = beta
        self._l2 = l2

    def __call__(self, logits: Tensor, targets: Tensor, **context: Any) -> Tensor:
        """The batch loss (0-d). ``context['model']`` is required when ``l2 > 0``."""
        targets = prepare_targets(logits, targets)
        if self._fused_mean is not None:
            loss = F.cross_entropy(logits, targets, **self._fused_mean)
        else:
            loss = self._primary(logits, targets).mean()
        if self._secondary is not None and self._beta != 0.0:
            loss = loss + self._beta * self._secondary(logits, targets)
        if self._l2 != 0.0:
            model = context.get("model")
            if not isinstance(model, nn.Module):
                raise ValueError(
                    f"objective {self.name!r} has l2={self._l2} and needs the model: "
                    "call it with model=<nn.Module>"
                )
            loss = loss + self._l2 * weight_l2(model)
        return loss

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.hyperparameters})"


class MixupObjective(Objective):
    """Mixup (Zhang et al. 2018): cross-entropy on targets mixed with the inputs.

    ``mix_batch`` draws one ``lam ~ Beta(alpha, alpha)`` per batch and a random pairing
    on the training device;
    the loss on the mixed targets ``lam * y_a + (1 - lam) * y_b`` equals
    ``lam * CE(y_a) + (1 - lam) * CE(y_b)``.
    """

    def __init__(self, alpha: float) -> None:
        super().__init__("mixup", {"alpha": alpha}, elementwise.cross_entropy)
        self.alpha = alpha

    def mix_batch(
        self,
        inputs: Tensor,
        targets: Tensor,
        generator: torch.Generator,
        num_classes: int | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Mix a batch: ``(lam x + (1 - lam) x[perm], lam q + (1 - lam) q[perm])``.

        Everything is drawn on ``generator``'s device and stays a tensor there (no host
        synchronisation, so a training step on a GPU never waits for it): ``lam`` as
        ``G_a / (G_a + G_b)`` with ``G_a, G_b ~ Gamma(alpha)`` independent -- exactly
        ``Beta(alpha, alpha)`` -- and the pairing as one permutation.

        Args:
            inputs: ``(N, ...)`` input batch, on the generator's device.
            targets: ``(N,)`` class indices or ``(N, K)`` target probabilities.
            generator: the only source of randomness, so seeded runs repeat exactly.
            num_classes: ``K`` for class indices; without it ``K' = max(targets) + 1``
                (reading that maximum waits for the device; the losses treat missing
                classes as probability 0).

        Returns:
            Mixed inputs and ``(N, K)`` target probabilities.
        """
        if targets.shape[:1] != inputs.shape[:1]:
            raise ValueError(
                f"inputs and targets disagree on the batch size: {inputs.shape[0]} vs "
                f"{targets.shape[0]}"
            )
        device = generator.device
        shapes = torch.full((2,), float(self.alpha), dtype=torch.float64, device=device)
        draws = torch._standard_gamma(shapes, generator=generator)
        # Both draws underflow to 0 only for tiny alpha (probability < 1e-15 at alpha 0.2);
        # lam is then 0, a valid Beta value, rather than NaN.
        lam = draws[0] / draws.sum().clamp_min(torch.finfo(torch.float64).tiny)
        perm = torch.randperm(inputs.shape[0], generator=generator, device=device)
        perm = perm.to(inputs.device)
        if targets.is_floating_point():
            soft = targets
        else:
            width = num_classes if num_classes is not None else int(targets.max()) + 1
            soft = F.one_hot(targets, width).to(
                inputs.dtype if inputs.is_floating_point() else torch.get_default_dtype()
            )
        lam_inputs = lam.to(
            inputs.device, inputs.dtype if inputs.is_floating_point() else soft.dtype
        )
        lam_soft = lam.to(inputs.device, soft.dtype)
        return (
            lam_inputs * inputs + (1.0 - lam_inputs) * inputs[perm],
            lam_soft * soft + (1.0 - lam_soft) * soft[perm],
        )


def build_objective(name: str, **hyperparameters: Any) -> Objective:
    """Build the objective registered as ``name``.

    Args:
        name: one of ``objective_names()``.
        **hyperparameters: that objective's hyperparameters (docs/objectives.md).

    Returns:
        A callable ``Objective`` (``MixupObjective`` for ``"mixup"``).

    Raises:
        ValueError: unknown name (listing the valid ones), unknown hyperparameter, or a
            value outside its valid range (quoting value and range).

    Example:
        >>> objective = build_objective("focal", gamma=2.0)
        >>> objective
        Objective('focal', {'gamma': 2.0, 'detach_pt': False})
        >>> logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
        >>> round(float(objective(logits, torch.tensor([0, 2]))), 4)
        0.4872
        >>> build_objective("focal", gamma=-1.0)
        Traceback (most recent call last):
        ...
        ValueError: gamma must be in [0.0, inf), got -1.0
    """
    return OBJECTIVES.build(name, **hyperparameters)


def objective_names() -> list[str]:
    return OBJECTIVES.names()


# --- validation helpers -------------------------------------------------------------


def _check_kappa(kappa: Any) -> float:
    return check_range("kappa", kappa, low=0.0, high=1.0, low_inclusive=False, high_inclusive=False)


def _check_gamma(gamma: Any) -> float:
    return check_range("gamma", gamma, low=0.0)


def _check_coefficient(name: str, value: Any) -> float:
    return check_range(name, value, low=0.0)


# --- primary losses (composite) -----------------------------------------------------


@PRIMARY_LOSSES.register("nll")
def _primary_nll() -> LossTerm:
    return elementwise.cross_entropy, {}


@PRIMARY_LOSSES.register("focal")
def _primary_focal(gamma: float = 3.0, detach_pt: bool = False) -> LossTerm:
    gamma, detach_pt = _check_gamma(gamma), check_bool("detach_pt", detach_pt)
    loss = partial(elementwise.focal_per_sample, gamma=gamma, detach_pt=detach_pt)
    return loss, {"gamma": gamma, "detach_pt": detach_pt}


@PRIMARY_LOSSES.register("mse")
def _primary_mse() -> LossTerm:
    return elementwise.mse, {}


@PRIMARY_LOSSES.register("label_smoothing")
def _primary_label_smoothing(epsilon: float = 0.05) -> LossTerm:
    epsilon = check_range("epsilon", epsilon, low=0.0, high=1.0, high_inclusive=False)
    return partial(elementwise.label_smoothing, epsilon=epsilon), {"epsilon": epsilon}


# --- secondary losses (composite) ---------------------------------------------------


@SECONDARY_LOSSES.register("none")
def _secondary_none() -> None:
    return None


@SECONDARY_LOSSES.register("mmce")
def _secondary_mmce(width: float = 0.4, estimator: str = "weighted_code") -> LossTerm:
    width = check_range("width", width, low=0.0, low_inclusive=False)
    estimator = check_choice("estimator", estimator, secondary_losses.MMCE_ESTIMATORS)
    loss = partial(secondary_losses.mmce, width=width, estimator=estimator)
    return loss, {"width": width, "estimator": estimator}


@SECONDARY_LOSSES.register("avuc")
def _secondary_avuc(kappa: float = 0.5) -> LossTerm:
    kappa = _check_kappa(kappa)
    return partial(secondary_losses.avuc, kappa=kappa, stop_gradient=False), {"kappa": kappa}


@SECONDARY_LOSSES.register("avuc_gs")
def _secondary_avuc_gs(kappa: float = 0.5) -> LossTerm:
    kappa = _check_kappa(kappa)
    return partial(secondary_losses.avuc, kappa=kappa, stop_gradient=True), {"kappa": kappa}


@SECONDARY_LOSSES.register("soft_avuc")
def _secondary_soft_avuc(kappa: float = 0.5, temperature: float = 1.0) -> LossTerm:
    kappa = _check_kappa(kappa)
    temperature = check_range("temperature", temperature, low=0.0, low_inclusive=False)
    loss = partial(secondary_losses.soft_avuc, kappa=kappa, temperature=temperature)
    return loss, {"kappa": kappa, "temperature": temperature}


@SECONDARY_LOSSES.register("sb_ece")
def _secondary_sb_ece(
    n_bins: int = 15, temperature: float | None = None, label_binned: bool = True, p: float = 2.0
) -> LossTerm:
    n_bins = check_bins("n_bins", n_bins)
    if temperature is None:  # the authors' decay rule for n_bins (metrics.sb_ece_temperature)
        temperature = sb_ece_temperature(n_bins)
    temperature = check_range("temperature", temperature, low=0.0, low_inclusive=False)
    label_binned = check_bool("label_binned", label_binned)
    p = check_range("p", p, low=1.0)
    params = {"n_bins": n_bins, "temperature": temperature, "label_binned": label_binned, "p": p}
    return partial(secondary_losses.sb_ece, **params), params


@SECONDARY_LOSSES.register("mdca")
def _secondary_mdca() -> LossTerm:
    return secondary_losses.mdca, {}


def _build_term(registry: Registry[Any], spec: str | Mapping[str, Any]) -> tuple[str, Any]:
    """Build a primary/secondary term from ``"name"`` or ``{"name": ..., **params}``."""
    if isinstance(spec, str):
        return spec, registry.build(spec)
    if isinstance(spec, Mapping) and isinstance(spec.get("name"), str):
        params = {key: value for key, value in spec.items() if key != "name"}
        return spec["name"], registry.build(spec["name"], **params)
    raise ValueError(
        f"a {registry.kind} must be a name or a mapping with a 'name' key, got {spec!r}; "
        f"valid names: {', '.join(registry.names())}"
    )


def _composite_terms(
    primary: str | Mapping[str, Any],
    secondary: str | Mapping[str, Any],
    beta: float,
    l2: float,
) -> tuple[dict[str, Any], PerSampleLoss, BatchLoss | None]:
    """Validate and build the terms of ``PL + beta * SL + l2 * ||W||^2``.

    Returns:
        The effective hyperparameters (specs as ``{"name": ..., **defaults filled}``),
        the primary and the secondary loss (``None`` for ``"none"``).
    """
    beta, l2 = _check_coefficient("beta", beta), _check_coefficient("l2", l2)
    primary_name, (primary_loss, primary_params) = _build_term(PRIMARY_LOSSES, primary)
    secondary_name, secondary_term = _build_term(SECONDARY_LOSSES, secondary)
    secondary_loss, secondary_params = secondary_term or (None, {})
    effective = {
        "primary": {"name": primary_name, **primary_params},
        "secondary": {"name": secondary_name, **secondary_params},
        "beta": beta,
        "l2": l2,
    }
    return effective, primary_loss, secondary_loss


@OBJECTIVES.register("composite")
def _composite(
    primary: str | Mapping[str, Any] = "nll",
    secondary: str | Mapping[str, Any] = "none",
    beta: float = 1.0,
    l2: float = 0.0,
) -> Objective:
    """Karandikar et al.: primary in {nll, focal, mse, label_smoothing}, secondary in
    {none, mmce, avuc, avuc_gs, soft_avuc, sb_ece, mdca}, each a name or a
    ``{"name": ..., **hyperparameters}`` mapping."""
    effective, primary_loss, secondary_loss = _composite_terms(primary, secondary, beta, l2)
    return Objective(
        "composite", effective, primary_loss, secondary_loss, effective["beta"], effective["l2"]
    )


def _nll_plus(name: str, coefficient: str, value: float, secondary: dict[str, Any]) -> Objective:
    """NLL + value * secondary, recorded flat as ``{coefficient: value, **secondary params}``."""
    value = _check_coefficient(coefficient, value)
    effective, primary_loss, secondary_loss = _composite_terms("nll", secondary, value, 0.0)
    params = {key: v for key, v in effective["secondary"].items() if key != "name"}
    return Objective(name, {coefficient: value, **params}, primary_loss, secondary_loss, value)


# --- objectives -----------------------------------------------------------------------


@OBJECTIVES.register("cross_entropy")
def _cross_entropy() -> Objective:
    return Objective("cross_entropy", {}, elementwise.cross_entropy)


@OBJECTIVES.register("label_smoothing")
def _label_smoothing(epsilon: float = 0.05) -> Objective:
    loss, params = _primary_label_smoothing(epsilon)
    return Objective("label_smoothing", params, loss)


@OBJECTIVES.register("entropy_regularized")
def _entropy_regularized(beta: float = 0.1) -> Objective:
    beta = _check_coefficient("beta", beta)
    loss = partial(elementwise.entropy_regularized, beta=beta)
    return Objective("entropy_regularized", {"beta": beta}, loss)


@OBJECTIVES.register("mixup")
def _mixup(alpha: float = 0.2) -> MixupObjective:
    return MixupObjective(check_range("alpha", alpha, low=0.0, low_inclusive=False))


@OBJECTIVES.register("focal")
def _focal(gamma: float = 3.0, detach_pt: bool = False) -> Objective:
    loss, params = _primary_focal(gamma, detach_pt)
    return Objective("focal", params, loss)


@OBJECTIVES.register("flsd53")
def _flsd53(detach_pt: bool = False) -> Objective:
    detach_pt = check_bool("detach_pt", detach_pt)
    loss = partial(elementwise.flsd53, detach_pt=detach_pt)
    return Objective("flsd53", {"detach_pt": detach_pt}, loss)


@OBJECTIVES.register("inverse_focal")
def _inverse_focal(gamma: float = 1.0, detach_pt: bool = False) -> Objective:
    gamma, detach_pt = _check_gamma(gamma), check_bool("detach_pt", detach_pt)
    loss = partial(elementwise.inverse_focal, gamma=gamma, detach_pt=detach_pt)
    return Objective("inverse_focal", {"gamma": gamma, "detach_pt": detach_pt}, loss)


@OBJECTIVES.register("l1_logit_norm")
def _l1_logit_norm(alpha: float = 0.01) -> Objective:
    alpha = _check_coefficient("alpha", alpha)
    loss = partial(elementwise.l1_logit_norm, alpha=alpha)
    return Objective("l1_logit_norm", {"alpha": alpha}, loss)


@OBJECTIVES.register("brier")
def _brier() -> Objective:
    return Objective("brier", {}, elementwise.brier)


@OBJECTIVES.register("mse")
def _mse() -> Objective:
    return Objective("mse", {}, elementwise.mse)


@OBJECTIVES.register("mmce")
def _mmce(lam: float = 2.0, width: float = 0.4, estimator: str = "weighted_code") -> Objective:
    """Mukhoti et al.'s baseline: NLL + lam * MMCE."""
    return _nll_plus("mmce", "lam", lam, {"name": "mmce", "width": width, "estimator": estimator})


@OBJECTIVES.register("avuc")
def _avuc(kappa: float = 0.5, beta: float = 1.0) -> Objective:
    return _nll_plus("avuc", "beta", beta, {"name": "avuc", "kappa": kappa})


@OBJECTIVES.register("avuc_gs")
def _avuc_gs(kappa: float = 0.5, beta: float = 1.0) -> Objective:
    return _nll_plus("avuc_gs", "beta", beta, {"name": "avuc_gs", "kappa": kappa})


@OBJECTIVES.register("soft_avuc")
def _soft_avuc(kappa: float = 0.5, temperature: float = 1.0, beta: float = 1.0) -> Objective:
    spec = {"name": "soft_avuc", "kappa": kappa, "temperature": temperature}
    return _nll_plus("soft_avuc", "beta", beta, spec)


@OBJECTIVES.register("sb_ece")
def _sb_ece(
    n_bins: int = 15,
    temperature: float | None = None,
    label_binned: bool = True,
    p: float = 2.0,
    beta: float = 1.0,
) -> Objective:
    spec = {
        "name": "sb_ece",
        "n_bins": n_bins,
        "temperature": temperature,
        "label_binned": label_binned,
        "p": p,
    }
    return _nll_plus("sb_ece", "beta", beta, spec)


# --- beyond the five papers (issue 31) ---------------------------------------------------


@OBJECTIVES.register("dual_focal")
def _dual_focal(gamma: float = 5.0) -> Objective:
    """Tao et al.: ``-(1 - p_t + p_j)^gamma log p_t``; gamma 5 is the authors' value for
    ResNet-50 on CIFAR-10 and CIFAR-100."""
    gamma = _check_gamma(gamma)
    loss = partial(elementwise.dual_focal, gamma=gamma)
    return Objective("dual_focal", {"gamma": gamma}, loss)


@OBJECTIVES.register("mbls")
def _mbls(margin: float = 10.0, lam: float = 0.1) -> Objective:
    """Liu et al.'s margin-based label smoothing: CE + lam * mean_k hinge(distance - m)."""
    margin, lam = check_range("margin", margin, low=0.0), _check_coefficient("lam", lam)
    loss = partial(elementwise.margin_label_smoothing, margin=margin, lam=lam)
    return Objective("mbls", {"margin": margin, "lam": lam}, loss)


@OBJECTIVES.register("logit_norm")
def _logit_norm(temperature: float = 0.04) -> Objective:
    """Wei et al.: CE on ``z / (temperature * ||z||)``."""
    temperature = check_range("temperature", temperature, low=0.0, low_inclusive=False)
    loss = partial(elementwise.logit_norm, temperature=temperature)
    return Objective("logit_norm", {"temperature": temperature}, loss)


@OBJECTIVES.register("mdca")
def _mdca(beta: float = 1.0) -> Objective:
    """Hebbalaguppe et al.'s NLL + beta * MDCA; other primaries through ``composite``."""
    return _nll_plus("mdca", "beta", beta, {"name": "mdca"})


# --- validation-adaptive objectives (issue 31): state updated from the val split ----------
# AdaFocal and CALS live in ``_losses_adaptive`` with their validating factories; the engine
# calls their ``observe_validation`` after every epoch (docs/objectives.md).

OBJECTIVES.register("adafocal")(adaptive.adafocal)
OBJECTIVES.register("cals")(adaptive.cals)
