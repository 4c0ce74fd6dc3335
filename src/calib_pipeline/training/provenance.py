"""What produced a trained run: its configuration, its provenance record, and how two
configurations differ.

A run's *configuration* is everything that decides what its model learns (dataset, split,
model, training settings, objective or meta-learner, seed). The training node records it
with the split's hash and the hash of the training code; whatever is later derived from the
run (logits, shifted-set logits, fitted calibrators) carries the same *provenance* record, so
artifacts of different trainings, or of a training the current parameters no longer
describe, can be told apart and refused. :func:`run_configuration` is the one place that
builds a configuration: the training node and every later check call it alike.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from calib_pipeline.calibration.methods import MethodSpec
from calib_pipeline.data.splits import check_fractions, check_subset
from calib_pipeline.models import architecture_tag
from calib_pipeline.tensor_io import fingerprint
from calib_pipeline.training.config import TrainConfig

# Settings that decide where and how fast a run trains, not what it learns: a run trained on
# a GPU cluster may be scored on a laptop with ``device: cpu``.
EXECUTION_SETTINGS = (
    "device",
    "eval_batch_size",
    "checkpoint_every",
    "num_threads",
    "track_test",
    "deterministic",
)
# Recorded at training, never compared with a session's parameters: the split hash needs the
# split's indices (the logits node compares it with the split it is given), re-scoring
# with newer metric code is the point of keeping cached logits, and recording epoch logits
# changes what a run keeps, not what it trains.
RECORDED_ONLY = ("split_hash", "code", "record_epoch_logits")


class _NotSet:
    """A setting one configuration has and the other lacks."""

    def __repr__(self) -> str:
        return "not set"


NOT_SET = _NotSet()
# (key path, recorded value, expected value) of one setting two configurations disagree on
Difference = tuple[tuple[str, ...], Any, Any]


def method_model(
    model_params: Mapping[str, Any] | None, override: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The ``model`` entry a method trains with: its own ``model`` over the study's, key by
    key (a method that names only another network keeps the study's ``params``)."""
    return {**(model_params or {}), **(override or {})}


def method_training(
    training_params: Mapping[str, Any] | None, override: Mapping[str, Any] | None
) -> TrainConfig:
    """The training settings a method trains with: its own ``training`` over the study's,
    key by key, every ``TrainConfig`` field filled (unknown keys raise ``ValueError``)."""
    return TrainConfig.from_params({**(training_params or {}), **(override or {})})


def method_setups(
    methods: list[str],
    model_params: Mapping[str, Any] | None,
    model_overrides: Mapping[str, Mapping[str, Any] | None] | None = None,
    training_params: Mapping[str, Any] | None = None,
    training_overrides: Mapping[str, Mapping[str, Any] | None] | None = None,
) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    """What each of ``methods`` trains: its network as ``models.architecture_tag`` writes it
    (methods without a network name are left out) and, when ``training_params`` are
    given, its effective training settings (every ``TrainConfig`` field; else ``{}``) --
    the method's own ``model`` / ``training`` over the study's, as in training."""
    own_models, own_training = model_overrides or {}, training_overrides or {}
    specs = {m: method_model(model_params, own_models.get(m)) for m in methods}
    networks = {
        m: architecture_tag(s["name"], s.get("params")) for m, s in specs.items() if s.get("name")
    }
    settings = (
        {}
        if training_params is None
        else {m: method_training(training_params, own_training.get(m)).as_dict() for m in methods}
    )
    return networks, settings


def run_configuration(
    method: MethodSpec,
    *,
    seed: int,
    dataset: str,
    split_definition: Mapping[str, Any],
    model_params: Mapping[str, Any],
    training_params: Mapping[str, Any],
) -> dict[str, Any]:
    """The configuration of one (method, seed) run under a set of parameters.

    Args:
        method: the method (its ``model`` and ``training`` override the study's).
        seed: initialisation and data-order seed.
        dataset: the dataset's name.
        split_definition: the ``splits.<method.split>`` parameters (``seed``, ``fractions``,
            optional ``subset``).
        model_params: the ``model`` parameters (``name``, ``params``).
        training_params: the ``training`` parameters (``TrainConfig`` fields).

    Returns:
        JSON-friendly ``{dataset, split, split_definition, model, training, objective,
        meta_learner, params, seed}``; ``training`` holds every ``TrainConfig`` field.
    """
    definition = {
        "seed": int(split_definition.get("seed", 0)),
        "fractions": check_fractions(split_definition["fractions"]),
    }
    if split_definition.get("subset") is not None:  # absent otherwise: older records stay equal
        definition["subset"] = check_subset(split_definition["subset"])
    return {
        "dataset": dataset,
        "split": method.split,
        "split_definition": definition,
        "model": method_model(model_params, method.model),
        "training": method_training(training_params, method.training).as_dict(),
        "objective": method.objective,
        "meta_learner": method.meta_learner,
        "params": dict(method.params),
        "seed": seed,
    }


def training_provenance(
    config: Mapping[str, Any], *, run_id: str, env: str, protocol: str
) -> dict[str, Any]:
    """The provenance record of a trained run, copied into everything derived from it.

    Args:
        config: the run's configuration (:func:`run_configuration` plus ``split_hash`` and
            ``code``).
        run_id: the id of the session that trained it (the version its checkpoint is saved
            under).
        env: the configuration environment of that session.
        protocol: that environment's protocol (the folder its artifacts are saved in).

    Returns:
        ``{run_id, env, protocol, dataset, split, split_hash, fingerprint, config}``;
        ``fingerprint`` is the hash that decides whether the run's resume state may be reused.
    """
    return {
        "run_id": run_id,
        "env": env,
        "protocol": protocol,
        "dataset": config["dataset"],
        "split": config["split"],
        "split_hash": config["split_hash"],
        "fingerprint": fingerprint(dict(config)),
        "config": dict(config),
    }


def configuration_differences(
    recorded: Mapping[str, Any], expected: Mapping[str, Any]
) -> list[Difference]:
    """Where a recorded run configuration differs from the one the parameters now give.

    Execution settings and the recorded-only hashes are left out; tuples and lists compare
    equal (a configuration read back from a file holds lists).

    Args:
        recorded: the configuration in an artifact's provenance.
        expected: :func:`run_configuration` under the current parameters.

    Returns:
        (key path, recorded value, expected value) per differing setting, sorted by path;
        a setting present on one side only has :data:`NOT_SET` on the other.
    """
    return _differences(_comparable(recorded), _comparable(expected), ())


def _comparable(config: Mapping[str, Any]) -> dict[str, Any]:
    plain = json.loads(json.dumps(config, default=str))
    training = {k: v for k, v in plain.get("training", {}).items() if k not in EXECUTION_SETTINGS}
    return {**{k: v for k, v in plain.items() if k not in RECORDED_ONLY}, "training": training}


def _differences(recorded: Any, expected: Any, path: tuple[str, ...]) -> list[Difference]:
    if isinstance(recorded, dict) and isinstance(expected, dict):
        found = []
        for key in sorted(set(recorded) | set(expected)):
            found += _differences(
                recorded.get(key, NOT_SET), expected.get(key, NOT_SET), (*path, key)
            )
        return found
    return [] if recorded == expected else [(path, recorded, expected)]
