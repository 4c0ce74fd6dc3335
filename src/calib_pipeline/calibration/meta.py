"""Meta-regularised calibration: γ-Net, the bi-level step of eq. 2, meta-calibration baselines.

Implements *Towards Unbiased Calibration using Meta-Regularization* (seed paper 004):

* ``GammaNet`` (eq. 3–4) maps penultimate features ``x`` to a per-sample focal γ:
  ``a = xA``, ``p = softmax(a)``, ``x̃ = pAᵀ``, ``γ = |x̃W| / τ``.
* ``MetaLearner.step`` runs one iteration of eq. 2: (a) an update of the backbone θ on a
  train batch with the learner's loss (focal loss with γ from γ-Net, or cross-entropy plus a
  learned regulariser), then (b) an update of the learner's parameters φ by the meta loss on
  a meta-val batch, differentiated through the step just taken (Luketina et al., 2016):
  ``∇_φ M(θ_{t+1})`` with ``∂θ_{t+1}/∂φ = -lr · ∂(∇_θ L(θ_t, φ))/∂φ``.
* Bohdal et al.'s meta-calibration baselines: cross-entropy with a unit-wise L2
  regulariser on the classifier head whose coefficients are meta-learned.

Every choice the paper leaves open is stated, with its reason, in ``docs/focal_meta.md``.
Build learners by name with ``build_meta_learner``; ``meta_learner_names()`` lists them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call
from torch.nn.modules.batchnorm import _BatchNorm

from calib_pipeline.calibration.losses import focal_loss
from calib_pipeline.calibration.metrics import build_metric
from calib_pipeline.calibration.precision import autocast, check_precision, upcast
from calib_pipeline.registry import Registry, check_bool, check_choice, check_int, check_range

UNROLL_MODES = ("last_layer", "full")


class GammaNet(nn.Module):
    """γ-Net (eq. 3–4): a per-sample, strictly non-negative focal γ from backbone features.

    ``a = xA`` (A ∈ R^{d×k}, k attention heads = number of classes), ``p = softmax(a)``,
    ``x̃ = pAᵀ``, ``γ = |x̃W| / τ`` (W ∈ R^d). Because ``x̃W = p (AᵀW)``, γ is the absolute
    value of a convex combination of k head values ``c = AᵀW`` divided by τ: every head
    carries its own γ_j = c_j / τ and the attention weights p mix them per sample.
    """

    def __init__(self, feature_dim: int, num_classes: int, tau: float = 0.01) -> None:
        super().__init__()
        self.tau = tau
        self.attention = nn.Parameter(torch.empty(feature_dim, num_classes))
        self.projection = nn.Parameter(torch.empty(feature_dim))
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """γ = 1 for every input at initialisation, for every ``(d, k)``.

        A ~ N(0, 1/d) except its first row, which is the constant s (the power of two
        nearest d^-1/2), and W = (τ/s)·e₁. Then every head value c_j = (AᵀW)_j = s·τ/s is τ
        exactly (s is a power of two, so no rounding; the other products are 0), hence
        γ = |Σ_j p_j τ|/τ = 1 whatever the attention p. A constant row adds the same x₁·s
        to every attention logit, which the softmax ignores, so the attention stays random
        and sample-dependent through the other d − 1 rows and the heads drift apart once
        trained. (Solving AᵀW = τ·1 for a fully random A has no solution when d < k and is
        ill-conditioned when d ≈ k.)
        """
        d, _ = self.attention.shape
        self.attention.normal_(0.0, d**-0.5)
        scale = 2.0 ** round(-0.5 * math.log2(d))
        self.attention[0] = scale
        self.projection.zero_()
        self.projection[0] = self.tau / scale

    def forward(self, features: Tensor) -> Tensor:
        """Args: features ``(N, d)``. Returns: γ ``(N,)``, ``|softmax(xA) (AᵀW)| / τ``."""
        attention = torch.softmax(features @ self.attention, dim=1)
        # p(AᵀW) equals (pAᵀ)W but costs O(Nk) instead of O(Nkd).
        head_values = self.attention.T @ self.projection
        return (attention @ head_values).abs() / self.tau


class UnitwiseL2(nn.Module):
    """Bohdal et al.'s learnable regulariser: one L2 coefficient per weight of the head.

    ``R(W, b) = Σ λ_W ⊙ W² + Σ λ_b ⊙ b²`` with λ ≥ 0, initialised at 0 (no regularisation).
    """

    def __init__(self, feature_dim: int, num_classes: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(num_classes, feature_dim))
        self.bias = nn.Parameter(torch.zeros(num_classes))

    def forward(self, head_weight: Tensor, head_bias: Tensor) -> Tensor:
        """Returns the 0-d penalty ``Σ λ_W W² + Σ λ_b b²``."""
        return (self.weight * head_weight.square()).sum() + (self.bias * head_bias.square()).sum()

    @torch.no_grad()
    def project(self) -> None:
        """Clamp λ to ≥ 0: a negative coefficient rewards weight growth without bound."""
        for coefficient in self.parameters():
            coefficient.clamp_(min=0.0)


class MetaObjective:
    """The meta loss on a meta-val batch: ``ce_weight · CE + calibration_weight · C``.

    ``C`` is SECE (Gaussian-kernel smooth ECE, eq. 5–7) or DECE (Bohdal et al.), both from
    ``calibration.metrics``; ``calibration=None`` leaves the cross-entropy term only.
    """

    def __init__(
        self,
        calibration: Callable[[Tensor, Tensor], Tensor] | None,
        *,
        ce_weight: float,
        calibration_weight: float,
    ) -> None:
        self.calibration = calibration
        self.ce_weight = ce_weight
        self.calibration_weight = calibration_weight

    def __call__(self, logits: Tensor, targets: Tensor) -> dict[str, Tensor]:
        """Returns ``meta_loss`` and its non-zero terms ``meta_ce`` / ``meta_calibration``."""
        terms: dict[str, Tensor] = {}
        total = logits.new_zeros(())
        if self.ce_weight > 0:
            terms["meta_ce"] = F.cross_entropy(logits, targets)
            total = total + self.ce_weight * terms["meta_ce"]
        if self.calibration is not None and self.calibration_weight > 0:
            terms["meta_calibration"] = self.calibration(logits, targets)
            total = total + self.calibration_weight * terms["meta_calibration"]
        return {"meta_loss": total, **terms}


class _FeaturesAndLogits(nn.Module):
    """Wraps a model so one functional call returns both its features and its logits."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, inputs: Tensor) -> tuple[Tensor, Tensor]:
        features = self.model.forward_features(inputs)
        return features, self.model.head(features)


@contextmanager
def batch_statistics_without_update(model: nn.Module) -> Iterator[None]:
    """Within the block, BatchNorm layers in train mode normalise by the batch statistics
    but leave ``running_mean``/``running_var``/``num_batches_tracked`` untouched.

    Used for the meta-val pass of the look-ahead: it sees the same normalisation as a
    training forward, but meta-val data never leaks into the running statistics, so a
    meta-learning step changes the buffers exactly as a plain training step does.
    """
    layers = [m for m in model.modules() if isinstance(m, _BatchNorm) and m.track_running_stats]
    for layer in layers:
        layer.track_running_stats = False
    try:
        yield
    finally:
        for layer in layers:
            layer.track_running_stats = True


def _learning_rates(optimizer: torch.optim.Optimizer) -> dict[int, float | Tensor]:
    """The current learning rate of every parameter the optimiser updates, by ``id``."""
    return {id(p): group["lr"] for group in optimizer.param_groups for p in group["params"]}


class MetaLearner:
    """A meta-learned regulariser plus its Adam optimiser; subclasses define the train loss.

    The learner owns one iteration of eq. 2 (``step``); the engine owns the model, its
    optimiser and its LR schedule. ``state_dict`` covers the learner's parameters and its
    optimiser state, so a resumed run continues bit-identically.
    """

    def __init__(
        self,
        name: str,
        hyperparameters: dict[str, Any],
        module: nn.Module,
        objective: MetaObjective,
        *,
        meta_lr: float,
        unroll: str,
        max_grad_norm: float | None,
    ) -> None:
        self.name = name
        self.hyperparameters = dict(hyperparameters)
        self.module = module
        self.objective = objective
        self.unroll = unroll
        self.max_grad_norm = max_grad_norm
        self.precision = "fp32"
        # The backbone's forward_features, compiled (training.compile), else None: the model's.
        self.compiled_features: Callable[[Tensor], Tensor] | None = None
        # Fused: the step counter stays on the parameters' device, so an Adam step never
        # reads it back to the host (the unfused step calls .item() on it every step).
        self.meta_optimizer = torch.optim.Adam(module.parameters(), lr=meta_lr, fused=True)

    # -- what subclasses define --------------------------------------------------------------

    def training_loss(
        self, logits: Tensor, targets: Tensor, features: Tensor, head: dict[str, Tensor]
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """The backbone's loss on a train batch, differentiable w.r.t. the learner's
        parameters and the head parameters ``head`` (``weight``, ``bias``) used to compute
        ``logits``; returns it with the statistics to report."""
        raise NotImplementedError

    def gamma(self, features: Tensor) -> Tensor | None:
        """Per-sample focal γ for ``features`` ``(N, d)``; ``None`` for learners without γ."""
        return None

    @property
    def validation_feedback(self) -> None:
        """None: a meta-learner learns from its meta-val batches in ``step``, never from the
        val split (the engine never calls ``observe_validation`` on it)."""
        return

    def _after_meta_update(self) -> None:
        """Hook run after each Adam step on the learner's parameters (e.g. a projection)."""

    # -- the run's options --------------------------------------------------------------------

    def with_training_options(
        self, *, grad_clip: float | None, precision: str, generator: torch.Generator
    ) -> MetaLearner:
        """Follow the run's gradient clipping and precision (the batches are drawn by the
        engine, so ``generator`` is not used here).

        ``training.grad_clip`` clips the backbone gradient like the learner's own
        ``max_grad_norm``; setting both to different values is ambiguous and raises.
        ``precision`` autocasts the forward passes of the backbone step and the meta step.
        """
        if grad_clip is not None:
            if self.max_grad_norm is not None and self.max_grad_norm != grad_clip:
                raise ValueError(
                    f"training.grad_clip ({grad_clip}) and meta learner {self.name!r}'s "
                    f"max_grad_norm ({self.max_grad_norm}) both clip the backbone gradient; "
                    "set only one of them"
                )
            self.max_grad_norm = grad_clip
        self.precision = check_precision(precision)
        return self

    # -- nn.Module-like interface ------------------------------------------------------------

    def parameters(self) -> Iterator[nn.Parameter]:
        return self.module.parameters()

    def to(self, *args: Any, **kwargs: Any) -> MetaLearner:
        """Move (or cast) the parameters and the Adam state, like ``nn.Module.to``."""
        self.module.to(*args, **kwargs)
        # Re-loading its own state makes the optimiser cast its moments to the parameters'
        # new device and dtype (and keeps ``step`` counters where Adam expects them).
        self.meta_optimizer.load_state_dict(self.meta_optimizer.state_dict())
        return self

    def state_dict(self) -> dict[str, Any]:
        """Name, hyperparameters, parameters and Adam state (loadable with weights_only)."""
        return {
            "name": self.name,
            "hyperparameters": dict(self.hyperparameters),
            "module": self.module.state_dict(),
            "meta_optimizer": self.meta_optimizer.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict()``; a state of another learner or configuration raises."""
        if state.get("name") != self.name:
            raise ValueError(f"state is for meta learner {state.get('name')!r}, not {self.name!r}")
        saved = state.get("hyperparameters", {})
        changed = sorted(
            k
            for k in self.hyperparameters.keys() | saved.keys()
            if saved.get(k) != self.hyperparameters.get(k)
        )
        if changed:
            raise ValueError(f"state has different hyperparameters {changed} than {self.name!r}")
        self.module.load_state_dict(state["module"])
        self.meta_optimizer.load_state_dict(state["meta_optimizer"])

    # -- one iteration of eq. 2 --------------------------------------------------------------

    def step(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        inputs: Tensor,
        targets: Tensor,
        meta_inputs: Tensor,
        meta_targets: Tensor,
        *,
        epoch: int = 1,
    ) -> dict[str, Tensor]:
        """(a) Update the backbone on ``(inputs, targets)``, then (b) the learner on
        ``(meta_inputs, meta_targets)`` through a differentiable one-step look-ahead.

        (a) ``θ_{t+1} = optimizer.step(∇_θ L(θ_t, φ_t))`` with the learner's loss L.
        (b) ``φ_{t+1} = Adam(∇_φ M(θ̂))`` where ``θ̂ = θ_{t+1} - lr · (g(φ) - sg[g(φ)])``,
        ``g = ∇_θ L(θ_t, φ)`` over the unrolled parameters (the head for
        ``unroll="last_layer"``, every trainable parameter for ``"full"``) and ``sg`` stops
        gradients: θ̂ has the value θ_{t+1} and the derivative ``∂θ_{t+1}/∂φ`` of an
        SGD(momentum, weight decay) step, so M is evaluated at the parameters actually
        reached and differentiated through the step actually taken. With ``"last_layer"``
        the backbone's own dependence on φ is ignored (Bohdal et al.'s truncation).

        Args:
            model: a ``ClassifierNet`` (``forward_features``, ``head``) in train mode.
            optimizer: the backbone optimiser; its current ``lr`` per group is used.
            inputs, targets: the train batch. meta_inputs, meta_targets: the meta-val batch.

        Returns:
            Detached 0-d tensors: ``loss`` (train loss at θ_t), ``meta_loss`` (meta loss at
            θ_{t+1} with φ_t) and its terms ``meta_ce`` / ``meta_calibration``, plus the
            learner's statistics (``gamma_mean``/``gamma_std`` or ``penalty``/
            ``coefficient_mean``). The meta-gradient stays in ``.grad`` of ``parameters()``.
        """
        named = {name: p for name, p in model.named_parameters() if p.requires_grad}
        learning_rates = _learning_rates(optimizer)
        unrolled = self._unrolled_names(model, named, learning_rates)
        loss, statistics, gradients, clip_scale = self._backbone_step(
            model, optimizer, named, unrolled, inputs, targets
        )
        # (b) Meta update through the look-ahead θ̂ (value θ_{t+1}, derivative via g(φ)).
        lookahead = {
            name: named[name].detach()
            - (learning_rates[id(named[name])] * clip_scale) * (g - g.detach())
            for name, g in gradients.items()
            if g is not None
        }
        meta = self._meta_step(model, lookahead, meta_inputs, meta_targets)
        report = {"loss": loss, **meta, **statistics}
        return {key: value.detach() for key, value in report.items()}

    def _unrolled_names(
        self,
        model: nn.Module,
        named: dict[str, nn.Parameter],
        learning_rates: dict[int, float | Tensor],
    ) -> list[str]:
        """The parameters the look-ahead differentiates through: the head's for
        ``unroll="last_layer"``, every trainable one for ``"full"``; only those the
        optimiser updates."""
        head_names = [f"head.{name}" for name, _ in model.head.named_parameters()]
        unrolled = [
            name
            for name in (named if self.unroll == "full" else head_names)
            if name in named and id(named[name]) in learning_rates
        ]
        if not all(name in unrolled for name in head_names):
            raise ValueError("the model's head must be trainable and updated by the optimizer")
        return unrolled

    def _backbone_step(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        named: dict[str, nn.Parameter],
        unrolled: list[str],
        inputs: Tensor,
        targets: Tensor,
    ) -> tuple[Tensor, dict[str, Tensor], dict[str, Tensor | None], Tensor | float]:
        """(a) of :meth:`step`: one optimiser step of the backbone on the learner's loss.

        Returns:
            The loss at θ_t, the learner's statistics, the gradient g(φ) of every unrolled
            parameter with its graph (``None`` where the loss does not reach it) and the
            gradient-clipping scale that was applied.
        """
        # The unrolled parameters enter as detached copies so the graph of their gradient
        # survives the in-place optimizer step below.
        fast = {name: named[name].detach().clone().requires_grad_(True) for name in unrolled}
        head = {n.removeprefix("head."): t for n, t in fast.items() if n.startswith("head.")}
        with autocast(inputs.device.type, self.precision):
            if self.unroll == "full":
                features, logits = functional_call(
                    _FeaturesAndLogits(model), {f"model.{n}": t for n, t in fast.items()}, (inputs,)
                )
            else:
                features = self._features(model, inputs)
                logits = functional_call(model.head, head, (features,))
        # The losses (and γ-Net on the features) run in fp32 outside autocast.
        loss, statistics = self.training_loss(upcast(logits), targets, upcast(features), head)
        others = [name for name in named if name not in fast]
        # Both calls keep the graph: the meta backward below runs through γ-Net's forward
        # nodes, which the backbone gradient traverses when features are not detached.
        fast_grads = torch.autograd.grad(
            loss, list(fast.values()), create_graph=True, allow_unused=True
        )
        other_grads = (
            torch.autograd.grad(
                loss, [named[n] for n in others], retain_graph=True, allow_unused=True
            )
            if others
            else ()
        )
        optimizer.zero_grad(set_to_none=True)
        for name, grad in zip([*fast, *others], [*fast_grads, *other_grads]):
            if grad is not None:
                named[name].grad = grad.detach()
        clip_scale = self._clip_gradients(named.values())
        optimizer.step()
        return loss, statistics, dict(zip(fast, fast_grads)), clip_scale

    def _meta_step(
        self,
        model: nn.Module,
        lookahead: dict[str, Tensor],
        meta_inputs: Tensor,
        meta_targets: Tensor,
    ) -> dict[str, Tensor]:
        """(b) of :meth:`step`: one Adam step of the learner on the meta loss at the
        look-ahead parameters; returns the meta loss and its terms."""
        with (
            batch_statistics_without_update(model),
            autocast(meta_inputs.device.type, self.precision),
        ):
            if self.unroll == "full":
                meta_logits = functional_call(model, lookahead, (meta_inputs,))
            else:
                with torch.no_grad():
                    meta_features = self._features(model, meta_inputs)
                head_lookahead = {name.removeprefix("head."): t for name, t in lookahead.items()}
                meta_logits = functional_call(model.head, head_lookahead, (meta_features,))
        meta = self.objective(upcast(meta_logits), meta_targets)
        self.meta_optimizer.zero_grad(set_to_none=True)
        meta["meta_loss"].backward(inputs=list(self.module.parameters()))
        self.meta_optimizer.step()
        self._after_meta_update()
        return meta

    def _features(self, model: nn.Module, inputs: Tensor) -> Tensor:
        """The backbone's penultimate features: compiled where ``training.compile`` compiled
        them. Only the last-layer unroll gets here, and it differentiates the backbone to
        first order only (its second-order terms run through the head and the learner), so
        the compiled graph never needs a double backward."""
        forward = self.compiled_features or model.forward_features
        return forward(inputs)

    def _clip_gradients(self, parameters: Iterator[nn.Parameter]) -> Tensor | float:
        """Clip the backbone gradient norm if configured; returns the scale applied."""
        if self.max_grad_norm is None:
            return 1.0
        norm = torch.nn.utils.clip_grad_norm_(list(parameters), self.max_grad_norm)
        # The same factor as clip_grad_norm_, used as a constant in the look-ahead.
        return (self.max_grad_norm / (norm + 1e-6)).clamp(max=1.0)


class FocalGammaLearner(MetaLearner):
    """FL_γ: focal loss whose per-sample γ comes from a meta-learned ``GammaNet``."""

    def __init__(self, *args: Any, detach_features: bool, detach_pt: bool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.detach_features = detach_features
        self.detach_pt = detach_pt

    def training_loss(
        self, logits: Tensor, targets: Tensor, features: Tensor, head: dict[str, Tensor]
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """``mean_i -(1 - p_{i,y_i})^{γ_i} log p_{i,y_i}`` with ``γ = γ-Net(features)``."""
        gamma = self.module(features.detach() if self.detach_features else features)
        loss = focal_loss(logits, targets, gamma, detach_pt=self.detach_pt)
        return loss, {"gamma_mean": gamma.mean(), "gamma_std": gamma.std(correction=0)}

    @torch.no_grad()
    def gamma(self, features: Tensor) -> Tensor:
        return self.module(features)


class UnitwiseL2Learner(MetaLearner):
    """CE + learned unit-wise L2 on the classifier head (Bohdal et al.'s meta-calibration)."""

    def training_loss(
        self, logits: Tensor, targets: Tensor, features: Tensor, head: dict[str, Tensor]
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """``mean_i CE_i + R(W, b) / N``: Bohdal's sum-reduced ``Σ_i CE_i + R`` divided by the
        batch size N, so λ keeps the scale of their code under a mean-reduced loss."""
        penalty = self.module(head["weight"], head["bias"]) / logits.shape[0]
        coefficients = torch.cat([c.flatten() for c in self.module.parameters()])
        loss = F.cross_entropy(logits, targets) + penalty
        return loss, {"penalty": penalty, "coefficient_mean": coefficients.mean()}

    def _after_meta_update(self) -> None:
        self.module.project()


# -- registry ----------------------------------------------------------------------------------

META_LEARNERS: Registry[MetaLearner] = Registry("meta learner")


def build_meta_learner(
    name: str, *, num_classes: int, feature_dim: int, **hyperparameters: Any
) -> MetaLearner:
    """Build a registered meta-learner for a backbone with ``feature_dim`` features and
    ``num_classes`` classes; unknown names or bad hyperparameters raise ``ValueError``.

    Names: ``fl_gamma_sece`` (the paper's FL_γ-SECE), ``fl_gamma_dece``, ``fl_gamma``
    (Table 2's ablation: γ-Net meta-learned on meta-val cross-entropy, no calibration term),
    ``ce_sece``, ``ce_dece`` (Bohdal et al.'s CE + meta-learned unit-wise L2).
    """
    return META_LEARNERS.build(
        name, num_classes=num_classes, feature_dim=feature_dim, **hyperparameters
    )


def meta_learner_names() -> list[str]:
    return META_LEARNERS.names()


def _checked_common(
    *,
    num_classes: Any,
    feature_dim: Any,
    meta_lr: Any,
    unroll: Any,
    max_grad_norm: Any,
    meta_ce_weight: Any,
    meta_loss_weight: Any,
) -> dict[str, Any]:
    """Validate the hyperparameters every learner shares; returns them normalised."""
    check_int("num_classes", num_classes, low=2)
    check_int("feature_dim", feature_dim, low=1)
    checked = {
        "meta_lr": check_range("meta_lr", meta_lr, low=0.0),
        "unroll": check_choice("unroll", unroll, UNROLL_MODES),
        "max_grad_norm": None
        if max_grad_norm is None
        else check_range("max_grad_norm", max_grad_norm, low=0.0, low_inclusive=False),
        "meta_ce_weight": check_range("meta_ce_weight", meta_ce_weight, low=0.0),
        "meta_loss_weight": check_range("meta_loss_weight", meta_loss_weight, low=0.0),
    }
    if checked["meta_ce_weight"] == 0 and checked["meta_loss_weight"] == 0:
        raise ValueError("meta_ce_weight and meta_loss_weight are both 0: the meta loss is empty")
    return checked


def _calibration_term(
    metric: str, **options: Any
) -> tuple[Callable[[Tensor, Tensor], Tensor], dict[str, Any]]:
    """The meta loss's calibration term (``sece`` or ``dece`` with ``options`` checked) and
    its options, recorded among the learner's hyperparameters. The term scores without
    input checks (``Metric.trusted``): a check would wait for the device every step."""
    term = build_metric(metric, **options)
    return term.trusted, term.options


def _focal_gamma_learner(
    name: str,
    calibration: tuple[Callable[[Tensor, Tensor], Tensor], dict[str, Any]] | None,
    *,
    num_classes: int,
    feature_dim: int,
    tau: Any,
    detach_features: Any,
    detach_pt: Any,
    **common: Any,
) -> FocalGammaLearner:
    checked = _checked_common(num_classes=num_classes, feature_dim=feature_dim, **common)
    gamma_options = {
        "tau": check_range("tau", tau, low=0.0, low_inclusive=False),
        "detach_features": check_bool("detach_features", detach_features),
        "detach_pt": check_bool("detach_pt", detach_pt),
    }
    term, settings = calibration if calibration is not None else (None, {})
    objective = MetaObjective(
        term, ce_weight=checked["meta_ce_weight"], calibration_weight=checked["meta_loss_weight"]
    )
    return FocalGammaLearner(
        name,
        {**checked, **gamma_options, **settings},
        GammaNet(feature_dim, num_classes, gamma_options["tau"]),
        objective,
        meta_lr=checked["meta_lr"],
        unroll=checked["unroll"],
        max_grad_norm=checked["max_grad_norm"],
        detach_features=gamma_options["detach_features"],
        detach_pt=gamma_options["detach_pt"],
    )


def _unitwise_l2_learner(
    name: str,
    calibration: tuple[Callable[[Tensor, Tensor], Tensor], dict[str, Any]],
    *,
    num_classes: int,
    feature_dim: int,
    **common: Any,
) -> UnitwiseL2Learner:
    checked = _checked_common(num_classes=num_classes, feature_dim=feature_dim, **common)
    term, settings = calibration
    objective = MetaObjective(
        term, ce_weight=checked["meta_ce_weight"], calibration_weight=checked["meta_loss_weight"]
    )
    return UnitwiseL2Learner(
        name,
        {**checked, **settings},
        UnitwiseL2(feature_dim, num_classes),
        objective,
        meta_lr=checked["meta_lr"],
        unroll=checked["unroll"],
        max_grad_norm=checked["max_grad_norm"],
    )


@META_LEARNERS.register("fl_gamma_sece")
def fl_gamma_sece(
    *,
    num_classes: int,
    feature_dim: int,
    bandwidth: float = 0.01,
    tau_a: float = 100.0,
    meta_loss_weight: float = 1.0,
    meta_ce_weight: float = 0.0,
    meta_lr: float = 1e-3,
    tau: float = 0.01,
    unroll: str = "last_layer",
    detach_features: bool = True,
    detach_pt: bool = False,
    max_grad_norm: float | None = None,
) -> FocalGammaLearner:
    """FL_γ-SECE, the paper's method: γ-Net meta-learned on meta-val SECE alone (eq. 2)."""
    return _focal_gamma_learner(
        "fl_gamma_sece", _calibration_term("sece", bandwidth=bandwidth, tau_a=tau_a),
        num_classes=num_classes, feature_dim=feature_dim, tau=tau,
        detach_features=detach_features, detach_pt=detach_pt, meta_lr=meta_lr, unroll=unroll,
        max_grad_norm=max_grad_norm, meta_ce_weight=meta_ce_weight,
        meta_loss_weight=meta_loss_weight,
    )  # fmt: skip


@META_LEARNERS.register("fl_gamma_dece")
def fl_gamma_dece(
    *,
    num_classes: int,
    feature_dim: int,
    n_bins: int = 15,
    tau_a: float = 100.0,
    tau_b: float = 0.01,
    meta_loss_weight: float = 1.0,
    meta_ce_weight: float = 0.0,
    meta_lr: float = 1e-3,
    tau: float = 0.01,
    unroll: str = "last_layer",
    detach_features: bool = True,
    detach_pt: bool = False,
    max_grad_norm: float | None = None,
) -> FocalGammaLearner:
    """FL_γ-DECE: γ-Net meta-learned on meta-val DECE (Bohdal et al.'s surrogate) alone."""
    return _focal_gamma_learner(
        "fl_gamma_dece", _calibration_term("dece", n_bins=n_bins, tau_a=tau_a, tau_b=tau_b),
        num_classes=num_classes, feature_dim=feature_dim, tau=tau,
        detach_features=detach_features, detach_pt=detach_pt, meta_lr=meta_lr, unroll=unroll,
        max_grad_norm=max_grad_norm, meta_ce_weight=meta_ce_weight,
        meta_loss_weight=meta_loss_weight,
    )  # fmt: skip


@META_LEARNERS.register("fl_gamma")
def fl_gamma(
    *,
    num_classes: int,
    feature_dim: int,
    meta_ce_weight: float = 1.0,
    meta_lr: float = 1e-3,
    tau: float = 0.01,
    unroll: str = "last_layer",
    detach_features: bool = True,
    detach_pt: bool = False,
    max_grad_norm: float | None = None,
) -> FocalGammaLearner:
    """FL_γ (Table 2's ablation): the same γ-Net and loop with the calibration term removed
    from the meta loss, i.e. γ-Net meta-learned on meta-val cross-entropy only."""
    return _focal_gamma_learner(
        "fl_gamma", None, num_classes=num_classes, feature_dim=feature_dim, tau=tau,
        detach_features=detach_features, detach_pt=detach_pt, meta_lr=meta_lr, unroll=unroll,
        max_grad_norm=max_grad_norm, meta_ce_weight=meta_ce_weight, meta_loss_weight=0.0,
    )  # fmt: skip


@META_LEARNERS.register("ce_sece")
def ce_sece(
    *,
    num_classes: int,
    feature_dim: int,
    bandwidth: float = 0.01,
    tau_a: float = 100.0,
    meta_loss_weight: float = 0.5,
    meta_ce_weight: float = 1.0,
    meta_lr: float = 1e-3,
    unroll: str = "last_layer",
    max_grad_norm: float | None = None,
) -> UnitwiseL2Learner:
    """CE-SECE: CE + meta-learned unit-wise L2, meta loss CE + 0.5·SECE."""
    return _unitwise_l2_learner(
        "ce_sece", _calibration_term("sece", bandwidth=bandwidth, tau_a=tau_a),
        num_classes=num_classes, feature_dim=feature_dim, meta_lr=meta_lr, unroll=unroll,
        max_grad_norm=max_grad_norm,
        meta_ce_weight=meta_ce_weight, meta_loss_weight=meta_loss_weight,
    )  # fmt: skip


@META_LEARNERS.register("ce_dece")
def ce_dece(
    *,
    num_classes: int,
    feature_dim: int,
    n_bins: int = 15,
    tau_a: float = 100.0,
    tau_b: float = 0.01,
    meta_loss_weight: float = 0.5,
    meta_ce_weight: float = 1.0,
    meta_lr: float = 1e-3,
    unroll: str = "last_layer",
    max_grad_norm: float | None = None,
) -> UnitwiseL2Learner:
    """CE-DECE, Bohdal et al.'s meta-calibration: CE + meta-learned unit-wise L2, meta loss
    CE + 0.5·DECE (M = 15 bins, τ_a = 100, τ_b = 0.01)."""
    return _unitwise_l2_learner(
        "ce_dece", _calibration_term("dece", n_bins=n_bins, tau_a=tau_a, tau_b=tau_b),
        num_classes=num_classes, feature_dim=feature_dim, meta_lr=meta_lr, unroll=unroll,
        max_grad_norm=max_grad_norm, meta_ce_weight=meta_ce_weight,
        meta_loss_weight=meta_loss_weight,
    )  # fmt: skip
