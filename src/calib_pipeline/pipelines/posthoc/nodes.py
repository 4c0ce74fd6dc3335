"""Nodes of the posthoc stage."""

from __future__ import annotations

import logging
from typing import Any

from calib_pipeline.calibration.posthoc import build_calibrator

logger = logging.getLogger(__name__)


def fit_calibrators(logits: dict[str, Any], calibrators: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Fit every configured calibrator on the run's validation logits.

    Args:
        logits: the run's cached logits (``logits["val"]`` is used).
        calibrators: key -> ``{"name": registry name, "params": {...}}``.

    Returns:
        key -> fitted calibrator (picklable; what it learned is in ``learned()``).
    """
    val = logits["val"]
    fitted = {}
    for key, entry in calibrators.items():
        calibrator = build_calibrator(entry["name"], **(entry.get("params") or {}))
        fitted[key] = calibrator.fit(val["logits"], val["labels"])
        logger.info(
            "%s seed %s: %s learned %s%s",
            logits["method"],
            logits["seed"],
            key,
            {k: v for k, v in calibrator.learned().items() if not isinstance(v, list)},
            "" if calibrator.converged else " (NOT converged)",
        )
    return fitted
