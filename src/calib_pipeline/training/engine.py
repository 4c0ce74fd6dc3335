"""The training engine: one function that trains a model and records its history.

Read top to bottom: set up (device, seeds, optimiser, schedule), maybe resume,
then for each epoch train on shuffled device-resident batches and evaluate on
val (and test) through the metrics module, checkpointing as it goes.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn
from tqdm.auto import tqdm

from calib_pipeline.calibration import metrics
from calib_pipeline.training.checkpoint import CheckpointStore
from calib_pipeline.training.config import TrainConfig
from calib_pipeline.training.data import BatchStream, Normalizer, augment_batch

logger = logging.getLogger(__name__)


class MetaLearner(Protocol):
    """What the engine needs of a meta-learner (see ``calibration.meta``)."""

    def step(self, model, optimizer, inputs, targets, meta_inputs, meta_targets) -> dict: ...
    def gamma(self, features: torch.Tensor) -> torch.Tensor | None: ...
    def state_dict(self) -> dict: ...
    def load_state_dict(self, state: dict) -> Any: ...
    def to(self, device: torch.device) -> Any: ...


@dataclass
class Split:
    """Images (stored dtype) and labels of one split."""

    images: torch.Tensor
    labels: torch.Tensor


@dataclass
class TrainResult:
    state_dict: dict[str, torch.Tensor]
    selected_epoch: int
    history: list[dict[str, float]]
    learned_epoch: torch.Tensor
    epoch_logits: dict[str, list[torch.Tensor]] = field(default_factory=dict)
    meta_state: dict[str, Any] | None = None


def resolve_device(name: str) -> torch.device:
    """``auto`` picks CUDA when present, else the CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} requested but CUDA is not available")
    return torch.device(name)


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


def _split_stats(prefix: str, logits: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per-epoch statistics the papers plot: accuracy, NLL, ECE, and NLL / entropy split by
    correct and incorrect samples (Mukhoti et al. Fig. 1-2)."""
    log_probs = torch.log_softmax(logits.double(), dim=1)
    sample_nll = -log_probs.gather(1, labels.view(-1, 1)).squeeze(1)
    entropy = -(log_probs.exp() * log_probs).sum(1)
    correct = logits.argmax(1) == labels
    nan = torch.tensor(float("nan"), dtype=torch.float64, device=logits.device)

    def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return values[mask].mean() if bool(mask.any()) else nan

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


def train_model(
    model: nn.Module,
    objective: Any,
    train: Split,
    val: Split,
    config: TrainConfig,
    *,
    normalization: tuple[tuple[float, ...], tuple[float, ...]],
    seed: int,
    test: Split | None = None,
    meta_val: Split | None = None,
    meta_learner: MetaLearner | None = None,
    store: CheckpointStore | None = None,
    fingerprint: str = "",
    record_epoch_logits: bool = False,
    description: str = "",
    stop_after_epoch: int | None = None,
) -> TrainResult:
    """Train ``model`` with ``objective`` (or ``meta_learner``) under ``config``.

    Args:
        model: a ``ClassifierNet`` (``forward_features`` + ``head``).
        objective: ``objective(logits, targets, **context) -> loss``; if it has
            ``mix_batch`` (mixup) the engine mixes each batch through it.
        train, val, test, meta_val: the splits; ``meta_val`` is required with a meta-learner.
        config: the hyperparameters.
        normalization: per-channel (mean, std).
        seed: seeds initialisation-independent randomness (batches, augmentation, mixing).
        meta_learner: when given, each step is ``meta_learner.step(...)`` (backbone + meta update).
        store: where the resumable state goes; an existing state with the same
            ``fingerprint`` is resumed, a different one is discarded with a warning.
            The state is removed once the run completes.
        record_epoch_logits: keep val/test logits of every epoch (for per-epoch analyses).
        description: progress-bar label (method and seed).
        stop_after_epoch: stop (as if interrupted) after this epoch -- for tests of resume.

    Returns:
        The selected weights (on CPU), the per-epoch history and the learned epoch of
        every training sample (Wang et al. §5.1: the epoch from which it stays correctly
        classified, 0 if never learned).
    """
    if meta_learner is not None and meta_val is None:
        raise ValueError("a meta-learner needs a meta_val split")
    if config.num_threads:
        torch.set_num_threads(config.num_threads)
    device = resolve_device(config.device)
    model.to(device)
    if meta_learner is not None:
        meta_learner.to(device)
    normalizer = Normalizer(*normalization, device=device)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.SGD(
        model.parameters(),
        lr=config.lr,
        momentum=config.momentum,
        nesterov=config.nesterov,
        weight_decay=config.weight_decay,
    )
    scheduler = torch.optim.lr_scheduler.MultiStepLR(
        optimizer, milestones=list(config.milestones), gamma=config.lr_decay
    )
    train_images, train_labels = train.images.to(device), train.labels.to(device)
    stream = BatchStream(train_images, train_labels, config.batch_size, generator)
    meta_stream = None
    if meta_val is not None and meta_learner is not None:
        meta_stream = BatchStream(
            meta_val.images.to(device), meta_val.labels.to(device), config.batch_size, generator
        ).forever()
    val_labels = val.labels.to(device)
    test_labels = test.labels.to(device) if test is not None else None

    history: list[dict[str, float]] = []
    last_wrong = torch.full((len(train_labels),), -1, dtype=torch.long, device=device)
    epoch_logits: dict[str, list[torch.Tensor]] = {"val": [], "test": []}
    best = (float("inf"), 0, None)
    start_epoch = 1

    resumed = store.load() if store is not None else None
    if resumed is not None and resumed.get("fingerprint") != fingerprint:
        logger.warning("discarding checkpoint in %s: it belongs to another configuration", store)
        resumed = None
    if resumed is not None:
        model.load_state_dict(resumed["model"])
        optimizer.load_state_dict(resumed["optimizer"])
        scheduler.load_state_dict(resumed["scheduler"])
        if meta_learner is not None:
            meta_learner.load_state_dict(resumed["meta_learner"])
        _set_rng_state(generator, resumed["rng"])
        history = resumed["history"]
        last_wrong = resumed["last_wrong"].to(device)
        epoch_logits = resumed["epoch_logits"]
        best = resumed["best"]
        start_epoch = resumed["epoch"] + 1
        logger.info("%s: resuming after epoch %d", description, resumed["epoch"])

    progress = tqdm(
        range(start_epoch, config.epochs + 1),
        desc=description or "training",
        initial=start_epoch - 1,
        total=config.epochs,
        leave=False,
        dynamic_ncols=True,
    )
    use_amp = config.amp and device.type == "cuda"
    for epoch in progress:
        started = time.perf_counter()
        model.train()
        loss_sum = torch.zeros((), device=device, dtype=torch.float64)
        correct_sum = torch.zeros((), device=device, dtype=torch.float64)
        seen_logits = False
        meta_sums: dict[str, torch.Tensor] = {}
        for index, images, labels in stream:
            x = augment_batch(normalizer(images), config.augment, generator)
            if meta_learner is not None:
                meta_images, meta_labels = next(meta_stream)[1:]
                stats = meta_learner.step(
                    model, optimizer, x, labels, normalizer(meta_images), meta_labels
                )
                loss = stats.pop("loss")
                logits = stats.pop("logits", None)  # learners may return the train-batch logits
                for key, value in stats.items():
                    meta_sums[key] = meta_sums.get(key, 0) + value.detach().double()
            else:
                targets = labels
                if hasattr(objective, "mix_batch"):
                    x, targets = objective.mix_batch(x, labels, generator)
                with torch.autocast(device.type, enabled=use_amp):
                    logits = model(x)
                    loss = objective(logits.float(), targets, model=model, epoch=epoch)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if config.grad_clip:
                    nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
                optimizer.step()
            loss_sum += loss.detach().double() * len(labels)
            if logits is not None and logits.shape[0] == len(labels):
                seen_logits = True
                wrong = logits.detach().argmax(1) != labels
                correct_sum += (~wrong).sum()
                last_wrong[index[wrong]] = epoch
        scheduler.step()

        val_logits = predict_logits(model, val.images, normalizer, config.eval_batch_size)
        if not bool(torch.isfinite(loss_sum) & torch.isfinite(val_logits).all()):
            raise FloatingPointError(
                f"{description or 'training'} diverged in epoch {epoch}: the training loss or the "
                "model's outputs are not finite; lower the learning rate or the loss coefficients"
            )
        stats = {
            "train_loss": loss_sum / len(train_labels),
            "train_accuracy": correct_sum / len(train_labels) if seen_logits else correct_sum * float("nan"),
            **_split_stats("val", val_logits, val_labels),
            "head_weight_norm": model.head.weight.detach().double().norm(),
        }
        if record_epoch_logits:
            epoch_logits["val"].append(val_logits.cpu())
        test_logits = test_features = None
        if test is not None and config.track_test:
            test_logits, test_features = predict_logits(
                model, test.images, normalizer, config.eval_batch_size, with_features=True
            )
            stats.update(_split_stats("test", test_logits, test_labels))
            if record_epoch_logits:
                epoch_logits["test"].append(test_logits.cpu())
        if meta_learner is not None:
            stats.update({f"train_{k}": v / len(stream) for k, v in meta_sums.items()})
            _, val_features = predict_logits(
                model, val.images, normalizer, config.eval_batch_size, with_features=True
            )
            for prefix, feats in (("val", val_features), ("test", test_features)):
                gamma = meta_learner.gamma(feats) if feats is not None else None
                if gamma is not None:
                    stats[f"{prefix}_gamma_mean"] = gamma.double().mean()
                    stats[f"{prefix}_gamma_std"] = gamma.double().std()
        names = list(stats)
        values = torch.stack([stats[k].double().reshape(()) for k in names]).tolist()
        row = {"epoch": epoch, "lr": optimizer.param_groups[0]["lr"], **dict(zip(names, values))}
        row["seconds"] = time.perf_counter() - started
        history.append(row)
        progress.set_postfix(loss=f"{row['train_loss']:.3f}", val_acc=f"{row['val_accuracy']:.3f}")

        score = {
            "last": -epoch,
            "best_val_error": 1.0 - row["val_accuracy"],
            "best_val_nll": row["val_nll"],
        }[config.select]
        if score < best[0]:
            best = (score, epoch, {k: v.detach().cpu().clone() for k, v in model.state_dict().items()})

        if store is not None and (epoch % config.checkpoint_every == 0 or epoch == config.epochs):
            state = {
                "fingerprint": fingerprint,
                "epoch": epoch,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "rng": _rng_state(generator),
                "history": history,
                "last_wrong": last_wrong.cpu(),
                "epoch_logits": epoch_logits,
                "best": best,
            }
            if meta_learner is not None:
                state["meta_learner"] = meta_learner.state_dict()
            store.save(state)
        if stop_after_epoch is not None and epoch >= stop_after_epoch:
            break
    progress.close()
    if store is not None and history and history[-1]["epoch"] == config.epochs:
        store.clear()  # the run is complete: its artifacts go through the catalog, not the store

    final_epoch = history[-1]["epoch"] if history else 0
    last_wrong = last_wrong.cpu()
    learned = torch.where(last_wrong < final_epoch, last_wrong + 1, torch.zeros_like(last_wrong))
    learned = torch.where(last_wrong < 0, torch.ones_like(last_wrong), learned)
    return TrainResult(
        state_dict=best[2],
        selected_epoch=best[1],
        history=history,
        learned_epoch=learned,
        epoch_logits={k: v for k, v in epoch_logits.items() if v},
        meta_state=meta_learner.state_dict() if meta_learner is not None else None,
    )
