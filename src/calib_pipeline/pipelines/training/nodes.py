"""Nodes of the training stage: unpack parameters, call the engine, return artifacts."""

from __future__ import annotations

import logging
from typing import Any

import pandas as pd
import torch

from calib_pipeline.calibration.methods import MethodSpec, build_method
from calib_pipeline.data import ImageData
from calib_pipeline.data.splits import split_fingerprint, split_tensors
from calib_pipeline.pipelines.provenance import check_split_definition
from calib_pipeline.tensor_io import code_fingerprint, fingerprint
from calib_pipeline.training import CheckpointStore, Split, TrainConfig, TrainResult, train_model
from calib_pipeline.training.artifacts import model_from_config, run_checkpoint, run_history
from calib_pipeline.training.provenance import run_configuration, training_provenance

logger = logging.getLogger(__name__)




def train_method(
    data: ImageData,
    split: dict[str, list[int]],
    split_definition: dict[str, Any],
    store: CheckpointStore,
    model_params: dict[str, Any],
    training_params: dict[str, Any],
    run_info: dict[str, str],
    *,
    method: MethodSpec,
    seed: int,
) -> tuple[dict[str, Any], pd.DataFrame]:
    """Train one (method, seed) run.

    Args:
        data: the dataset.
        split: index split of the training part.
        split_definition: the ``splits.<method.split>`` parameters ``split`` was made with.
        store: resume store of this run (the catalog decides where it lives).
        model_params: ``{"name": ..., "params": {...}}``, overridden by the method's ``model``.
        training_params: ``TrainConfig`` fields, overridden by the method's ``training``.
        run_info: the session's ``run_id``, ``env`` and ``protocol``, recorded in the run's
            provenance.
        method: the method (objective or meta-learner, hyperparameters, split, overrides).
        seed: initialisation and data-order seed.

    Returns:
        The checkpoint (selected weights, architecture, normalisation, config, provenance,
        learned epochs) and the per-epoch history table.

    Raises:
        ProvenanceError: ``split`` is not the split ``split_definition`` makes.
    """
    check_split_definition(data, split, split_definition, method.split)
    run_config = {
        **run_configuration(
            method,
            seed=seed,
            dataset=data.name,
            split_definition=split_definition,
            model_params=model_params,
            training_params=training_params,
        ),
        "split_hash": split_fingerprint(split),
        "code": code_fingerprint(),
    }
    if method.record_epoch_logits:
        # a completed state then holds the epoch logits too: its own configuration (and
        # resume folder); absent otherwise, so existing runs keep their fingerprints
        run_config["record_epoch_logits"] = True
    config = TrainConfig.from_params(run_config["training"])
    torch.manual_seed(seed)
    model = model_from_config(data, run_config["model"])
    learner = build_method(method, num_classes=data.num_classes, feature_dim=model.feature_dim)
    parts = {part: Split(*split_tensors(data, split, part)) for part in [*split, "test"]}
    configuration = fingerprint(run_config)
    result = train_model(
        model,
        learner,
        parts["train"],
        parts["val"],
        config,
        normalization=(data.mean, data.std),
        seed=seed,
        test=parts["test"],
        meta_val=parts.get("meta_val"),  # plain objectives ignore it
        # a folder per configuration: a run of other settings (another env, --params, code)
        # never waits on this one's lock nor discards its state
        store=store.for_configuration(configuration),
        fingerprint=configuration,
        record_epoch_logits=method.record_epoch_logits,
        description=f"{method.key} seed {seed}",
    )
    _log_outcome(method.key, seed, result)
    provenance = training_provenance(
        run_config, run_id=run_info["run_id"], env=run_info["env"], protocol=run_info["protocol"]
    )
    checkpoint = run_checkpoint(method, seed, data, run_config, result, provenance, learner)
    return checkpoint, run_history(method.key, seed, result, provenance)


def _log_outcome(key: str, seed: int, result: TrainResult) -> None:
    """The selected epoch's accuracies (the checkpoint's), not the last epoch's."""
    selected = next((row for row in result.history if row["epoch"] == result.selected_epoch), result.history[-1])
    logger.info(
        "%s seed %d: val acc %.4f, test acc %s (selected epoch %d of %d)",
        key,
        seed,
        selected["val_accuracy"],
        f"{selected['test_accuracy']:.4f}" if "test_accuracy" in selected else "n/a",
        result.selected_epoch,
        len(result.history),
    )
