"""Checks that refuse artifacts whose provenance disagrees with the session (docs/reliability.md).

The pipelines' nodes call them; they are plain functions, usable from a notebook too.

The training node records a provenance record (:func:`~calib_pipeline.training.provenance.
training_provenance`) in its checkpoint; logits, shifted-set logits and fitted calibrators
copy the record of what they derive from. The checks here compare those records with the
data a node is given, with each other, and with the run configuration the session's
parameters give (built by the same :func:`~calib_pipeline.training.provenance.
run_configuration` the training node uses). Each refusal names the run, what differs and
what to do.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from calib_pipeline.calibration.methods import MethodSpec
from calib_pipeline.calibration.posthoc import build_calibrator
from calib_pipeline.data import ImageData
from calib_pipeline.data.shift_suites import defining_settings
from calib_pipeline.data.splits import split_dataset, split_fingerprint
from calib_pipeline.training.provenance import (
    Difference,
    configuration_differences,
    run_configuration,
    run_name,
)

# A run's keyed collections hold their members under these keys, beside "provenance":
# shifted-set logits (spec key -> logits) and fitted calibrators (key -> calibrator).
SHIFT_LOGITS_SETS = "sets"
SHIFT_SETTINGS = "settings"  # beside them: the shift settings that defined the sets
# Calibrators fitted again on clean + shifted validation sets are stored as "<key>@shifted_val".
SHIFTED_VAL_SUFFIX = "@shifted_val"
FITTED_CALIBRATORS = "fitted"
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
    record = artifact.get("provenance") if isinstance(artifact, Mapping) else None
    if record is None:
        raise ProvenanceError(
            f"{name} has no provenance record: it was written before calib-pipeline recorded "
            "which training produced an artifact, so it cannot be checked against this session. "
            f"{RETRAIN}"
        )
    return record


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
    records = {name: provenance_of(name, artifact) for name, artifact in artifacts.items()}
    return _one_training(run, records)


def check_split_definition(
    data: ImageData, split: Mapping[str, list[int]], definition: Mapping[str, Any], split_name: str
) -> None:
    """Refuse a split that the session's ``splits.<split_name>`` does not make (a split file
    left from other split settings), before a run records that definition as its own.

    Raises:
        ProvenanceError: naming both hashes and how to make or pin the right split.
    """
    given = split_fingerprint(split)
    made = split_fingerprint(split_dataset(data, definition))
    if given != made:
        raise ProvenanceError(
            f"split_{split_name} (hash {given}) is not the split this session's "
            f"splits.{split_name} = {dict(definition)} makes (hash {made}): it was made with other "
            "split settings. Make the split with these parameters first (kedro run "
            f"--pipelines=data_split), or load the version made with them "
            f"(--load-versions=split_{split_name}:<version>)."
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
    recorded = record.get("protocol")
    env = record.get("env")
    if recorded == run_info["protocol"] or (recorded is None and env == run_info["env"]):
        return
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
        split_hash: :func:`split_fingerprint` of the split the node is given for the run's
            split name; None when the session defines no split of that name.
        run_info: the session's ``run_info`` (its protocol).

    Returns:
        The checkpoint's provenance record.

    Raises:
        ProvenanceError: naming the run, the recorded and the session's protocol, or the
            recorded and given dataset or split hash.
    """
    name = f"{run_name(checkpoint['method'], checkpoint['seed'])}.checkpoint"
    record = provenance_of(name, checkpoint)
    check_protocol_of(name, record, run_info)
    differences = []
    if record["dataset"] != dataset:
        differences.append(f"dataset {record['dataset']!r} when trained, {dataset!r} given")
    if split_hash is None:
        differences.append(f"split {record['split']!r} is not defined in this session")
    elif record["split_hash"] != split_hash:
        differences.append(
            f"split {record['split']!r} had hash {record['split_hash']} when trained, the split "
            f"given has hash {split_hash} (the split changed since training: its val part may "
            "hold the model's own training data)"
        )
    if differences:
        raise ProvenanceError(
            f"{name} (trained by run {record['run_id']}) does not match the data it is given: "
            f"{'; '.join(differences)}. {RETRAIN} To score it as trained, load the split it was "
            f"trained on (--load-versions=split_{record['split']}:<version>)."
        )
    return record


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
    differences = configuration_differences(record["config"], expected)
    if differences:
        raise ProvenanceError(_configuration_refusal(run, record, differences, method))
    prefix = run_name(method.key, seed)
    shift_logits = artifacts.get(f"{prefix}.shift_logits")
    if shift is not None and shift_logits is not None:
        check_shift_settings(run, shift_logits, shift)
    calibrators = artifacts.get(f"{prefix}.calibrators")
    if calibrator_definitions is not None and calibrators is not None:
        check_calibrator_definitions(
            run, calibrators[FITTED_CALIBRATORS], calibrator_definitions, SHIFTED_VAL_SUFFIX
        )
    if history is not None:
        check_history(run, f"{prefix}.history", history, record)
    return record


# Columns of a training history that say which training wrote it (dropped before reports).
HISTORY_PROVENANCE = ("run_id", "fingerprint")


def check_history(run: str, name: str, history: Any, record: Mapping[str, Any]) -> None:
    """Refuse a training history of another training than the run's logits.

    The history's ``fingerprint`` column is its training's configuration fingerprint; the
    logits' record holds theirs. A training reused from its completed resume state by a
    later session writes a new history under that session's ``run_id`` but the same
    fingerprint -- the same training, accepted; a run retrained under other settings (or
    other code) alone, or a training killed between its checkpoint and its history, is not.

    Raises:
        ProvenanceError: a history without the column, or of another configuration.
    """
    if "fingerprint" not in getattr(history, "columns", ()):
        raise ProvenanceError(
            f"{name} has no fingerprint column: it was written before histories recorded the "
            f"training that made them. {RETRAIN}"
        )
    trained = sorted(set(history["fingerprint"]))
    if trained != [record["fingerprint"]]:
        raise ProvenanceError(
            f"{run}: its history comes from a training of configuration {trained}, its logits "
            f"from configuration {record['fingerprint']} (run {record['run_id']}). {REBUILD}"
        )


def check_shift_settings(run: str, shift_logits: Mapping[str, Any], shift: Mapping[str, Any]) -> None:
    """Refuse shift logits made under other ``shift`` settings than the session's (e.g.
    ``--params=shift.severities=[2]`` with a reporting-only run would report the old sets).

    Args:
        run: the run's name, for the message.
        shift_logits: the run's stored shift logits.
        shift: the session's ``shift`` parameters.

    Raises:
        ProvenanceError: naming each differing setting and how to remake the sets.
    """
    made = shift_logits.get(SHIFT_SETTINGS)
    wanted = defining_settings(dict(shift))
    if made is None:
        raise ProvenanceError(
            f"{run}: its shift logits do not record the shift settings that made them (written "
            "before they were recorded). Re-run the shift stage (`kedro run --pipelines=<study>`"
            "; trainings are reused)."
        )
    differing = [k for k in wanted if _plain({k: made.get(k)}) != _plain({k: wanted[k]})]
    if differing:
        lines = "\n".join(
            f"  shift.{k}: {made.get(k)!r} when the sets were made, {wanted[k]!r} in this session"
            for k in differing
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
    for key, calibrator in fitted.items():
        base = key.removesuffix(suffix)
        if base not in definitions:
            continue
        entry = definitions[base]
        wanted = build_calibrator(entry["name"], **(entry.get("params") or {}))
        was = (calibrator.name, _plain(calibrator.build_arguments()))
        now = (wanted.name, _plain(wanted.build_arguments()))
        if was != now:
            raise ProvenanceError(
                f"{run}: calibrator {key!r} was fitted as {was[0]}({was[1]}), but this "
                f"session's calibrators.{base} is {now[0]}({now[1]}). Refit it: run the "
                "posthoc stage with these parameters (e.g. `kedro run --pipelines=<study>`; "
                "trainings are reused), or run with the definition it was fitted with."
            )


def _plain(arguments: Mapping[str, Any]) -> str:
    """Arguments as sorted JSON, so a tuple and the list it was stored as compare equal."""
    return json.dumps(arguments, sort_keys=True, default=str)


def _configuration_refusal(
    run: str,
    record: Mapping[str, Any],
    differences: list[Difference],
    method: MethodSpec,
) -> str:
    """The message refusing a run trained with settings the session does not have."""
    lines = "\n".join(
        f"  {_parameter_name(path, method)}: {trained!r} when trained, {now!r} in this session"
        for path, trained, now in differences
    )
    split_changed = any(path[0] in ("split", "split_definition") for path, _, _ in differences)
    split_note = (
        "The split changed since training: this session's val part is not the one the model "
        "was validated on and may hold its own training data.\n"
    )
    return (
        f"{run}: its cached artifacts (trained by run {record['run_id']}, env {record['env']!r}) "
        f"were trained with settings this session does not have:\n{lines}\n"
        f"{split_note if split_changed else ''}{RETRAIN}"
    )


def _one_training(run: str, records: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """The one training every record names; refuses records of different trainings."""
    trainings = {name: (r["run_id"], r["fingerprint"]) for name, r in records.items()}
    if len(set(trainings.values())) > 1:
        lines = "\n".join(
            f"  {name}: trained by run {run_id} (configuration {fingerprint})"
            for name, (run_id, fingerprint) in trainings.items()
        )
        raise ProvenanceError(
            f"{run}: its artifacts come from different trainings:\n{lines}\n{REBUILD}"
        )
    return next(iter(records.values()))


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
