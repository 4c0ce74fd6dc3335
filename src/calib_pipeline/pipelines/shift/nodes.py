"""Nodes of the shift stage."""

from __future__ import annotations

import logging
from typing import Any

from calib_pipeline.data import ImageData, to_float
from calib_pipeline.data.corruptions import corrupt
from calib_pipeline.pipelines.logits.nodes import checkpoint_predictor

logger = logging.getLogger(__name__)


def make_shift_sets(data: ImageData, shift: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Corrupted copies of the official test set, one per (corruption, severity).

    Args:
        data: the dataset.
        shift: ``{"seed": int, "corruptions": [names], "severities": [1..5]}``.

    Returns:
        ``"<corruption>/<severity>"`` -> ``{"images", "labels", "shift", "severity", "source"}``
        where ``source`` is ``"generated"`` (never passed off as an official benchmark).
    """
    images = to_float(data.test_images)
    sets: dict[str, dict[str, Any]] = {}
    for name in shift.get("corruptions", []):
        for severity in shift.get("severities", [1, 2, 3, 4, 5]):
            sets[f"{name}/{severity}"] = {
                "images": corrupt(images, name, int(severity), seed=int(shift.get("seed", 0))),
                "labels": data.test_labels,
                "shift": name,
                "severity": int(severity),
                "source": "generated",
            }
    logger.info("generated %d shifted test sets of %d images", len(sets), len(images))
    return sets


def compute_shift_logits(
    checkpoint: dict[str, Any], shift_sets: dict[str, dict[str, Any]], logits_params: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """Logits of a trained run on every shifted set (same keys as ``shift_sets``)."""
    predict = checkpoint_predictor(checkpoint, logits_params.get("device", "auto"))
    out = {}
    for key, entry in shift_sets.items():
        logits, _ = predict(entry["images"])
        out[key] = {
            "logits": logits,
            "labels": entry["labels"].clone(),
            "shift": entry["shift"],
            "severity": entry["severity"],
            "source": entry["source"],
        }
    return out
