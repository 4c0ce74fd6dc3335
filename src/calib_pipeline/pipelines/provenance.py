"""The refusals of artifacts whose provenance disagrees with the session (docs/reliability.md).

Nodes call these checks; each asks :mod:`calib_pipeline.training.provenance_checks` what
differs and turns a mismatch into a :class:`ProvenanceError` that names the run, what
differs and what to do: which ``kedro run`` makes or pins the right artifacts, named by
their catalog keys. The session's expected run configuration is built by the same
:func:`~calib_pipeline.training.provenance.run_configuration` the training node uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from calib_pipeline.calibration.methods import MethodSpec
from calib_pipeline.data import ImageData
from calib_pipeline.pipelines.artifacts import artifact_name, run_artifact
from calib_pipeline.training.artifacts import FITTED_CALIBRATORS, SHIFT_SETTINGS, SHIFTED_VAL_SUFFIX
from calib_pipeline.training.provenance import run_configuration
from calib_pipeline.training.provenance_checks import (
    Check,
    Mismatch,
    calibrator_mismatch,
    configuration_mismatch,
    data_mismatch,
    history_mismatch,
    protocol_mismatch,
    provenance_record,
    shift_settings_mismatch,
    split_mismatch,
    training_mismatch,
)

RETRAIN = (
    "Retrain it under this session's parameters (run the study's pipeline, e.g. "
    "`kedro run --pipelines=<study>`: completed trainings that match them are reused from the "
    "resume store, the others retrain), run with the parameters it was trained with, or load "
    "versions trained with these parameters (--load-versions=<dataset>:<version>)."
)
REBUILD = (
    "An interrupted or partial run leaves such a mix. Rebuild the run's artifacts from one "
    "training (run the study's pipeline, e.g. `kedro run --pipelines=<study>`), or pin versions "
    "that belong together (--load-versions=<dataset>:<version>)."
)


class ProvenanceError(ValueError):
    """Artifacts whose provenance disagrees with each other or with the session."""


def provenance_of(name: str, artifact: Any) -> dict[str, Any]:
    """The provenance record of catalog artifact ``name``.

    Raises:
        ProvenanceError: the artifact has none (written before provenance was recorded).
    """
    record = provenance_record(artifact)
    if record is None:
        raise ProvenanceError(_unrecorded(name))
    return record


def _unrecorded(name: str) -> str:
    return (
        f"{name} has no provenance record: it was written before calib-pipeline recorded "
        "which training produced an artifact, so it cannot be checked against this session. "
        f"{RETRAIN}"
    )


def check_same_training(run: str, artifacts: Mapping[str, Any]) -> dict[str, Any]:
    """The provenance record shared by ``artifacts`` (catalog name -> loaded artifact), e.g.
    a run's logits and calibrators loaded in a notebook: each loaded at its own latest
    version, they may come from different trainings after a partial rerun.

    Returns:
        The common record (``run_id``, ``fingerprint``, ``config``, ...).

    Raises:
        ProvenanceError: an artifact without provenance, or artifacts of different trainings
            (naming each artifact's training).
    """
    mismatch = training_mismatch(run, artifacts)
    if mismatch is not None and mismatch.check is Check.UNRECORDED:
        raise ProvenanceError(_unrecorded(mismatch.subject))
    if mismatch is not None:
        lines = "\n".join(
            f"  {name}: trained by run {run_id} (configuration {fingerprint})"
            for (name,), (run_id, fingerprint), _ in mismatch.differences
        )
        raise ProvenanceError(
            f"{run}: its artifacts come from different trainings:\n{lines}\n{REBUILD}"
        )
    return provenance_record(next(iter(artifacts.values())))


def check_split_definition(
    data: ImageData, split: Mapping[str, list[int]], definition: Mapping[str, Any], split_name: str
) -> None:
    """Refuse a split that the session's ``splits.<split_name>`` does not make (a split file
    left from other split settings), before a run records that definition as its own.

    Raises:
        ProvenanceError: naming both hashes and how to make or pin the right split.
    """
    mismatch = split_mismatch(data, split, definition, split_name)
    if mismatch is not None:
        ((_, given, made),) = mismatch.differences
        dataset = artifact_name("split", split=split_name)
        raise ProvenanceError(
            f"{dataset} (hash {given}) is not the split this session's "
            f"splits.{split_name} = {dict(definition)} makes (hash {made}): it was made with other "
            "split settings. Make the split with these parameters first (kedro run "
            f"--pipelines=data_split), or load the version made with them "
            f"(--load-versions={dataset}:<version>)."
        )


def check_protocol_of(subject: str, record: Mapping[str, Any], run_info: Mapping[str, str]) -> None:
    """Refuse an artifact made under another protocol than the session's.

    Each protocol keeps its artifacts in its own folders, so such an artifact was copied or
    moved in from another protocol's folder (or written before artifact paths carried the
    protocol). A record written before protocols were recorded is compared by environment.

    Args:
        subject: what the message names (``ce.seed_0.checkpoint``).
        record: the artifact's provenance record.
        run_info: the session's ``run_info`` (``run_id``, ``env``, ``protocol``).

    Raises:
        ProvenanceError: naming the artifact, the run that trained it, both protocols (or
            environments) and what to do.
    """
    if protocol_mismatch(subject, record, run_info["protocol"], run_info["env"]) is None:
        return
    recorded, env = record.get("protocol"), record.get("env")
    made = (
        f"env {env!r} (written before protocols were recorded)"
        if recorded is None
        else f"protocol {recorded!r}, env {env!r}"
    )
    raise ProvenanceError(
        f"{subject}, trained by run {record['run_id']}: made under {made}, not under this "
        f"session's protocol {run_info['protocol']!r} (env {run_info['env']!r}). Each "
        "protocol keeps its artifacts in its own folders (data/06_models/<protocol>/...), so it "
        "was copied or moved here from another protocol's folder, and its results would mix "
        f"with this protocol's. Train it under this protocol (kedro run --env={run_info['env']} "
        f"--pipelines=<study>), or use it in a session of its own (kedro run --env={env})."
    )


def check_checkpoint_data(
    checkpoint: Mapping[str, Any],
    *,
    dataset: str,
    split_hash: str | None,
    run_info: Mapping[str, str],
) -> dict[str, Any]:
    """Refuse a checkpoint of another protocol than the session's, or trained on another
    dataset or split than the one a node is given.

    Args:
        checkpoint: the trained run.
        dataset: name of the dataset the node is given.
        split_hash: ``split_fingerprint`` of the split the node is given for the run's
            split name; None when the session defines no split of that name.
        run_info: the session's ``run_info`` (its protocol).

    Returns:
        The checkpoint's provenance record.

    Raises:
        ProvenanceError: naming the run, the recorded and the session's protocol, or the
            recorded and given dataset or split hash.
    """
    name = run_artifact("checkpoint", checkpoint["method"], checkpoint["seed"])
    record = provenance_of(name, checkpoint)
    check_protocol_of(name, record, run_info)
    mismatch = data_mismatch(name, record, dataset=dataset, split_hash=split_hash)
    if mismatch is not None:
        split = artifact_name("split", split=record["split"])
        raise ProvenanceError(
            f"{name} (trained by run {record['run_id']}) does not match the data it is given: "
            f"{'; '.join(_data_difference(record, d) for d in mismatch.differences)}. {RETRAIN} "
            f"To score it as trained, load the split it was trained on "
            f"(--load-versions={split}:<version>)."
        )
    return record


def _data_difference(record: Mapping[str, Any], difference: tuple) -> str:
    (setting,), trained, given = difference
    if setting == "dataset":
        return f"dataset {trained!r} when trained, {given!r} given"
    if given is None:
        return f"split {record['split']!r} is not defined in this session"
    return (
        f"split {record['split']!r} had hash {trained} when trained, the split "
        f"given has hash {given} (the split changed since training: its val part may "
        "hold the model's own training data)"
    )


def check_run(
    method: MethodSpec,
    seed: int,
    artifacts: Mapping[str, Any],
    *,
    dataset: Mapping[str, Any],
    model: Mapping[str, Any],
    training: Mapping[str, Any],
    splits: Mapping[str, Any],
    run_info: Mapping[str, str],
    shift: Mapping[str, Any] | None = None,
    calibrator_definitions: Mapping[str, Mapping[str, Any]] | None = None,
    history: Any = None,
) -> dict[str, Any]:
    """Refuse a run's artifacts unless they come from one training, trained under the
    session's protocol as the session's parameters say that (method, seed) is trained --
    and, where given, its shift logits made under the session's ``shift`` settings
    (:func:`check_shift_settings`), its fitted calibrators under the session's
    ``calibrator_definitions`` (:func:`check_calibrator_definitions`) and its ``history``
    by the same training configuration (:func:`check_history`).

    Args:
        method: the run's method.
        seed: the run's seed.
        artifacts: catalog name -> loaded artifact (logits, calibrators, shift logits, ...).
        dataset, model, training, splits: the session's parameters of those names.
        run_info: the session's ``run_info`` (its protocol).

    Returns:
        The artifacts' common provenance record.

    Raises:
        ProvenanceError: an artifact without provenance, artifacts of different trainings,
            of another protocol, or a training configuration the session does not have.
    """
    run = f"{method.key} seed {seed}"
    record = check_same_training(run, artifacts)
    check_protocol_of(f"{run}: {', '.join(artifacts)}", record, run_info)
    expected = run_configuration(
        method,
        seed=seed,
        dataset=dataset["name"],
        split_definition=splits[method.split],
        model_params=model,
        training_params=training,
    )
    mismatch = configuration_mismatch(run, record, expected)
    if mismatch is not None:
        raise ProvenanceError(_configuration_refusal(run, record, mismatch, method))
    shift_logits = artifacts.get(run_artifact("shift_logits", method.key, seed))
    if shift is not None and shift_logits is not None:
        check_shift_settings(run, shift_logits, shift)
    calibrators = artifacts.get(run_artifact("calibrators", method.key, seed))
    if calibrator_definitions is not None and calibrators is not None:
        check_calibrator_definitions(
            run, calibrators[FITTED_CALIBRATORS], calibrator_definitions, SHIFTED_VAL_SUFFIX
        )
    if history is not None:
        check_history(run, run_artifact("history", method.key, seed), history, record)
    return record


def check_history(run: str, name: str, history: Any, record: Mapping[str, Any]) -> None:
    """Refuse a training history (catalog artifact ``name``) of another training than the
    run's logits (whose provenance is ``record``): see
    :func:`~calib_pipeline.training.provenance_checks.history_mismatch`.

    Raises:
        ProvenanceError: a history without the fingerprint column, or of another
            configuration.
    """
    mismatch = history_mismatch(run, history, record)
    if mismatch is None:
        return
    if mismatch.check is Check.HISTORY_UNRECORDED:
        raise ProvenanceError(
            f"{name} has no fingerprint column: it was written before histories recorded the "
            f"training that made them. {RETRAIN}"
        )
    ((_, trained, _),) = mismatch.differences
    raise ProvenanceError(
        f"{run}: its history comes from a training of configuration {trained}, its logits "
        f"from configuration {record['fingerprint']} (run {record['run_id']}). {REBUILD}"
    )


def check_shift_settings(
    run: str, shift_logits: Mapping[str, Any], shift: Mapping[str, Any]
) -> None:
    """Refuse shift logits made under other ``shift`` settings than the session's (e.g.
    ``--params=shift.severities=[2]`` with a reporting-only run would report the old sets).

    Args:
        run: the run's name, for the message.
        shift_logits: the run's stored shift logits.
        shift: the session's ``shift`` parameters.

    Raises:
        ProvenanceError: naming each differing setting and how to remake the sets.
    """
    mismatch = shift_settings_mismatch(run, shift_logits.get(SHIFT_SETTINGS), shift)
    if mismatch is None:
        return
    if mismatch.check is Check.SHIFT_UNRECORDED:
        raise ProvenanceError(
            f"{run}: its shift logits do not record the shift settings that made them (written "
            "before they were recorded). Re-run the shift stage (`kedro run --pipelines=<study>`"
            "; trainings are reused)."
        )
    lines = "\n".join(
        f"  shift.{key}: {made!r} when the sets were made, {wanted!r} in this session"
        for (_, key), made, wanted in mismatch.differences
    )
    raise ProvenanceError(
        f"{run}: its shift logits were made under other shift settings:\n{lines}\nRe-run "
        "the shift stage with these parameters (`kedro run --pipelines=<study>`; trainings "
        "are reused), or run with the settings they were made with."
    )


def check_calibrator_definitions(
    run: str, fitted: Mapping[str, Any], definitions: Mapping[str, Mapping[str, Any]], suffix: str
) -> None:
    """Refuse fitted calibrators that the session's ``calibrators`` parameters no longer
    define as they were fitted (a reporting-only run after ``calibrators.<key>`` changed
    would otherwise score the old calibrator under the new definition's key).

    Args:
        run: the run's name, for the message.
        fitted: key -> fitted calibrator (the run's stored ones).
        definitions: key -> ``{"name", "params"}`` of the session, for the keys a study scores.
        suffix: the suffix of keys fitted on shifted validation sets (same definition).

    Raises:
        ProvenanceError: naming the key, both definitions and how to refit.
    """
    mismatch = calibrator_mismatch(run, fitted, definitions, suffix)
    if mismatch is None:
        return
    (((key,), was, now),) = mismatch.differences
    raise ProvenanceError(
        f"{run}: calibrator {key!r} was fitted as {was[0]}({was[1]}), but this "
        f"session's calibrators.{key.removesuffix(suffix)} is {now[0]}({now[1]}). Refit it: "
        "run the posthoc stage with these parameters (e.g. `kedro run --pipelines=<study>`; "
        "trainings are reused), or run with the definition it was fitted with."
    )


def _configuration_refusal(
    run: str, record: Mapping[str, Any], mismatch: Mismatch, method: MethodSpec
) -> str:
    """The message refusing a run trained with settings the session does not have."""
    lines = "\n".join(
        f"  {_parameter_name(path, method)}: {trained!r} when trained, {now!r} in this session"
        for path, trained, now in mismatch.differences
    )
    changed = {path[0] for path, _, _ in mismatch.differences}
    split_changed = bool(changed & {"split", "split_definition"})
    split_note = (
        "The split changed since training: this session's val part is not the one the model "
        "was validated on and may hold its own training data.\n"
    )
    return (
        f"{run}: its cached artifacts (trained by run {record['run_id']}, env {record['env']!r}) "
        f"were trained with settings this session does not have:\n{lines}\n"
        f"{split_note if split_changed else ''}{RETRAIN}"
    )


def _parameter_name(path: tuple[str, ...], method: MethodSpec) -> str:
    """A configuration key path as the parameter a user sets (``splits.standard.seed``)."""
    head, *rest = path
    prefix = {
        "dataset": ["dataset", "name"],
        "split_definition": ["splits", method.split],
        "split": ["methods", method.key, "split"],
        "objective": ["methods", method.key, "objective"],
        "meta_learner": ["methods", method.key, "meta_learner"],
        "params": ["methods", method.key, "params"],
    }.get(head, [head])
    return ".".join(map(str, [*prefix, *rest]))
