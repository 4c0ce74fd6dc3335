"""The training engine: ``train_model`` trains a model and records its history.

It reads top to bottom: set up (device, seeds, optimiser, schedule, device-resident
batches), maybe resume, then per epoch train (one learner step per shuffled batch),
evaluate on val (and test) through the metrics module, keep the selected weights and
checkpoint. Every method -- a plain objective or a meta-learner -- is a learner with one
step protocol (``calibration.methods.Learner``), so the loop has a single path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from calib_pipeline.calibration import metrics
from calib_pipeline.calibration.meta import MetaLearner
from calib_pipeline.calibration.methods import Learner, ObjectiveLearner
from calib_pipeline.calibration.precision import check_device_precision
from calib_pipeline.tensor_io import fingerprint as checkpoint_fingerprint
from calib_pipeline.training import accelerate
from calib_pipeline.training.checkpoint import CheckpointStore
from calib_pipeline.training.config import TrainConfig
from calib_pipeline.training.data import (
    BatchStream,
    EndlessBatches,
    Normalizer,
    apply_augmentation,
    draw_augmentation,
)

logger = logging.getLogger(__name__)

# Layout of the resume state; a state of another layout is discarded like one of another
# configuration (it cannot be continued by this engine).
RESUME_STATE_LAYOUT = 5  # 5: crops pad black pixels (4: reflected normalised ones)
# learned_epoch of a run whose steps never scored the clean train batch (meta-learners, mixup)
NOT_TRACKED = -1

# ``config.select`` -> the score of an epoch's history row; the lowest score is kept, the
# earliest epoch on ties.
SELECTION_SCORES = {
    "last": lambda row: -row["epoch"],
    "best_val_error": lambda row: 1.0 - row["val_accuracy"],
    "best_val_nll": lambda row: row["val_nll"],
}


class NoFinishedState(LookupError):
    """``train_model(..., reuse_only=True)`` found no finished state of its settings."""


@dataclass
class Split:
    """Images (stored dtype) and labels of one split."""

    images: torch.Tensor
    labels: torch.Tensor


@dataclass
class TrainResult:
    """What a training run returns (see ``train_model``).

    ``learned_epoch`` holds, per training sample, the epoch from which it stays correctly
    classified (Wang et al. §5.1; 0 if never learned), or ``NOT_TRACKED`` for every sample
    when the learner's steps report no logits of the train batch (meta-learners, mixup): then
    neither learned epochs nor ``train_accuracy`` (NaN in the history) are known.
    """

    state_dict: dict[str, torch.Tensor]
    selected_epoch: int
    history: list[dict[str, float]]
    learned_epoch: torch.Tensor
    epoch_logits: dict[str, list[torch.Tensor]] = field(default_factory=dict)
    meta_state: dict[str, Any] | None = None
    # The epoch a stored state had reached when this call found it: 0 for a fresh training,
    # ``config.epochs`` for a finished one reused without training.
    resumed_after_epoch: int = 0
    # Where this call trained (``str`` of the resolved torch device), and its training
    # throughput: train images per second of epoch wall time (steps and the epoch's
    # evaluation), over the epochs this call trained; None when it trained none (reused).
    device: str = "cpu"
    images_per_second: float | None = None


@dataclass
class Selected:
    """The weights kept under ``config.select``: their score, epoch and weights (on the
    training device; the checkpoint and the result hold CPU copies)."""

    score: float = float("inf")
    epoch: int = 0
    state_dict: dict[str, torch.Tensor] | None = None


@dataclass
class _Run:
    """One run: its model, learner, optimisation, device-resident data and the state it
    carries from epoch to epoch (what ``_save_state`` checkpoints)."""

    model: nn.Module
    learner: Learner
    config: TrainConfig
    device: torch.device
    normalizer: Normalizer
    generator: torch.Generator
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.MultiStepLR
    batches: BatchStream
    meta_batches: EndlessBatches | None  # None for a plain objective
    val: Split
    test: Split | None
    record_epoch_logits: bool
    description: str
    # The compiled forward is inside the learner; this says whether steps replay CUDA graphs.
    uses_graphs: bool
    # Per train sample, the last epoch in which it was misclassified (-1: never).
    last_wrong: torch.Tensor
    history: list[dict[str, float]] = field(default_factory=list)
    epoch_logits: dict[str, list[torch.Tensor]] = field(
        default_factory=lambda: {"val": [], "test": []}
    )
    selected: Selected = field(default_factory=Selected)
    start_epoch: int = 1


def train_model(
    model: nn.Module,
    learner: Learner,
    train: Split,
    val: Split,
    config: TrainConfig,
    *,
    normalization: tuple[tuple[float, ...], tuple[float, ...]],
    seed: int,
    test: Split | None = None,
    meta_val: Split | None = None,
    store: CheckpointStore | None = None,
    fingerprint: str = "",
    record_epoch_logits: bool = False,
    description: str = "",
    stop_after_epoch: int | None = None,
    reuse_only: bool = False,
) -> TrainResult:
    """Train ``model`` with ``learner`` under ``config``.

    Args:
        model: a ``ClassifierNet`` (``forward_features`` + ``head``).
        learner: the method (``calibration.methods.build_method``): an ``ObjectiveLearner``
            (one backbone update per batch) or a meta-learner (backbone and meta update per
            batch); both follow ``config.grad_clip`` and ``config.precision``.
        train, val, test, meta_val: the splits; ``meta_val`` is required with a meta-learner.
            A learner that declares ``validation_feedback`` (AdaFocal, CALS) also adapts on
            ``val`` after every epoch (``_validation_feedback``); ``test`` never trains.
        config: the hyperparameters; ``num_threads`` holds for this run only (torch's
            setting is restored afterwards).
        normalization: per-channel (mean, std).
        seed: seeds initialisation-independent randomness (batches, augmentation, mixing).
        store: where the resumable state goes (the run holds its lock); a state of the same
            settings is resumed (a completed one reused without training), one of other
            settings discarded with a warning. The settings are ``fingerprint`` with the
            engine's own hash of what it is handed (``_state_fingerprint``).
        fingerprint: the caller's hash of what the engine cannot see (split, code).
        record_epoch_logits: keep val/test logits of every epoch (for per-epoch analyses).
        description: progress-bar label (method and seed).
        stop_after_epoch: stop (as if interrupted) after this epoch -- for tests of resume.
        reuse_only: only reuse a finished state (else :class:`NoFinishedState`, nothing written).

    Returns:
        The selected weights (on CPU), the per-epoch history, the learned epoch of every
        training sample and the learner's state (a meta-learner's parameters, what a
        validation-adaptive objective adapted; None for any other objective): a
        :class:`TrainResult`.
    """
    splits = {"train": train, "val": val, "test": test, "meta_val": meta_val}
    if store is not None:
        fingerprint = _state_fingerprint(
            fingerprint, model, learner, config, splits, seed, normalization, record_epoch_logits
        )
    with _settings_of_this_run(config):
        run = _setup(
            model, learner, config, splits, normalization, seed, record_epoch_logits, description
        )
        return _train_stored(run, store, fingerprint, stop_after_epoch, reuse_only)


@contextlib.contextmanager
def _settings_of_this_run(config: TrainConfig) -> Iterator[None]:
    """``config.num_threads`` and ``config.deterministic`` for the run only: torch's settings
    are process-wide, and a later run (the next node, a reused Dask worker, a notebook cell)
    must not inherit them."""
    threads = torch.get_num_threads()
    deterministic = torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark
    try:
        if config.deterministic:
            _use_deterministic_algorithms()
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic[0])
        torch.backends.cudnn.benchmark = deterministic[1]


def _use_deterministic_algorithms() -> None:
    """Deterministic kernels only (cuDNN's and cuBLAS's included), so two runs on the same
    card give the same weights; an operation without a deterministic kernel fails, naming
    itself. cuBLAS needs its workspace size fixed before its first call (CUDA's rule)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False


def _train_stored(
    run: _Run,
    store: CheckpointStore | None,
    fingerprint: str,
    stop_after_epoch: int | None,
    reuse_only: bool = False,
) -> TrainResult:
    """Train ``run``: without a store from its first epoch, else under the store's lock from
    where the store's state of ``fingerprint`` ended (``reuse_only``: only a finished one)."""
    if store is None:
        _train_epochs(run, None, fingerprint, stop_after_epoch)
        return _result(run)
    with store.lock(run.description):  # one process per run folder; another waits, told by whom
        _resume(run, store, fingerprint)
        if reuse_only and run.start_epoch <= run.config.epochs:
            raise NoFinishedState(f"{store.directory} holds no finished state of these settings")
        _train_epochs(run, store, fingerprint, stop_after_epoch)
    return _result(run)


def learner_identity(learner: Learner) -> list[Any]:
    """What distinguishes one method from another: the learner's type, its method's name (an
    objective's registry name, a meta-learner's, else the callable's qualified name) and its
    effective hyperparameters."""
    method = _method_of(learner)
    name = getattr(method, "name", None) or (
        f"{getattr(method, '__module__', '')}."
        f"{getattr(method, '__qualname__', type(method).__qualname__)}"
    )
    code = getattr(method, "__code__", None)  # a plain function: two lambdas share a name
    if code is not None:
        name += ":" + hashlib.sha256(code.co_code + repr(code.co_consts).encode()).hexdigest()[:12]
    return [type(learner).__name__, name, method_hyperparameters(learner)]


def method_hyperparameters(learner: Learner) -> dict[str, Any]:
    """The effective hyperparameters (defaults filled in) of the learner's method: its
    objective's for a plain objective, the meta-learner's own otherwise; empty if none."""
    return dict(getattr(_method_of(learner), "hyperparameters", None) or {})


def _method_of(learner: Learner) -> Any:
    """The object that defines the method: a plain objective's objective, else the
    meta-learner itself (whose own ``objective`` is an internal loss without a name)."""
    return learner.objective if isinstance(learner, ObjectiveLearner) else learner


def _state_fingerprint(
    caller: str,
    model: nn.Module,
    learner: Learner,
    config: TrainConfig,
    splits: dict[str, Split | None],
    seed: int,
    normalization: tuple[tuple[float, ...], tuple[float, ...]],
    record_epoch_logits: bool,
) -> str:
    """What a resumable state belongs to: the caller's fingerprint (the pipelines' hashes
    the run configuration, split and code) and everything the engine itself is handed --
    the config, seed, normalisation, split sizes, the learner's name and hyperparameters
    and the model's initial weights (which carry its architecture and initialisation seed).

    So a library caller who passes no fingerprint, or one that misses a setting, still never
    resumes (or reuses as finished) a state trained under other settings: a changed
    learning rate, objective, epoch count or initialisation starts afresh, with the
    warning of ``_resume``.
    """
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(str((tuple(tensor.shape), tensor.dtype)).encode())
        digest.update(
            tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes()
        )
    return checkpoint_fingerprint(
        {
            "caller": caller,
            "config": config.as_dict(),  # deterministic only when set: old states stay valid
            "seed": seed,
            "normalization": normalization,
            "sizes": {k: None if v is None else len(v.labels) for k, v in splits.items()},
            "learner": learner_identity(learner),
            "model": [type(model).__name__, digest.hexdigest()],
            "record_epoch_logits": record_epoch_logits,
        }
    )


def _train_epochs(
    run: _Run, store: CheckpointStore | None, fingerprint: str, stop_after_epoch: int | None
) -> None:
    """Epochs ``run.start_epoch`` .. ``config.epochs``: train, evaluate, select, checkpoint."""
    config = run.config
    progress = tqdm(
        range(run.start_epoch, config.epochs + 1),
        desc=run.description or "training",
        initial=run.start_epoch - 1,
        total=config.epochs,
        leave=False,
        dynamic_ncols=True,
        disable=None,  # a bar on a terminal only: none in CI logs, `| tee` or files
    )
    for epoch in progress:
        started = time.perf_counter()
        trained = _train_epoch(run, epoch)
        run.scheduler.step()
        row = _evaluate_epoch(run, epoch, trained)
        row["seconds"] = time.perf_counter() - started
        run.history.append(row)
        progress.set_postfix(loss=f"{row['train_loss']:.3f}", val_acc=f"{row['val_accuracy']:.3f}")
        run.selected = _select(run.selected, SELECTION_SCORES[config.select](row), epoch, run.model)
        if store is not None:
            if run.record_epoch_logits:  # written once per epoch, never inside the growing state
                store.save_epoch_logits(epoch, {k: v[-1] for k, v in run.epoch_logits.items() if v})
            if epoch % config.checkpoint_every == 0 or epoch == config.epochs:
                _save_state(run, store, fingerprint, epoch)
        if stop_after_epoch is not None and epoch >= stop_after_epoch:
            break
    progress.close()


def _setup(
    model: nn.Module,
    learner: Learner,
    config: TrainConfig,
    splits: dict[str, Split | None],
    normalization: tuple[tuple[float, ...], tuple[float, ...]],
    seed: int,
    record_epoch_logits: bool,
    description: str,
) -> _Run:
    """Device, generator, learner, SGD with its MultiStepLR schedule and the batch streams
    (``splits``: ``train``, ``val``, ``test`` and ``meta_val``, the last two may be None).

    Everything random draws from the one ``generator`` on the training device (train
    batches here, meta-val batches and mixing in ``_prepare_learner``, augmentation in
    ``_train_epoch``), whose state is checkpointed: a resumed run draws what the
    uninterrupted run would have, and no step waits for a random number from the host.
    """
    if config.num_threads:
        torch.set_num_threads(config.num_threads)
    device = resolve_device(config.device)
    check_device_precision(device, config.precision)
    accelerate.use_channels_last(model.to(device), config.channels_last)
    normalizer = Normalizer(*normalization, device=device, channels_last=config.channels_last)
    generator = torch.Generator(device=device).manual_seed(seed)
    learner, meta_batches = _prepare_learner(learner, splits["meta_val"], config, device, generator)
    forward = (
        accelerate.compiled_forward(model, learner, device, description) if config.compile else None
    )
    if forward is not None and isinstance(learner, MetaLearner):
        learner.compiled_features = forward
    elif forward is not None:
        learner = dataclasses.replace(learner, forward=forward)
    optimizer = _optimizer(model, config, device)
    train, val, test = splits["train"], splits["val"], splits["test"]
    batches = BatchStream(
        train.images.to(device), train.labels.to(device), config.batch_size, generator
    )
    return _Run(
        model=model,
        learner=learner,
        config=config,
        device=device,
        normalizer=normalizer,
        generator=generator,
        optimizer=optimizer,
        scheduler=torch.optim.lr_scheduler.MultiStepLR(
            optimizer, milestones=list(config.milestones), gamma=config.lr_decay
        ),
        batches=batches,
        meta_batches=meta_batches,
        val=Split(val.images, val.labels.to(device)),
        test=Split(test.images, test.labels.to(device)) if test is not None else None,
        record_epoch_logits=record_epoch_logits,
        description=description,
        uses_graphs=forward is not None and device.type == "cuda",
        last_wrong=torch.full((len(train.labels),), -1, dtype=torch.long, device=device),
    )


def _optimizer(model: nn.Module, config: TrainConfig, device: torch.device) -> torch.optim.SGD:
    """SGD with the config's learning rate, momentum and weight decay."""
    return torch.optim.SGD(
        model.parameters(),
        lr=config.lr,
        momentum=config.momentum,
        nesterov=config.nesterov,
        weight_decay=config.weight_decay,
        # One kernel per step on a GPU instead of a few per parameter group.
        fused=device.type == "cuda",
    )


def _prepare_learner(
    learner: Learner,
    meta_val: Split | None,
    config: TrainConfig,
    device: torch.device,
    generator: torch.Generator,
) -> tuple[Learner, EndlessBatches | None]:
    """The learner bound to this run's options and the meta-val batches its steps take.

    Every learner follows the run's gradient clipping and precision (a meta-learner whose
    own ``max_grad_norm`` contradicts ``grad_clip`` raises). A plain objective mixes batches
    with the run's generator and takes no meta-val batch; a meta-learner takes one meta-val
    batch per step, drawn from the generator.
    """
    learner = learner.with_training_options(
        grad_clip=config.grad_clip, precision=config.precision, generator=generator
    )
    if isinstance(learner, ObjectiveLearner):
        return learner, None
    if meta_val is None:
        raise ValueError("a meta-learner needs a meta_val split")
    learner.to(device)
    stream = BatchStream(
        meta_val.images.to(device), meta_val.labels.to(device), config.batch_size, generator
    )
    return learner, EndlessBatches(stream)


def _resume(run: _Run, store: CheckpointStore, fingerprint: str) -> None:
    """Continue from the state in ``store`` if this configuration and engine wrote it.

    A completed state (kept until the next run replaces it) is reused as it is: the run
    returns its result without training again -- a rerun after an interruption skips the
    runs that had finished.
    """
    state = store.load()
    if state is None:
        return
    if state.get("fingerprint") != fingerprint or state.get("layout") != RESUME_STATE_LAYOUT:
        logger.warning(
            "discarding checkpoint in %s: it belongs to another configuration or engine version",
            store,
        )
        return
    run.learner.load_state_dict(state["learner"])
    run.history = state["history"]
    run.last_wrong = state["last_wrong"].to(run.device)
    run.selected = Selected(**state["selected"])
    run.start_epoch = state["epoch"] + 1
    if run.record_epoch_logits:
        run.epoch_logits = store.load_epoch_logits(state["epoch"])
    if state["complete"]:
        logger.info(
            "%s: already trained for this configuration (%s); reusing it -- delete that folder "
            "to train again",
            run.description,
            store.directory,
        )
        return
    saved_threads, threads = state.get("threads"), torch.get_num_threads()
    if run.device.type == "cpu" and saved_threads not in (None, threads):
        logger.warning(
            "%s: resuming with %d CPU threads a state trained with %d: CPU sums depend on the "
            "thread count, so the result will not be bit-identical to an uninterrupted run "
            "(set training.num_threads to pin it)",
            run.description,
            threads,
            saved_threads,
        )
    run.model.load_state_dict(state["model"])
    run.optimizer.load_state_dict(state["optimizer"])
    run.scheduler.load_state_dict(state["scheduler"])
    _set_rng_state(run.generator, state["rng"])
    if run.meta_batches is not None:
        run.meta_batches.load_state_dict(state["meta_batches"])
    logger.info("%s: resuming after epoch %d", run.description, state["epoch"])


@dataclass
class _EpochTraining:
    """An epoch's train loss and accuracy, and the learner's own statistics
    (``train_<name>``), kept apart because the history row lists them after evaluation."""

    stats: dict[str, torch.Tensor]
    learner_stats: dict[str, torch.Tensor]


def _train_epoch(run: _Run, epoch: int) -> _EpochTraining:
    """One learner step per shuffled, augmented train batch.

    The train accuracy counts the logits a learner reports for its batch (NaN when it
    reports none, as the meta-learners do); those logits also mark the samples still
    misclassified in this epoch. Every other statistic a learner reports is averaged over
    the epoch's steps. Nothing in the loop waits for the device: the epoch's augmentation
    is drawn up front on the device and the statistics accumulate on the device until
    ``_evaluate_epoch`` reads them once.

    At batch 128 a GPU step is bound by kernel launches, so the per-step bookkeeping is two
    kernels for the misclassified flags, written into a per-epoch buffer by position, and
    the step's (detached) loss and statistics kept in lists; stacking them, the sums, the
    accuracy and the learned-epoch update (``last_wrong``) happen once, after the loop. A
    sample is visited once per epoch, so this gives the numbers a per-step update gave.
    """
    run.model.train()
    batches, device = run.batches, run.device
    num_samples, num_steps = len(batches.labels), len(batches)
    step_losses: list[torch.Tensor] = []
    wrong = torch.zeros(num_samples, device=device, dtype=torch.bool)  # by position
    counted = 0  # samples whose batch reported logits
    learner_steps: dict[str, list[torch.Tensor]] = {}
    draws = draw_augmentation(num_samples, run.config.augment, run.generator)
    for position, (_, images, labels) in enumerate(batches):
        start, size = position * batches.batch_size, len(labels)
        batch_draws = None if draws is None else draws[start : start + size]
        augmented = apply_augmentation(images, batch_draws)  # pads black pixels
        loss, stats = _learner_step(run, epoch, augmented, labels)
        step_losses.append(loss.detach())
        logits = stats.pop("logits", None)
        if logits is not None and logits.shape[0] == size:
            counted += size
            torch.ne(logits.argmax(1), labels, out=wrong[start : start + size])  # argmax: no grad
        for key, value in stats.items():
            learner_steps.setdefault(key, []).append(value.detach())
    # every batch is full but the last (BatchStream), whose size the loop ended with
    weights = _batch_weights(num_steps, batches.batch_size, size, device)
    if counted:
        # index_put over the epoch's order (a boolean mask's nonzero would sync)
        order = batches.order
        run.last_wrong[order] = torch.where(wrong, epoch, run.last_wrong[order])
    correct = counted - wrong.sum(dtype=torch.float64)
    step_loss = torch.stack(step_losses).to(torch.float64)
    return _EpochTraining(
        stats={
            "train_loss": (step_loss * weights).sum() / num_samples,
            "train_accuracy": correct / num_samples if counted else correct * float("nan"),
        },
        learner_stats={
            f"train_{k}": torch.stack(v).to(torch.float64).sum() / num_steps
            for k, v in learner_steps.items()
        },
    )


def _batch_weights(
    num_steps: int, batch_size: int, last_size: int, device: torch.device
) -> torch.Tensor:
    """The sizes of an epoch's batches, full but the last, to weight their means by.

    Built with fills: writing a Python number into a device tensor copies it from the host
    and waits.
    """
    return torch.cat(
        [
            torch.full((num_steps - 1,), float(batch_size), device=device, dtype=torch.float64),
            torch.full((1,), float(last_size), device=device, dtype=torch.float64),
        ]
    )


def _learner_step(
    run: _Run, epoch: int, images: torch.Tensor, labels: torch.Tensor
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The learner's step on one augmented train batch (and, for a meta-learner, the next
    meta-val batch): its loss and the other statistics it reports.

    Raises:
        ValueError: a learner that reports a loss or statistic that is not 0-d (besides
            the batch's ``logits``).
    """
    inputs = run.normalizer(images)
    meta_inputs = meta_labels = None
    if run.meta_batches is not None:
        _, meta_images, meta_labels = next(run.meta_batches)
        meta_inputs = run.normalizer(meta_images)
    accelerate.begin_step(run.uses_graphs)
    stats = run.learner.step(
        run.model, run.optimizer, inputs, labels, meta_inputs, meta_labels, epoch=epoch
    )
    loss = stats.pop("loss")
    if loss.ndim != 0 or any(value.ndim != 0 for key, value in stats.items() if key != "logits"):
        raise ValueError(
            f"{type(run.learner).__name__}.step must return 0-d tensors (besides 'logits'); "
            f"got shapes { {k: tuple(v.shape) for k, v in {'loss': loss, **stats}.items()} }"
        )
    return loss, stats


def _evaluate_epoch(run: _Run, epoch: int, trained: _EpochTraining) -> dict[str, float]:
    """The epoch's history row: train statistics, val (and test) statistics, the head's
    weight norm, what a learner that reads the val split reports of its update and, for
    learners with a per-sample γ, its mean and spread on val / test.

    Raises:
        FloatingPointError: the training loss or the model's val outputs are not finite.
    """
    batch_size = run.config.eval_batch_size
    val_logits, val_features = predict_logits(
        run.model, run.val.images, run.normalizer, batch_size, with_features=True
    )
    if not bool(torch.isfinite(trained.stats["train_loss"]) & torch.isfinite(val_logits).all()):
        raise FloatingPointError(
            f"{run.description or 'training'} diverged in epoch {epoch}: the training loss or the "
            "model's outputs are not finite; lower the learning rate or the loss coefficients"
        )
    stats = {
        **trained.stats,
        **_split_stats("val", val_logits, run.val.labels),
        "head_weight_norm": run.model.head.weight.detach().double().norm(),
    }
    logits, features = {"val": val_logits}, {"val": val_features}
    if run.test is not None and run.config.track_test:
        logits["test"], features["test"] = predict_logits(
            run.model, run.test.images, run.normalizer, batch_size, with_features=True
        )
        stats.update(_split_stats("test", logits["test"], run.test.labels))
    if run.record_epoch_logits:
        for part, part_logits in logits.items():
            run.epoch_logits[part].append(part_logits.cpu())
    stats.update(trained.learner_stats)
    stats.update(_validation_feedback(run, epoch, val_logits))
    for part, part_features in features.items():
        gamma = run.learner.gamma(part_features)
        if gamma is not None:
            stats[f"{part}_gamma_mean"] = gamma.double().mean()
            stats[f"{part}_gamma_std"] = gamma.double().std(correction=0)
    names = list(stats)
    # One host sync per epoch for every statistic.
    values = torch.stack([stats[k].double().reshape(()) for k in names]).tolist()
    return {"epoch": epoch, "lr": run.optimizer.param_groups[0]["lr"], **dict(zip(names, values))}


def _validation_feedback(
    run: _Run, epoch: int, val_logits: torch.Tensor
) -> dict[str, torch.Tensor]:
    """A learner that reads the val split (``validation_feedback``, e.g. AdaFocal, CALS)
    adapts on it now: on the logits of the whole val split at the epoch's last weights, in
    eval mode, and its labels -- never the test split's. The next epoch trains with what it
    adapted; the checkpoint of this epoch holds it. Returns the learner's statistics."""
    if run.learner.validation_feedback is None:
        return {}
    return run.learner.observe_validation(val_logits, run.val.labels, epoch=epoch)


def _select(selected: Selected, score: float, epoch: int, model: nn.Module) -> Selected:
    """Keep this epoch's weights if they score lower than the kept ones.

    The copy stays on the training device (with ``select: last`` it is made every epoch, and
    a copy to the host would wait for the device each time); ``_on_cpu`` moves it when a
    checkpoint or the result is written."""
    if score < selected.score:
        weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return Selected(score, epoch, weights)
    return selected


def _on_cpu(state_dict: dict[str, torch.Tensor] | None) -> dict[str, torch.Tensor] | None:
    """``state_dict`` with its tensors on the CPU (as checkpoints and results hold them)."""
    return None if state_dict is None else {k: v.cpu() for k, v in state_dict.items()}


def _save_state(run: _Run, store: CheckpointStore, fingerprint: str, epoch: int) -> None:
    """Write everything ``_resume`` needs to continue after ``epoch``; after the last epoch
    only what the result needs (the optimiser and the last weights are done with)."""
    state: dict[str, Any] = {
        "layout": RESUME_STATE_LAYOUT,
        "fingerprint": fingerprint,
        "threads": torch.get_num_threads(),
        "epoch": epoch,
        "complete": epoch == run.config.epochs,
        "learner": run.learner.state_dict(),
        "history": run.history,
        "last_wrong": run.last_wrong.cpu(),
        "selected": {
            "score": run.selected.score,
            "epoch": run.selected.epoch,
            "state_dict": _on_cpu(run.selected.state_dict),
        },
    }
    if not state["complete"]:
        state.update(
            model=run.model.state_dict(),
            optimizer=run.optimizer.state_dict(),
            scheduler=run.scheduler.state_dict(),
            rng=_rng_state(run.generator),
            meta_batches=None if run.meta_batches is None else run.meta_batches.state_dict(),
        )
    store.save(state)


def _result(run: _Run) -> TrainResult:
    """The selected weights, the history, the learned epochs and the learner's state."""
    final_epoch = run.history[-1]["epoch"] if run.history else 0
    last_wrong = run.last_wrong.cpu()
    # Learned in the epoch after its last mistake; never wrong: 1; wrong in the last epoch: 0.
    learned = torch.where(last_wrong < final_epoch, last_wrong + 1, torch.zeros_like(last_wrong))
    learned = torch.where(last_wrong < 0, torch.ones_like(last_wrong), learned)
    if not any(math.isfinite(row["train_accuracy"]) for row in run.history):
        learned = torch.full_like(last_wrong, NOT_TRACKED)  # no step scored the train batch
    return TrainResult(
        state_dict=_on_cpu(run.selected.state_dict),
        selected_epoch=run.selected.epoch,
        history=run.history,
        learned_epoch=learned,
        epoch_logits={k: v for k, v in run.epoch_logits.items() if v},
        meta_state=run.learner.state_dict() or None,
        resumed_after_epoch=run.start_epoch - 1,
        device=str(run.device),
        images_per_second=_images_per_second(run),
    )


def _images_per_second(run: _Run) -> float | None:
    """Train images per second of wall time over the epochs this call trained."""
    trained = [row for row in run.history if row["epoch"] >= run.start_epoch]
    seconds = sum(row["seconds"] for row in trained)
    if not trained or seconds <= 0:
        return None
    return len(run.last_wrong) * len(trained) / seconds


def resolve_device(name: str) -> torch.device:
    """``auto`` picks CUDA when present, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} requested but CUDA is not available")
    return torch.device(name)


def describe_device(device: torch.device) -> dict[str, str]:
    """What ran a node, for its artifact's ``execution`` record: the torch device and, on
    CUDA, the card's name (a provenance entry, never part of a fingerprint)."""
    if device.type == "cuda":
        return {"device": str(device), "name": torch.cuda.get_device_name(device)}
    return {"device": str(device), "name": "cpu"}


@torch.no_grad()
def predict_logits(
    model: nn.Module,
    images: torch.Tensor,
    normalizer: Normalizer,
    batch_size: int = 1024,
    with_features: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Logits (and optionally penultimate features) of ``images`` in eval mode, on the
    model's device, batched; returns float32 tensors on that device."""
    model.eval()
    device = next(model.parameters()).device
    logits, features = [], []
    for start in range(0, len(images), batch_size):
        x = normalizer(images[start : start + batch_size].to(device, non_blocking=True))
        feats = model.forward_features(x)
        logits.append(model.head(feats).float())
        if with_features:
            features.append(feats.float())
    out = torch.cat(logits) if logits else torch.empty(0, model.num_classes, device=device)
    if with_features:
        return out, torch.cat(features)
    return out


def _split_stats(
    prefix: str, logits: torch.Tensor, labels: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Per-epoch statistics the papers plot: accuracy, NLL, ECE, and NLL / entropy split by
    correct and incorrect samples (Mukhoti et al. Fig. 1-2)."""
    log_probs = torch.log_softmax(logits.double(), dim=1)
    sample_nll = -log_probs.gather(1, labels.view(-1, 1)).squeeze(1)
    entropy = -(log_probs.exp() * log_probs).sum(1)
    correct = logits.argmax(1) == labels

    def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        # NaN for an empty mask (0 / 0); no boolean indexing, whose nonzero would wait
        return torch.where(mask, values, 0.0).sum() / mask.sum()

    return {
        f"{prefix}_accuracy": correct.double().mean(),
        f"{prefix}_nll": sample_nll.mean(),
        f"{prefix}_ece": metrics.ece(logits, labels).double(),
        f"{prefix}_nll_correct": masked_mean(sample_nll, correct),
        f"{prefix}_nll_incorrect": masked_mean(sample_nll, ~correct),
        f"{prefix}_entropy_correct": masked_mean(entropy, correct),
        f"{prefix}_entropy_incorrect": masked_mean(entropy, ~correct),
    }


def _rng_state(generator: torch.Generator) -> dict[str, Any]:
    state = {"generator": generator.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(generator: torch.Generator, state: dict[str, Any]) -> None:
    generator.set_state(state["generator"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
