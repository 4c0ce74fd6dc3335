"""Where artifacts' provenance disagrees with each other or with the settings they are used
under, as data (docs/reliability.md, "Provenance").

The training node records a provenance record (:func:`~calib_pipeline.training.provenance.
training_provenance`) in its checkpoint; logits, shifted-set logits and fitted calibrators
copy the record of what they derive from. Each function here compares such records with
the data or settings it is given and returns what differs as a :class:`Mismatch` (None
when nothing does); it raises nothing and names no file or command. The pipelines turn a
mismatch into the refusal users see (``calib_pipeline.pipelines.provenance``).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from calib_pipeline.calibration.posthoc import build_calibrator
from calib_pipeline.data import ImageData
from calib_pipeline.data.shift_suites import defining_settings
from calib_pipeline.data.splits import split_dataset, split_fingerprint
from calib_pipeline.training.provenance import Difference, configuration_differences


class Check(enum.Enum):
    """What a mismatch was found by."""

    UNRECORDED = "an artifact has no provenance record"
    TRAININGS = "artifacts come from different trainings"
    SPLIT = "a split is not the one its definition makes"
    PROTOCOL = "an artifact was made under another protocol"
    DATA = "a checkpoint was trained on other data than it is given"
    CONFIGURATION = "a run was trained with other settings"
    HISTORY_UNRECORDED = "a history does not record its training"
    HISTORY = "a history comes from another training"
    SHIFT_UNRECORDED = "shift logits do not record their shift settings"
    SHIFT = "shift logits were made under other shift settings"
    CALIBRATOR = "a calibrator was fitted under another definition"


@dataclass(frozen=True)
class Mismatch:
    """One way artifacts disagree with each other or with the settings they are used under.

    Attributes:
        check: what found it.
        subject: the artifact, run or split concerned, as the caller named it.
        differences: (setting path, found, expected) per differing setting: for
            ``TRAININGS`` each artifact's ``(run_id, fingerprint)`` against the first's.
        record: the provenance record concerned, where there is one.
    """

    check: Check
    subject: str
    differences: tuple[Difference, ...] = ()
    record: Mapping[str, Any] | None = None


def provenance_record(artifact: Any) -> dict[str, Any] | None:
    """The provenance record an artifact carries; None when it was written before
    provenance was recorded."""
    return artifact.get("provenance") if isinstance(artifact, Mapping) else None


def training_mismatch(subject: str, artifacts: Mapping[str, Any]) -> Mismatch | None:
    """An artifact without a record (the first one, by name), or artifacts (name -> loaded
    artifact, e.g. a run's logits and calibrators) of different trainings."""
    records = {name: provenance_record(artifact) for name, artifact in artifacts.items()}
    unrecorded = next((name for name, record in records.items() if record is None), None)
    if unrecorded is not None:
        return Mismatch(Check.UNRECORDED, unrecorded)
    trainings = {name: (r["run_id"], r["fingerprint"]) for name, r in records.items()}
    first = next(iter(trainings.values()))
    if len(set(trainings.values())) > 1:
        differences = tuple(((name,), training, first) for name, training in trainings.items())
        return Mismatch(Check.TRAININGS, subject, differences)
    return None


def split_mismatch(
    data: ImageData, split: Mapping[str, list[int]], definition: Mapping[str, Any], split_name: str
) -> Mismatch | None:
    """A split that ``definition`` does not make from ``data``: its hash, found and made."""
    given = split_fingerprint(split)
    made = split_fingerprint(split_dataset(data, definition))
    return None if given == made else Mismatch(Check.SPLIT, split_name, ((("hash",), given, made),))


def protocol_mismatch(
    subject: str, record: Mapping[str, Any], protocol: str, env: str
) -> Mismatch | None:
    """An artifact made under another protocol than ``protocol``; a record written before
    protocols were recorded is compared by environment with ``env``."""
    recorded = record.get("protocol")
    if recorded == protocol or (recorded is None and record.get("env") == env):
        return None
    found = (
        (("env",), record.get("env"), env)
        if recorded is None
        else (("protocol",), recorded, protocol)
    )
    return Mismatch(Check.PROTOCOL, subject, (found,), record)


def data_mismatch(
    subject: str, record: Mapping[str, Any], *, dataset: str, split_hash: str | None
) -> Mismatch | None:
    """A checkpoint (its record) trained on another dataset than ``dataset``, or on another
    split than the one of hash ``split_hash`` (None: no split of its name is given)."""
    differences = []
    if record["dataset"] != dataset:
        differences.append((("dataset",), record["dataset"], dataset))
    if split_hash is None or record["split_hash"] != split_hash:
        differences.append((("split_hash",), record["split_hash"], split_hash))
    return Mismatch(Check.DATA, subject, tuple(differences), record) if differences else None


def configuration_mismatch(
    subject: str, record: Mapping[str, Any], expected: Mapping[str, Any]
) -> Mismatch | None:
    """A run trained with another configuration than ``expected``
    (:func:`~calib_pipeline.training.provenance.configuration_differences`)."""
    differences = configuration_differences(record["config"], expected)
    if not differences:
        return None
    return Mismatch(Check.CONFIGURATION, subject, tuple(differences), record)


def history_mismatch(subject: str, history: Any, record: Mapping[str, Any]) -> Mismatch | None:
    """A training history of another training than the one of ``record`` (a run's logits).

    The history's ``fingerprint`` column is its training's configuration fingerprint. A
    training reused from its completed resume state by a later session writes a new history
    under that session's ``run_id`` but the same fingerprint -- the same training, accepted;
    a run retrained under other settings (or other code) alone, or a training killed between
    its checkpoint and its history, is not.
    """
    if "fingerprint" not in getattr(history, "columns", ()):
        return Mismatch(Check.HISTORY_UNRECORDED, subject)
    trained = sorted(set(history["fingerprint"]))
    if trained == [record["fingerprint"]]:
        return None
    difference = (("fingerprint",), trained, record["fingerprint"])
    return Mismatch(Check.HISTORY, subject, (difference,), record)


def shift_settings_mismatch(
    subject: str, made: Mapping[str, Any] | None, shift: Mapping[str, Any]
) -> Mismatch | None:
    """Shifted sets made under other settings (``made``, None when not recorded) than the
    ``shift`` settings, compared on those that define the sets."""
    if made is None:
        return Mismatch(Check.SHIFT_UNRECORDED, subject)
    wanted = defining_settings(dict(shift))
    differences = tuple(
        (("shift", key), made.get(key), wanted[key])
        for key in wanted
        if _plain({key: made.get(key)}) != _plain({key: wanted[key]})
    )
    return Mismatch(Check.SHIFT, subject, differences) if differences else None


def calibrator_mismatch(
    subject: str,
    fitted: Mapping[str, Any],
    definitions: Mapping[str, Mapping[str, Any]],
    suffix: str,
) -> Mismatch | None:
    """The first fitted calibrator whose definition in ``definitions`` (key ->
    ``{"name", "params"}``) builds another calibrator than the one fitted; keys ending in
    ``suffix`` (fitted on other data, same definition) are compared with their base key's.
    The difference is ``((key,), (name, arguments) fitted, (name, arguments) defined)``."""
    for key, calibrator in fitted.items():
        base = key.removesuffix(suffix)
        if base not in definitions:
            continue
        entry = definitions[base]
        wanted = build_calibrator(entry["name"], **(entry.get("params") or {}))
        was = (calibrator.name, _plain(calibrator.build_arguments()))
        now = (wanted.name, _plain(wanted.build_arguments()))
        if was != now:
            return Mismatch(Check.CALIBRATOR, subject, (((key,), was, now),))
    return None


def _plain(arguments: Mapping[str, Any]) -> str:
    """Arguments as sorted JSON, so a tuple and the list it was stored as compare equal."""
    return json.dumps(arguments, sort_keys=True, default=str)
