"""Nodes of the posthoc stage."""

from __future__ import annotations

import logging
from typing import Any

import torch

from calib_pipeline.calibration.posthoc import build_calibrator

logger = logging.getLogger(__name__)


SHIFTED_VAL_SUFFIX = "@shifted_val"


def shifted_validation(logits: dict[str, Any], shift_logits: dict[str, Any] | None) -> dict[str, Any] | None:
    """Clean val pooled with every shifted val set of the run (``split == "val"``), or None."""
    shifted = [e for e in (shift_logits or {}).values() if e.get("split") == "val" and "logits" in e]
    if not shifted:
        return None
    return {
        "logits": torch.cat([logits["val"]["logits"], *(e["logits"] for e in shifted)]),
        "labels": torch.cat([logits["val"]["labels"], *(e["labels"] for e in shifted)]),
    }


def fit_calibrators(
    logits: dict[str, Any],
    calibrators: dict[str, dict[str, Any]],
    shift_logits: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Fit every configured calibrator on the run's validation logits.

    Args:
        logits: the run's cached logits (``logits["val"]`` is used).
        calibrators: key -> ``{"name": registry name, "params": {...}}``.
        shift_logits: the run's shifted-set logits; when they contain shifted validation
            sets (``shift.shifted_val``), every calibrator is fitted a second time on clean
            val pooled with them and stored as ``<key>@shifted_val``.

    Returns:
        key -> fitted calibrator (picklable; what it learned is in ``learned()``).
    """
    fitting_sets = {"": logits["val"]}
    pooled = shifted_validation(logits, shift_logits)
    if pooled is not None:
        fitting_sets[SHIFTED_VAL_SUFFIX] = pooled
    fitted = {}
    for suffix, val in fitting_sets.items():
        for name, entry in calibrators.items():
            key = f"{name}{suffix}"
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
