"""Nodes of the shift stage: the shifted sets of the ``shift`` parameters and their logits.

The suites, their labels and the plan live in :mod:`calib_pipeline.data.shift_suites`.
"""

from __future__ import annotations

import logging
from typing import Any

from calib_pipeline.data import ImageData
from calib_pipeline.data.shift_suites import (
    ShiftPlan,
    defining_settings,
    plan_shift_sets,
    predict_shift_sets,
)
from calib_pipeline.pipelines.provenance import check_checkpoint_data
from calib_pipeline.training.artifacts import SHIFT_LOGITS_SETS, SHIFT_SETTINGS
from calib_pipeline.training.engine import describe_device, resolve_device
from calib_pipeline.training.predict import checkpoint_predictor

logger = logging.getLogger(__name__)


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
) -> dict[str, Any]:
    """Logits of one trained run on every shifted set of the plan.

    Args:
        checkpoint: the trained run.
        shift_sets: the plan of :func:`make_shift_sets`.
        logits_params: ``{"device": "auto", ...}``.
        run_info: the session's identity; the checkpoint must be of its protocol.

    Returns:
        ``{"provenance": the checkpoint's, "settings": the shift settings that define the
        sets (``defining_settings``), "sets": spec key -> logits, labels and the set's
        identity (see ``predict_shift_sets``), "execution": where they were predicted}``.

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
    device = logits_params.get("device", "auto")
    predict = checkpoint_predictor(checkpoint, device)
    sets = predict_shift_sets(predict, shift_sets, split)
    run = f"{checkpoint['method']} seed {checkpoint['seed']}"
    logger.info("%s: logits on %d shifted set(s)", run, len(sets))
    settings = defining_settings(shift_sets.settings)
    return {
        "provenance": provenance,
        SHIFT_SETTINGS: settings,
        SHIFT_LOGITS_SETS: sets,
        "execution": describe_device(resolve_device(device)),
    }
