"""Prediction from a trained checkpoint: a predictor function (the logits and shift stages
use it) and the logits of every split part of a run (:func:`checkpoint_logits`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from calib_pipeline.calibration.methods import Learner, MethodSpec, build_method
from calib_pipeline.data import ImageData
from calib_pipeline.data.splits import split_tensors
from calib_pipeline.models import model_from_checkpoint
from calib_pipeline.training.config import TrainConfig
from calib_pipeline.training.data import Normalizer
from calib_pipeline.training.engine import describe_device, predict_logits, resolve_device


def checkpoint_predictor(
    checkpoint: dict[str, Any], device: str = "auto", batch_size: int | None = None
) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """A function images -> (logits, features) on CPU for a trained checkpoint.

    ``batch_size`` images go through each forward pass; ``None`` takes the run's own
    ``eval_batch_size`` -- the env's setting for its hardware (on one CPU thread a small
    network predicts faster in batches of 128 than of 1,024, docs/performance.md). Each
    image's forward pass is its own (eval mode): the batch changes the speed, and a logit
    only by float32 rounding (how the matrix products are blocked).
    """
    target = resolve_device(device)
    model = model_from_checkpoint(checkpoint).to(target)
    norm = checkpoint["normalization"]
    normalizer = Normalizer(tuple(norm["mean"]), tuple(norm["std"]), device=target)
    batch = run_batch_size(checkpoint) if batch_size is None else batch_size

    def predict(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits, features = predict_logits(
            model, images, normalizer, batch_size=batch, with_features=True
        )
        return logits.cpu(), features.cpu()

    return predict


def run_batch_size(checkpoint: dict[str, Any]) -> int:
    """The ``eval_batch_size`` a run was trained with (the training default for a checkpoint
    that predates the setting)."""
    training = checkpoint.get("config", {}).get("training", {})
    return int(training.get("eval_batch_size") or TrainConfig.eval_batch_size)


def checkpoint_logits(
    data: ImageData,
    split: Mapping[str, list[int]],
    checkpoint: dict[str, Any],
    *,
    device: str = "auto",
    features: bool = False,
    batch_size: int | None = None,
) -> dict[str, Any]:
    """Logits, labels and (optionally) penultimate features of every split part of a run.

    Args:
        data: the dataset the run was trained on.
        split: the index split the run was trained with.
        checkpoint: the trained run (:func:`~calib_pipeline.training.run.train_run`).
        device: where to predict (``"auto"``: the best available).
        features: keep each part's penultimate features too.
        batch_size: images per forward pass (``None``: the run's ``eval_batch_size``).

    Returns:
        ``{part: {"logits", "labels"[, "features"]}}`` for train, val, [meta_val,] test, plus
        the run's ``learned_epoch`` (aligned with the train part), identifiers, the
        checkpoint's ``provenance``, where they were predicted (``execution``: device and
        its name), the per-epoch val/test logits when the run recorded them
        (``epoch_logits``) and, for γ-Net runs, the learned per-sample γ on val and test
        (``gamma_val``, ``gamma_test``).
    """
    predict = checkpoint_predictor(checkpoint, device, batch_size)
    learner = _meta_learner(checkpoint)
    out: dict[str, Any] = {
        "method": checkpoint["method"],
        "seed": checkpoint["seed"],
        "provenance": checkpoint["provenance"],
        "execution": describe_device(resolve_device(device)),
    }
    for part in [*split, "test"]:
        images, labels = split_tensors(data, split, part)
        logits, part_features = predict(images)
        entry = {"logits": logits, "labels": labels.clone()}
        if features:
            entry["features"] = part_features
        out[part] = entry
        if learner is not None and part in ("val", "test"):
            with torch.no_grad():
                gamma = learner.gamma(part_features)
            if gamma is not None:  # learners without a γ (the CE baselines) add nothing
                out[f"gamma_{part}"] = gamma.detach().cpu()
    out["learned_epoch"] = checkpoint["learned_epoch"]
    if checkpoint.get("epoch_logits"):
        out["epoch_logits"] = checkpoint["epoch_logits"]
    return out


def _meta_learner(checkpoint: dict[str, Any]) -> Learner | None:
    """The run's trained meta-learner (CPU), or None for runs trained with a plain objective
    (they learn no state of their own)."""
    if checkpoint.get("meta_state") is None:
        return None
    config = checkpoint["config"]
    method = MethodSpec(
        key=checkpoint["method"],
        objective=config["objective"],
        meta_learner=config["meta_learner"],
        params=config["params"],
    )
    learner = build_method(
        method,
        num_classes=checkpoint["architecture"]["num_classes"],
        feature_dim=model_from_checkpoint(checkpoint).feature_dim,
    )
    learner.load_state_dict(checkpoint["meta_state"])
    return learner
