"""Training methods: what a method is (``MethodSpec``) and the one factory that builds it.

A method trains the backbone either with a plain objective (``calibration.losses``) or with
a meta-learner (``calibration.meta``). ``build_method`` turns either kind into a *learner*
with the meta-learners' step protocol (``Learner``), so the training engine runs every
method through one loop: ``learner.step(model, optimizer, inputs, targets, meta_inputs,
meta_targets, epoch=epoch)`` per batch. A plain objective is wrapped in ``ObjectiveLearner``, whose
step is the ordinary forward / loss / backward / optimiser step.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from calib_pipeline.calibration.losses import build_objective
from calib_pipeline.calibration.meta import build_meta_learner
from calib_pipeline.calibration.precision import autocast, check_precision, upcast

# ``check_method`` builds with these to validate names and hyperparameters cheaply.
_CHECK_NUM_CLASSES = 2
_CHECK_FEATURE_DIM = 4


@dataclass(frozen=True)
class MethodSpec:
    """One method of ``parameters_methods.yml``, parsed.

    Attributes:
        key: the method's name (Kedro namespace and catalog prefix).
        objective: registry name of a plain objective, or None for a meta-learner.
        meta_learner: registry name of a meta-learner, or None for a plain objective.
        params: the objective's or meta-learner's hyperparameters.
        label: display name in tables and figures (the key when left empty).
        split: the index split it trains on.
        training: ``TrainConfig`` fields that override the study's training parameters.
        model: model settings that override the study's model, or None.
        group: the sweep it belongs to (the key when left empty).
        record_epoch_logits: keep val/test logits of every epoch.
    """

    key: str
    objective: str | None = None
    meta_learner: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    label: str = ""
    split: str = "standard"
    training: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] | None = None
    group: str = ""
    record_epoch_logits: bool = False

    def __post_init__(self) -> None:
        if (self.objective is None) == (self.meta_learner is None):
            raise ValueError(
                f"method {self.key!r} needs exactly one of 'objective' or 'meta_learner'"
            )
        # Frozen: the defaults that depend on the key are filled in through object.__setattr__.
        if not self.label:
            object.__setattr__(self, "label", self.key)
        if not self.group:
            object.__setattr__(self, "group", self.key)


class Learner(Protocol):
    """The step protocol the training engine runs every method through.

    ``step`` updates the backbone on one train batch (and, for a meta-learner, its own
    parameters on one meta-val batch; plain objectives receive None there); ``epoch`` is the
    1-based epoch the batch belongs to (a plain objective receives it as context). It returns
    detached 0-d tensors: ``loss`` (the train-batch loss), optionally ``logits`` (the
    train-batch logits, for the training accuracy) and any statistics to average per epoch.
    ``state_dict`` is empty for a learner without trainable or adapted state.
    ``validation_feedback`` declares whether the learner reads the val split during
    training: None, or a sentence naming what it adapts there (the run's provenance records
    it); only then does the engine call ``observe_validation`` after every epoch with the
    val split's logits and labels (never another split's), and the learner returns 0-d
    statistics for the epoch's history row. (A meta-learner reads its own meta-val split,
    batch by batch, in ``step``.)
    ``with_training_options`` binds the run's gradient clipping, precision and generator
    (or raises where the learner cannot follow them), so every option means the same on
    every path.
    """

    def step(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        inputs: Tensor,
        targets: Tensor,
        meta_inputs: Tensor | None,
        meta_targets: Tensor | None,
        *,
        epoch: int = 1,
    ) -> dict[str, Tensor]: ...
    def with_training_options(
        self, *, grad_clip: float | None, precision: str, generator: torch.Generator
    ) -> Learner: ...
    def gamma(self, features: Tensor) -> Tensor | None: ...
    @property
    def validation_feedback(self) -> str | None: ...
    def observe_validation(
        self, logits: Tensor, labels: Tensor, *, epoch: int
    ) -> dict[str, Tensor]: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> Any: ...
    def to(self, device: torch.device) -> Any: ...


@dataclass
class ObjectiveLearner:
    """A plain objective behind the learner step protocol: one backbone update per batch.

    Attributes:
        objective: ``objective(logits, targets, **context) -> loss``, called with the context
            ``model`` and ``epoch``, plus ``features`` (the backbone's penultimate features
            of the batch, from ``model.forward_features``) when the objective's
            ``uses_features`` is true; one with ``mix_batch`` (mixup) mixes each batch
            through it before the forward pass.
        generator: the randomness of ``mix_batch``; the engine passes the run's generator
            (on the training device) so that batches, augmentation and mixing come from one
            checkpointed stream.
        grad_clip: clip the gradient norm to this value before the optimiser step.
        precision: ``fp32`` or ``bf16`` (autocast of the forward pass; the loss is fp32).

    An objective with a ``validation_feedback`` sentence (AdaFocal, CALS) adapts its state
    on the val split: the learner passes ``observe_validation`` on to it and its state is the
    learner's ``state_dict``.
    """

    objective: Any
    generator: torch.Generator = field(default_factory=torch.Generator)
    grad_clip: float | None = None
    precision: str = "fp32"
    forward: Any = None  # the compiled model's forward (training.compile), else the model

    def step(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        inputs: Tensor,
        targets: Tensor,
        meta_inputs: Tensor | None = None,
        meta_targets: Tensor | None = None,
        *,
        epoch: int = 1,
    ) -> dict[str, Tensor]:
        """Forward, loss, backward, optional gradient clipping, optimiser step.

        Args:
            model: the backbone, in train mode.
            optimizer: its optimiser.
            inputs, targets: the train batch (class indices; mixup mixes them).
            meta_inputs, meta_targets: unused; a plain objective learns from the train batch only.
            epoch: the 1-based epoch, passed on to the objective as context.

        Returns:
            The detached batch ``loss`` and, unless the objective mixes the batch, the
            batch ``logits`` (the engine scores them against ``targets`` for the train
            accuracy and the learned epochs; mixup's logits are of mixed inputs, which
            have no single label, so it reports none).
        """
        mixes = hasattr(self.objective, "mix_batch")
        if mixes:
            inputs, targets = self.objective.mix_batch(
                inputs, targets, self.generator, num_classes=getattr(model, "num_classes", None)
            )
        context: dict[str, Any] = {"model": model, "epoch": epoch}
        with autocast(inputs.device.type, self.precision):
            if getattr(self.objective, "uses_features", False):
                features = model.forward_features(inputs)
                logits = model.head(features)
                context["features"] = upcast(features)
            else:
                logits = (model if self.forward is None else self.forward)(inputs)
        loss = self.objective(upcast(logits), targets, **context)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.grad_clip:
            nn.utils.clip_grad_norm_(model.parameters(), self.grad_clip)
        optimizer.step()
        if mixes:
            return {"loss": loss.detach()}
        return {"loss": loss.detach(), "logits": logits.detach()}

    def with_training_options(
        self, *, grad_clip: float | None, precision: str, generator: torch.Generator
    ) -> ObjectiveLearner:
        """A copy that clips, autocasts and mixes as the run's training options say."""
        return replace(
            self, grad_clip=grad_clip, precision=check_precision(precision), generator=generator
        )

    def gamma(self, features: Tensor) -> None:
        """A plain objective learns no per-sample focal γ."""
        return

    @property
    def validation_feedback(self) -> str | None:
        """What the objective adapts on the val split during training, or None."""
        return getattr(self.objective, "validation_feedback", None)

    def observe_validation(
        self, logits: Tensor, labels: Tensor, *, epoch: int
    ) -> dict[str, Tensor]:
        """The objective's update from the val split after ``epoch``; its statistics.

        Raises:
            ValueError: the objective does not read the val split.
        """
        if self.validation_feedback is None:
            raise ValueError(f"objective {self.objective!r} does not read the val split")
        return self.objective.observe_validation(logits, labels, epoch=epoch)

    def state_dict(self) -> dict[str, Any]:
        """The state a validation-adaptive objective adapted; empty for any other."""
        return {} if self.validation_feedback is None else self.objective.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict()``; a plain objective accepts only the empty state."""
        if self.validation_feedback is not None:
            self.objective.load_state_dict(state)
        elif state:
            raise ValueError(f"a plain objective has no state to load, got keys {sorted(state)}")

    def to(self, device: torch.device) -> ObjectiveLearner:
        """Nothing to move: an adaptive objective moves its state to the logits' device."""
        return self


def build_method(spec: MethodSpec, num_classes: int, feature_dim: int) -> Learner:
    """The learner of ``spec`` for a backbone with ``feature_dim`` features.

    Args:
        spec: the method (an objective or a meta-learner, with hyperparameters).
        num_classes: number of classes of the backbone's head.
        feature_dim: width of the backbone's penultimate features (meta-learners use it).

    Returns:
        An ``ObjectiveLearner`` wrapping the built objective, or the built meta-learner.

    Raises:
        ValueError: an unknown objective / meta-learner name (listing the valid ones) or a
            bad hyperparameter.
    """
    if spec.objective is not None:
        return ObjectiveLearner(build_objective(spec.objective, **spec.params))
    return build_meta_learner(
        spec.meta_learner, num_classes=num_classes, feature_dim=feature_dim, **spec.params
    )


def check_method(spec: MethodSpec, training: Any = None) -> None:
    """Build ``spec`` for a tiny backbone so that a bad name or hyperparameter fails now;
    with ``training`` (a ``TrainConfig``), also bind its options to the learner.

    Raises:
        ValueError: as ``build_method`` or ``with_training_options``, prefixed with the
            method's key.
    """
    try:
        learner = build_method(spec, num_classes=_CHECK_NUM_CLASSES, feature_dim=_CHECK_FEATURE_DIM)
        if training is not None:
            learner.with_training_options(
                grad_clip=training.grad_clip,
                precision=training.precision,
                generator=torch.Generator(),
            )
    except ValueError as error:
        raise ValueError(f"method {spec.key!r}: {error}") from None
