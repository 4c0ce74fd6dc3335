"""Nodes of the training stage: unpack parameters, call the engine, return artifacts."""

from __future__ import annotations

from typing import Any

import pandas as pd

from calib_pipeline.calibration.methods import MethodSpec
from calib_pipeline.data import ImageData
from calib_pipeline.pipelines.artifacts import run_folder
from calib_pipeline.pipelines.provenance import check_split_definition
from calib_pipeline.training import CheckpointStore, train_run


def train_method(
    data: ImageData,
    split: dict[str, list[int]],
    split_definition: dict[str, Any],
    resume_states: CheckpointStore,
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
        resume_states: the store of every run's resumable state (the catalog decides where
            it lives); this run's is its ``run_folder``.
        model_params: ``{"name": ..., "params": {...}}``, overridden by the method's ``model``.
        training_params: ``TrainConfig`` fields, overridden by the method's ``training``.
        run_info: the session's ``run_id``, ``env`` and ``protocol``, recorded in the run's
            provenance.
        method: the method (objective or meta-learner, hyperparameters, split, overrides).
        seed: initialisation and data-order seed.

    Returns:
        The run's checkpoint and per-epoch history table
        (:func:`~calib_pipeline.training.run.train_run`).

    Raises:
        ProvenanceError: ``split`` is not the split ``split_definition`` makes.
    """
    check_split_definition(data, split, split_definition, method.split)
    return train_run(
        data,
        split,
        split_definition,
        CheckpointStore(resume_states.directory / run_folder(method.key, seed)),
        method=method,
        seed=seed,
        model_params=model_params,
        training_params=training_params,
        run_id=run_info["run_id"],
        env=run_info["env"],
        protocol=run_info["protocol"],
    )
