"""Training hyperparameters: one dataclass, validated eagerly."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from calib_pipeline.calibration.precision import check_precision
from calib_pipeline.registry import check_bool, check_int, check_range

SELECTION_RULES = ("last", "best_val_error", "best_val_nll")
# ``reuse``: a finished training of the run's configuration is reused only when the code it
# depends on is unchanged (``same_code``), or whatever that code (``ignore_code``, recorded
# in the run's provenance); docs/reliability.md, "Reuse and code changes".
REUSE_POLICIES = ("same_code", "ignore_code")
# Settings that decide whether a run trains, not what it learns: no part of a configuration.
SESSION_POLICIES = ("reuse",)


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a training run besides model, objective and data.

    ``milestones`` are epochs after which the learning rate is multiplied by
    ``lr_decay`` (MultiStepLR). ``select`` chooses the weights that are kept:
    the last epoch's or the epoch with the best validation error / NLL.

    ``precision`` (``fp32`` | ``bf16`` autocast), ``channels_last`` (NHWC memory layout of
    conv nets) and ``compile`` (``torch.compile``; CUDA graphs on a GPU) change how fast a
    step runs, not what it computes up to float rounding; docs/performance.md gives their
    measured effects.

    ``reuse`` (one of :data:`REUSE_POLICIES`) says whether a finished training of the same
    configuration is reused after the code it depends on changed; it is a policy of the
    session, not a setting of the run (:meth:`as_dict` leaves it out).
    """

    epochs: int = 30
    batch_size: int = 128
    lr: float = 0.1
    momentum: float = 0.9
    nesterov: bool = False
    weight_decay: float = 5e-4
    milestones: tuple[int, ...] = ()
    lr_decay: float = 0.1
    grad_clip: float | None = None
    augment: str = "none"
    select: str = "last"
    device: str = "auto"
    precision: str = "fp32"
    channels_last: bool = False
    compile: bool = False
    eval_batch_size: int = 1024
    track_test: bool = True
    checkpoint_every: int = 1
    num_threads: int | None = None
    deterministic: bool = False
    reuse: str = "same_code"

    def __post_init__(self) -> None:
        check_int("epochs", self.epochs, low=1)
        check_int("batch_size", self.batch_size, low=1)
        check_int("eval_batch_size", self.eval_batch_size, low=1)
        check_int("checkpoint_every", self.checkpoint_every, low=1)
        if self.num_threads is not None:
            check_int("num_threads", self.num_threads, low=1)
        check_bool("nesterov", self.nesterov)
        check_bool("track_test", self.track_test)
        check_range("lr", self.lr, low=0.0, low_inclusive=False)
        check_range("momentum", self.momentum, low=0.0, high=1.0, high_inclusive=False)
        check_range("weight_decay", self.weight_decay, low=0.0)
        check_range("lr_decay", self.lr_decay, low=0.0, high=1.0, low_inclusive=False)
        if self.grad_clip is not None:
            check_range("grad_clip", self.grad_clip, low=0.0, low_inclusive=False)
        if list(self.milestones) != sorted(set(self.milestones)) or any(
            m < 1 for m in self.milestones
        ):
            raise ValueError(
                f"milestones must be increasing positive epochs, got {self.milestones}"
            )
        late = [m for m in self.milestones if m >= self.epochs]
        if late:  # e.g. training.epochs=200 on an env whose milestones are [150, 250]
            raise ValueError(
                f"milestones {late} would never lower the learning rate: the run has "
                f"{self.epochs} epochs and a milestone m takes effect after epoch m; set "
                "training.milestones together with training.epochs"
            )
        if self.nesterov and self.momentum == 0:
            raise ValueError("nesterov needs momentum > 0 (SGD's Nesterov step is its momentum)")
        if self.augment not in ("none", "crop_flip", "flip"):
            raise ValueError(
                f"augment must be one of 'none', 'crop_flip', 'flip', got {self.augment!r}"
            )
        if self.select not in SELECTION_RULES:
            raise ValueError(f"select must be one of {SELECTION_RULES}, got {self.select!r}")
        if self.device not in ("auto", "cpu") and not self.device.startswith("cuda"):
            raise ValueError(f"device must be 'auto', 'cpu' or 'cuda[:i]', got {self.device!r}")
        check_precision(self.precision)
        check_bool("channels_last", self.channels_last)
        check_bool("compile", self.compile)
        check_bool("deterministic", self.deterministic)
        if self.reuse not in REUSE_POLICIES:
            raise ValueError(
                f"reuse must be one of {', '.join(map(repr, REUSE_POLICIES))}, got "
                f"{self.reuse!r} (ignore_code reuses a finished training whose code changed)"
            )

    @classmethod
    def from_params(cls, params: dict[str, Any]) -> TrainConfig:
        """Build from a parameters dict; unknown keys fail with the list of valid ones."""
        if "amp" in params:
            raise ValueError(
                "training.amp was replaced by training.precision: 'fp32' | 'bf16' (amp ran fp16 "
                "autocast without a GradScaler, whose gradients can underflow); remove amp"
            )
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(params) - known)
        if unknown:
            raise ValueError(f"unknown training parameter(s) {unknown}; valid: {sorted(known)}")
        values = dict(params)
        if "milestones" in values:
            values["milestones"] = tuple(
                check_int("milestones", m, low=1) for m in values["milestones"] or ()
            )
        for name in ("lr", "momentum", "weight_decay", "lr_decay"):
            if name in values:  # "fast" fails naming the parameter, not float()'s bare message
                values[name] = check_range(name, values[name])
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        """The run's settings: every field but the session's policies, and
        ``deterministic`` only when set (run configurations and resume states stored before
        that setting existed keep their fingerprints)."""
        settings = {k: v for k, v in asdict(self).items() if k not in SESSION_POLICIES}
        if not self.deterministic:
            del settings["deterministic"]
        return settings
