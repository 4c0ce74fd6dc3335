"""One (method, seed) training run, end to end: from a dataset, an index split and the
settings to the run's checkpoint and per-epoch history. Pure PyTorch/pandas; the training
pipeline's node and a notebook call the same :func:`train_run`.

A notebook::

    from calib_pipeline.calibration.methods import MethodSpec
    from calib_pipeline.data import load_dataset
    from calib_pipeline.data.splits import split_dataset
    from calib_pipeline.training import CheckpointStore, train_run

    data = load_dataset("digits")
    definition = {"seed": 0, "fractions": {"train": 0.75, "val": 0.25}}
    checkpoint, history = train_run(
        data, split_dataset(data, definition), definition, CheckpointStore("resume"),
        method=MethodSpec(key="ce", objective="cross_entropy"), seed=0,
        model_params={"name": "small_cnn"}, training_params={"epochs": 2},
        run_id="notebook", env="local", protocol="local",
    )
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pandas as pd
import torch

from calib_pipeline.calibration.methods import MethodSpec, build_method
from calib_pipeline.calibration.metrics import METRIC_NAMES, metric_text
from calib_pipeline.data import ImageData
from calib_pipeline.data.splits import split_fingerprint, split_tensors
from calib_pipeline.tensor_io import code_fingerprint, fingerprint
from calib_pipeline.training.artifacts import model_from_config, run_checkpoint, run_history
from calib_pipeline.training.checkpoint import CheckpointStore
from calib_pipeline.training.config import TrainConfig
from calib_pipeline.training.engine import Split, TrainResult, train_model
from calib_pipeline.training.provenance import run_configuration, training_provenance

logger = logging.getLogger(__name__)


def train_run(
    data: ImageData,
    split: Mapping[str, list[int]],
    split_definition: Mapping[str, Any],
    store: CheckpointStore,
    *,
    method: MethodSpec,
    seed: int,
    model_params: Mapping[str, Any],
    training_params: Mapping[str, Any],
    run_id: str,
    env: str,
    protocol: str,
) -> tuple[dict[str, Any], pd.DataFrame]:
    """Train one (method, seed) run, reusing or resuming a stored state of its configuration.

    Args:
        data: the dataset.
        split: index split of the training part (``train``, ``val``[, ``meta_val``]).
        split_definition: the split settings ``split`` was made with (``seed``,
            ``fractions``[, ``subset``]); recorded in the run's configuration.
        store: resume store of the run; each configuration trains in a folder of its own.
        method: the method (objective or meta-learner, hyperparameters, split, overrides).
        seed: initialisation and data-order seed.
        model_params: ``{"name": ..., "params": {...}}``, overridden by the method's ``model``.
        training_params: ``TrainConfig`` fields, overridden by the method's ``training``.
        run_id: id of the session that trains (recorded in the provenance).
        env: configuration environment of that session.
        protocol: that environment's protocol.

    Returns:
        The checkpoint (selected weights, architecture, normalisation, config, provenance,
        learned epochs) and the per-epoch history table.
    """
    run_config = _run_config(
        data, split, split_definition, method, seed, model_params, training_params
    )
    config = TrainConfig.from_params(run_config["training"])
    torch.manual_seed(seed)
    model = model_from_config(data, run_config["model"])
    learner = build_method(method, num_classes=data.num_classes, feature_dim=model.feature_dim)
    result = _train(
        model, learner, data, split, config, store, fingerprint(run_config), method, seed
    )
    _log_outcome(method.key, seed, result)
    provenance = training_provenance(run_config, run_id=run_id, env=env, protocol=protocol)
    checkpoint = run_checkpoint(method, seed, data, run_config, result, provenance, learner)
    return checkpoint, run_history(method.key, seed, result, provenance)


def _train(
    model: torch.nn.Module,
    learner: Any,
    data: ImageData,
    split: Mapping[str, list[int]],
    config: TrainConfig,
    store: CheckpointStore,
    configuration: str,
    method: MethodSpec,
    seed: int,
) -> TrainResult:
    """The engine on the split's parts, resuming from the store's folder of ``configuration``."""
    parts = {part: Split(*split_tensors(data, split, part)) for part in [*split, "test"]}
    return train_model(
        model,
        learner,
        parts["train"],
        parts["val"],
        config,
        normalization=(data.mean, data.std),
        seed=seed,
        test=parts["test"],
        meta_val=parts.get("meta_val"),  # plain objectives ignore it
        # a folder per configuration: a run of other settings (another env, other
        # parameters, other code) never waits on this one's lock nor discards its state
        store=store.for_configuration(configuration),
        fingerprint=configuration,
        record_epoch_logits=method.record_epoch_logits,
        description=f"{method.key} seed {seed}",
    )


def _run_config(
    data: ImageData,
    split: Mapping[str, list[int]],
    split_definition: Mapping[str, Any],
    method: MethodSpec,
    seed: int,
    model_params: Mapping[str, Any],
    training_params: Mapping[str, Any],
) -> dict[str, Any]:
    """The run's configuration (:func:`~calib_pipeline.training.provenance.run_configuration`)
    with the split's hash and the code's fingerprint: what the run's provenance records and
    whose fingerprint names its resume folder."""
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
    return run_config


def _log_outcome(key: str, seed: int, result: TrainResult) -> None:
    """The selected epoch's accuracies (the checkpoint's), not the last epoch's."""
    selected = next(
        (row for row in result.history if row["epoch"] == result.selected_epoch), result.history[-1]
    )
    test = (
        metric_text("accuracy", selected["test_accuracy"])
        if "test_accuracy" in selected
        else f"{METRIC_NAMES['accuracy']} n/a"
    )
    logger.info(
        "%s seed %d: val %s, test %s (selected epoch %d of %d)",
        key,
        seed,
        metric_text("accuracy", selected["val_accuracy"]),
        test,
        result.selected_epoch,
        len(result.history),
    )
