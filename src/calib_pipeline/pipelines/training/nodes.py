"""Nodes of the training stage: unpack parameters, call the engine, return artifacts."""

from __future__ import annotations

import logging
from typing import Any

import pandas as pd
import torch

from calib_pipeline.calibration.losses import build_objective
from calib_pipeline.data import ImageData
from calib_pipeline.models import build_model
from calib_pipeline.data.splits import split_tensors
from calib_pipeline.training import CheckpointStore, Split, TrainConfig, train_model
from calib_pipeline.training.checkpoint import fingerprint

logger = logging.getLogger(__name__)


def model_from_config(data: ImageData, model_params: dict[str, Any]) -> torch.nn.Module:
    return build_model(
        model_params["name"],
        in_channels=data.in_channels,
        num_classes=data.num_classes,
        image_size=data.image_size,
        **(model_params.get("params") or {}),
    )


def train_method(
    data: ImageData,
    split: dict[str, list[int]],
    store: CheckpointStore,
    model_params: dict[str, Any],
    training_params: dict[str, Any],
    *,
    method: dict[str, Any],
    seed: int,
) -> tuple[dict[str, Any], pd.DataFrame]:
    """Train one (method, seed) run.

    Args:
        data: the dataset.
        split: index split of the training part.
        store: resume store of this run (the catalog decides where it lives).
        model_params: ``{"name": ..., "params": {...}}``, overridden by the method's ``model``.
        training_params: ``TrainConfig`` fields, overridden by the method's ``training``.
        method: the parsed method entry (objective or meta-learner and hyperparameters).
        seed: initialisation and data-order seed.

    Returns:
        The checkpoint (selected weights, architecture, normalisation, config, learned epochs)
        and the per-epoch history table.
    """
    model_cfg = {**model_params, **(method.get("model") or {})}
    config = TrainConfig.from_params({**training_params, **method["training"]})
    torch.manual_seed(seed)
    model = model_from_config(data, model_cfg)
    objective = meta_learner = None
    if method["objective"] is not None:
        objective = build_objective(method["objective"], **method["params"])
    else:
        from calib_pipeline.calibration.meta import build_meta_learner

        meta_learner = build_meta_learner(
            method["meta_learner"],
            num_classes=data.num_classes,
            feature_dim=model.feature_dim,
            **method["params"],
        )
    run_config = {
        "dataset": data.name,
        "split": method["split"],
        "model": model_cfg,
        "training": config.as_dict(),
        "objective": method["objective"],
        "meta_learner": method["meta_learner"],
        "params": method["params"],
        "seed": seed,
    }
    result = train_model(
        model,
        objective,
        Split(*split_tensors(data, split, "train")),
        Split(*split_tensors(data, split, "val")),
        config,
        normalization=(data.mean, data.std),
        seed=seed,
        test=Split(*split_tensors(data, split, "test")),
        meta_val=Split(*split_tensors(data, split, "meta_val")) if meta_learner is not None else None,
        meta_learner=meta_learner,
        store=store,
        fingerprint=fingerprint(run_config),
        record_epoch_logits=method.get("record_epoch_logits", False),
        description=f"{method['key']} seed {seed}",
    )
    history = pd.DataFrame(result.history)
    history.insert(0, "seed", seed)
    history.insert(0, "method", method["key"])
    last = result.history[-1]
    logger.info(
        "%s seed %d: val acc %.4f, test acc %s (selected epoch %d)",
        method["key"],
        seed,
        last["val_accuracy"],
        f"{last['test_accuracy']:.4f}" if "test_accuracy" in last else "n/a",
        result.selected_epoch,
    )
    checkpoint = {
        "method": method["key"],
        "label": method["label"],
        "seed": seed,
        "state_dict": result.state_dict,
        "architecture": {
            "name": model_cfg["name"],
            "params": dict(model_cfg.get("params") or {}),
            "in_channels": data.in_channels,
            "num_classes": data.num_classes,
            "image_size": data.image_size,
        },
        "normalization": {"mean": list(data.mean), "std": list(data.std)},
        "selected_epoch": result.selected_epoch,
        "learned_epoch": result.learned_epoch,
        "epoch_logits": result.epoch_logits,
        "meta_state": result.meta_state,
        "config": run_config,
    }
    return checkpoint, history
