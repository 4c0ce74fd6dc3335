"""Nodes of the shift stage: the shifted sets of the ``shift`` parameters and their logits.

The suites, their labels and the plan live in :mod:`calib_pipeline.data.shift_suites`.
"""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any, Protocol

import torch

from calib_pipeline.data import ImageData
from calib_pipeline.data.shift_suites import (
    ShiftPlan,
    defining_settings,
    plan_shift_sets,
    predict_shift_sets,
)
from calib_pipeline.pipelines.provenance import check_checkpoint_data
from calib_pipeline.training.artifacts import SHIFT_LOGITS_SETS, SHIFT_SETTINGS
from calib_pipeline.training.code_dependencies import shift_logits_code
from calib_pipeline.training.engine import describe_device, resolve_device
from calib_pipeline.training.predict import checkpoint_predictor

logger = logging.getLogger(__name__)


class StoredShiftLogits(Protocol):
    """Every run's stored shift logits, as the catalog's ``stored_shift_logits`` hands them
    over (``kedro_datasets.StoredShiftLogits``)."""

    def newest(self, method: str, seed: int) -> dict[str, Any] | None: ...


def make_shift_sets(data: ImageData, splits: dict[str, Any], shift: dict[str, Any]) -> ShiftPlan:
    """The plan of shifted sets (docs/shift.md), shared by every run's logits node.

    Args:
        data: the dataset (its test part is corrupted).
        splits: the ``splits`` parameters (for ``shifted_val``: each split's val part).
        shift: the ``shift`` parameters.

    Returns:
        The :class:`ShiftPlan`.
    """
    return plan_shift_sets(data, splits, shift)


def compute_shift_logits(
    checkpoint: dict[str, Any],
    shift_sets: ShiftPlan,
    logits_params: dict[str, Any],
    run_info: dict[str, str],
    stored: StoredShiftLogits | None = None,
) -> dict[str, Any]:
    """Logits of one trained run on every shifted set of the plan -- or, when the run's
    newest stored version in ``stored`` was made from the same training, shift settings,
    sets and code, that version (under this session's provenance): an interrupted or
    repeated study does not predict its shifted sets again (hours on a CPU). The console
    says which.

    Args:
        checkpoint: the trained run.
        shift_sets: the plan of :func:`make_shift_sets`.
        logits_params: ``{"device": "auto", "batch_size": int | None, ...}``.
        run_info: the session's identity; the checkpoint must be of its protocol.
        stored: every run's stored shift logits (None: compute).

    Returns:
        ``{"provenance": the checkpoint's, "settings": the shift settings that define the
        sets (``defining_settings``), "sets": spec key -> logits, labels and the set's
        identity (see ``predict_shift_sets``), "weights": the digest of the network they
        came from (:func:`weights_digest`), "code": the units they depend on
        (``shift_logits_code``), "execution": where they were predicted}``; the stored
        version with this session's provenance and ``"reused": True`` when it is reused.

    Raises:
        ProvenanceError: the checkpoint belongs to another protocol, or was trained on
            another dataset, or on another split than the session's split parameters make
            (shifted val sets derive from it).
    """
    split = checkpoint["config"]["split"]
    provenance = check_checkpoint_data(
        checkpoint,
        dataset=shift_sets.dataset,
        split_hash=shift_sets.split_hashes.get(split),
        run_info=run_info,
    )
    identity, run = _identity(checkpoint, shift_sets, provenance), _run_name(checkpoint)
    earlier = stored.newest(checkpoint["method"], checkpoint["seed"]) if stored else None
    reused = _reused(earlier, identity, run)
    if reused is not None:
        # this session's provenance: the run's artifacts all name the training they belong to
        return {**reused, "provenance": provenance, "reused": True}
    device = logits_params.get("device", "auto")
    predict = checkpoint_predictor(checkpoint, device, logits_params.get("batch_size"))
    sets = predict_shift_sets(predict, shift_sets, split)
    logger.info("%s: logits on %d shifted set(s)", run, len(sets))
    return {
        "provenance": provenance,
        SHIFT_SETTINGS: identity[SHIFT_SETTINGS],
        SHIFT_LOGITS_SETS: sets,
        "weights": identity["weights"],
        "code": identity["code"],
        "execution": describe_device(resolve_device(device)),
    }


def _run_name(checkpoint: dict[str, Any]) -> str:
    return f"{checkpoint['method']} seed {checkpoint['seed']}"


def _identity(
    checkpoint: dict[str, Any], plan: ShiftPlan, provenance: dict[str, Any]
) -> dict[str, Any]:
    """What a run's shifted-set logits are made from: its training (fingerprint and
    weights), the shift settings, the sets and the code (:func:`shift_logits_code`)."""
    return {
        "fingerprint": provenance.get("fingerprint"),
        "weights": weights_digest(checkpoint),
        SHIFT_SETTINGS: defining_settings(plan.settings),
        "keys": sorted(_expected_keys(plan, checkpoint["config"]["split"])),
        "code": shift_logits_code(),
    }


def _reused(
    earlier: dict[str, Any] | None, identity: dict[str, Any], run: str
) -> dict[str, Any] | None:
    """``earlier`` when it is what this run would compute (logged), else None (logged with
    the reason when there was one stored)."""
    why_not = _why_not_reused(earlier, identity)
    if why_not is None:
        logger.info(
            "%s: logits on %d shifted set(s) reused (computed earlier)", run, len(identity["keys"])
        )
        return earlier
    if earlier is not None:
        logger.info("%s: shifted-set logits computed again: %s", run, why_not)
    return None


def _expected_keys(plan: ShiftPlan, split: str) -> set[str]:
    """The set keys ``predict_shift_sets`` returns for a run on ``split``."""
    keys = {s.key if s.split == "test" else f"val/{s.key}" for s in plan.sets_for(split)}
    return keys | {f"skipped/{label}" for label in plan.skipped}


def _why_not_reused(earlier: dict[str, Any] | None, made: dict[str, Any]) -> str | None:
    """None when ``earlier`` stored logits are what this run would compute; else the reason."""
    if earlier is None:
        return "none stored"
    fingerprint = (earlier.get("provenance") or {}).get("fingerprint")
    if fingerprint != made["fingerprint"] or earlier.get("weights") != made["weights"]:
        return "the stored ones are of another training of the run"
    if earlier.get(SHIFT_SETTINGS) != made[SHIFT_SETTINGS]:
        return "the shift settings changed"
    if sorted(earlier.get(SHIFT_LOGITS_SETS) or {}) != made["keys"]:
        return "the stored sets are not the plan's"
    old_code = earlier.get("code")
    if not isinstance(old_code, dict):
        return "the stored ones do not record the code they were made by"
    changed = sorted(
        u for u in set(old_code) | set(made["code"]) if old_code.get(u) != made["code"].get(u)
    )
    if changed:
        return f"the code they depend on changed ({', '.join(changed)})"
    return None


def weights_digest(checkpoint: dict[str, Any]) -> str:
    """A digest of the network a checkpoint holds -- architecture, input normalisation and
    every weight's name, shape, dtype and bytes: two stored logits of one run came from the
    same network exactly when their digests agree (a run's ``run_id`` names the session that
    last stored it, which a reused training changes)."""
    digest = hashlib.sha256()
    head = {k: checkpoint.get(k) for k in ("architecture", "normalization")}
    digest.update(json.dumps(head, sort_keys=True, default=str).encode())
    for name, tensor in sorted(checkpoint["state_dict"].items()):
        digest.update(f"{name}|{tuple(tensor.shape)}|{tensor.dtype}".encode())
        digest.update(
            tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes()
        )
    return digest.hexdigest()[:16]
