"""Nodes of the logits stage."""

from __future__ import annotations

from typing import Any

import torch

from calib_pipeline.calibration.methods import Learner, MethodSpec, build_method
from calib_pipeline.data import ImageData
from calib_pipeline.data.splits import split_fingerprint, split_tensors
from calib_pipeline.models import model_from_checkpoint
from calib_pipeline.pipelines.provenance import check_checkpoint_data
from calib_pipeline.training.predict import checkpoint_predictor


def compute_logits(
    data: ImageData,
    split: dict[str, list[int]],
    checkpoint: dict[str, Any],
    logits_params: dict[str, Any],
    run_info: dict[str, str],
) -> dict[str, Any]:
    """Logits, labels and (optionally) penultimate features of every split part.

    Args:
        data: the dataset.
        split: the index split the run was trained with.
        checkpoint: the trained run.
        logits_params: ``{"device": "auto", "features": bool}``.
        run_info: the session's identity; the checkpoint must be of its protocol.

    Returns:
        ``{part: {"logits", "labels"[, "features"]}}`` for train, val, [meta_val,] test, plus
        the run's ``learned_epoch`` (aligned with the train part), identifiers, the
        checkpoint's ``provenance``, the per-epoch val/test logits when the run recorded
        them (``epoch_logits``) and, for γ-Net runs, the learned per-sample γ on val and
        test (``gamma_val``, ``gamma_test``).

    Raises:
        ProvenanceError: the checkpoint belongs to another protocol, or was trained on
            another dataset or split.
    """
    provenance = check_checkpoint_data(
        checkpoint, dataset=data.name, split_hash=split_fingerprint(split), run_info=run_info
    )
    predict = checkpoint_predictor(checkpoint, logits_params.get("device", "auto"))
    learner = _meta_learner(checkpoint)
    out: dict[str, Any] = {
        "method": checkpoint["method"],
        "seed": checkpoint["seed"],
        "provenance": provenance,
    }
    for part in [*split, "test"]:
        images, labels = split_tensors(data, split, part)
        logits, features = predict(images)
        entry = {"logits": logits, "labels": labels.clone()}
        if logits_params.get("features", False):
            entry["features"] = features
        out[part] = entry
        if learner is not None and part in ("val", "test"):
            with torch.no_grad():
                gamma = learner.gamma(features)
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
