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

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch

from calib_pipeline.calibration.methods import MethodSpec, build_method
from calib_pipeline.calibration.metrics import METRIC_NAMES, metric_text
from calib_pipeline.data import ImageData
from calib_pipeline.data.splits import split_fingerprint, split_tensors
from calib_pipeline.tensor_io import fingerprint
from calib_pipeline.training.artifacts import model_from_config, run_checkpoint, run_history
from calib_pipeline.training.checkpoint import CheckpointStore
from calib_pipeline.training.code_dependencies import (
    CodeUnits,
    changed_units,
    part_digests,
    training_code,
)
from calib_pipeline.training.config import TrainConfig
from calib_pipeline.training.engine import NoFinishedState, Split, TrainResult, train_model
from calib_pipeline.training.provenance import (
    method_training,
    run_configuration,
    training_provenance,
)

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

    The configuration holds digests of the code the run depends on (``code_dependencies``):
    a finished training under other code is named and trained again, or reused with
    ``training.reuse: ignore_code`` (recorded as ``provenance["reuse"]``).

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
    code = training_code(
        objective=method.objective,
        meta_learner=method.meta_learner,
        model=run_config["model"]["name"],
        dataset=data.name,
    )
    run_config["code"] = part_digests(code)
    config = method_training(training_params, method.training)  # with the session's policies
    torch.manual_seed(seed)
    model = model_from_config(data, run_config["model"])
    learner = build_method(method, num_classes=data.num_classes, feature_dim=model.feature_dim)
    run = _Training(model, learner, data, split, config, method, seed)
    result, trained_config, reuse = _train_or_reuse(run, store, run_config, code, config.reuse)
    _log_outcome(method.key, seed, result)
    provenance = training_provenance(trained_config, run_id=run_id, env=env, protocol=protocol)
    provenance.update(_provenance_notes(reuse, learner))
    checkpoint = run_checkpoint(method, seed, data, trained_config, result, provenance, learner)
    return checkpoint, run_history(method.key, seed, result, provenance)


def _provenance_notes(reuse: dict[str, Any] | None, learner: Any) -> dict[str, Any]:
    """What the provenance adds where it applies: ``reuse``, how a finished training was
    reused under other code, and ``validation_feedback``, what a method that read the val
    split during training (AdaFocal, CALS) adapted there."""
    notes: dict[str, Any] = {"reuse": reuse} if reuse else {}
    if learner.validation_feedback is not None:
        notes["validation_feedback"] = learner.validation_feedback
    return notes


@dataclass(frozen=True)
class _Training:
    """What the engine is handed for one run, whichever folder it trains or reuses in."""

    model: torch.nn.Module
    learner: Any
    data: ImageData
    split: Mapping[str, list[int]]
    config: TrainConfig
    method: MethodSpec
    seed: int


def _train_or_reuse(
    run: _Training,
    store: CheckpointStore,
    run_config: dict[str, Any],
    code: CodeUnits,
    policy: str,
) -> tuple[TrainResult, dict[str, Any], dict[str, Any] | None]:
    """Train in the folder of ``run_config`` (reusing or resuming its state), or -- under
    ``policy`` ``ignore_code`` -- reuse a finished training of the same settings under
    other code.

    Returns:
        The result, the configuration it was trained under (an earlier one's ``code`` when
        reused under other code) and, then, the reuse record for the provenance.
    """
    own = store.for_configuration(fingerprint(run_config))
    earlier = None if own.path.exists() else _earlier_training(store, run_config)
    if earlier is not None:
        other, record, finished = earlier
        changed = changed_units(record.get("code_units", {}), code)
        if policy == "ignore_code" and finished:
            reused = _reuse_other_code(run, other, record, changed)
            if reused is not None:
                reuse = {"policy": policy, "changed": changed, "code_now": run_config["code"]}
                # the same settings (compared above), trained under the recorded code
                return reused, {**run_config, "code": record["config"]["code"]}, reuse
        else:
            _announce_retraining(run, other, changed, finished)
    own.save_record({"config": run_config, "code_units": code})
    return _train(run, own, fingerprint(run_config)), run_config, None


def _earlier_training(
    store: CheckpointStore, run_config: Mapping[str, Any]
) -> tuple[CheckpointStore, dict[str, Any], bool] | None:
    """The newest state of the run (its store, record, whether finished) trained under the
    same settings as ``run_config`` but other code; None when there is none."""
    settings = _without_code(run_config)
    for other in store.configurations():
        record = other.load_record()
        if record is not None and _without_code(record.get("config", {})) == settings:
            state = other.load() or {}
            return other, record, bool(state.get("complete"))
    return None


def _without_code(config: Mapping[str, Any]) -> str:
    return json.dumps({k: v for k, v in config.items() if k != "code"}, sort_keys=True, default=str)


def _reuse_other_code(
    run: _Training, other: CheckpointStore, record: dict[str, Any], changed: dict[str, list[str]]
) -> TrainResult | None:
    """The finished state in ``other`` (trained under other code), or None when the engine
    would not continue it (what it is handed -- initial weights, normalisation, split
    sizes -- changed with the code)."""
    name = f"{run.method.key} seed {run.seed}"
    try:
        result = _train(run, other, fingerprint(record["config"]), reuse_only=True)
    except NoFinishedState:
        logger.warning(
            "%s: training.reuse=ignore_code, but the finished training in %s does not match "
            "what the changed code builds (initial weights, normalisation or split sizes); "
            "training it again. Changed since:\n%s",
            name,
            other.directory,
            _change_lines(changed),
        )
        return None
    logger.warning(
        "%s: REUSED UNDER CHANGED CODE (training.reuse=ignore_code) -- the finished training in "
        "%s was trained before these changes:\n%s\nRecorded in its provenance as "
        "reuse.policy=ignore_code.",
        name,
        other.directory,
        _change_lines(changed),
    )
    return result


def _announce_retraining(
    run: _Training, other: CheckpointStore, changed: dict[str, list[str]], finished: bool
) -> None:
    what = "finished" if finished else "unfinished"
    instead = (
        "to reuse the finished one instead, run with --params=training.reuse=ignore_code "
        "(recorded in its provenance)"
        if finished
        else "an unfinished state is never continued under other code"
    )
    logger.warning(
        "%s seed %d: the code it depends on changed since its %s training in %s:\n%s\n"
        "Training it again in a folder of its own; %s.",
        run.method.key,
        run.seed,
        what,
        other.directory,
        _change_lines(changed),
        instead,
    )


def _change_lines(changed: Mapping[str, list[str]]) -> str:
    """One line per changed part, naming its changed units (at most five)."""
    lines = []
    for part, units in changed.items():
        shown = ", ".join(units[:5]) + (f" and {len(units) - 5} more" if len(units) > 5 else "")
        lines.append(f"  {part}: {shown}")
    return "\n".join(lines) or "  (no unit differs: the record was written by other code)"


def _train(
    run: _Training, store: CheckpointStore, configuration: str, *, reuse_only: bool = False
) -> TrainResult:
    """The engine on the split's parts, resuming from ``store`` (a configuration's folder)."""
    data, split = run.data, run.split
    parts = {part: Split(*split_tensors(data, split, part)) for part in [*split, "test"]}
    return train_model(
        run.model,
        run.learner,
        parts["train"],
        parts["val"],
        run.config,
        normalization=(data.mean, data.std),
        seed=run.seed,
        test=parts["test"],
        meta_val=parts.get("meta_val"),  # plain objectives ignore it
        # a folder per configuration: a run of other settings (another env, other
        # parameters, other code) never waits on this one's lock nor discards its state
        store=store,
        fingerprint=configuration,
        record_epoch_logits=run.method.record_epoch_logits,
        description=f"{run.method.key} seed {run.seed}",
        reuse_only=reuse_only,
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
    with the split's hash: what the run's provenance records (with ``code``, the digests of
    the parts of the code it depends on) and whose fingerprint names its resume folder."""
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
