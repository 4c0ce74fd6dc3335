"""Nodes of the posthoc stage."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from calib_pipeline.calibration.methods import MethodSpec
from calib_pipeline.calibration.posthoc import build_calibrator
from calib_pipeline.pipelines.artifacts import run_artifact
from calib_pipeline.pipelines.provenance import check_run
from calib_pipeline.training.artifacts import (
    FITTED_CALIBRATORS,
    SHIFT_LOGITS_SETS,
    SHIFTED_VAL_SUFFIX,
    shifted_validation,
)

logger = logging.getLogger(__name__)


def fit_calibrators(
    logits: dict[str, Any],
    calibrators: dict[str, dict[str, Any]],
    dataset: dict[str, Any],
    model: dict[str, Any],
    training: dict[str, Any],
    splits: dict[str, Any],
    run_info: dict[str, str],
    shift_logits: dict[str, Any] | None = None,
    shift: dict[str, Any] | None = None,
    *,
    method: MethodSpec,
    seed: int,
    keys: Sequence[str],
) -> dict[str, Any]:
    """Fit the calibrators ``keys`` on the run's validation logits.

    Args:
        logits: the run's cached logits (``logits["val"]`` is used).
        calibrators: key -> ``{"name": registry name, "params": {...}}`` (the
            ``calibrators`` parameters).
        dataset, model, training, splits: the session's parameters; the run's artifacts
            must have been trained as they say.
        run_info: the session's identity; the run's artifacts must be of its protocol.
        shift_logits: the run's shifted-set logits; when they contain shifted validation
            sets (``shift.shifted_val``), every calibrator is fitted a second time on clean
            val pooled with them and stored as ``<key>@shifted_val``.
        shift: the session's ``shift`` parameters; shift logits made under other settings
            are refused.
        method: the run's method.
        seed: the run's seed.
        keys: the keys of ``calibrators`` to fit: those the studies that have the run
            evaluate (``Structure.run_calibrators``); the others are not fitted.

    Returns:
        ``{"provenance": the logits' record, "fitted": key -> fitted calibrator}``
        (picklable; what a calibrator learned is in ``learned()``).

    Raises:
        ProvenanceError: the logits and shift logits come from different trainings, from
            another protocol, or from a training the session's parameters do not describe.
        ValueError: a key of ``keys`` that ``calibrators`` lacks.
    """
    missing = [key for key in keys if key not in calibrators]
    if missing:
        raise ValueError(
            f"calibrator(s) {missing} are not in the calibrators parameters; defined: "
            f"{sorted(calibrators)}"
        )
    artifacts = {run_artifact("logits", method.key, seed): logits}
    if shift_logits is not None:
        artifacts[run_artifact("shift_logits", method.key, seed)] = shift_logits
    provenance = check_run(
        method,
        seed,
        artifacts,
        dataset=dataset,
        model=model,
        training=training,
        splits=splits,
        run_info=run_info,
        shift=shift,
    )
    fitting_sets = {"": logits["val"]}
    pooled = shifted_validation(logits, (shift_logits or {}).get(SHIFT_LOGITS_SETS))
    if pooled is not None:
        fitting_sets[SHIFTED_VAL_SUFFIX] = pooled
    fitted = _fit_each(fitting_sets, {name: calibrators[name] for name in keys}, f"{method.key} seed {seed}")
    return {"provenance": provenance, FITTED_CALIBRATORS: fitted}


def _fit_each(
    fitting_sets: dict[str, dict[str, Any]], definitions: dict[str, dict[str, Any]], run: str
) -> dict[str, Any]:
    """``<key><suffix>`` -> calibrator ``key`` fitted on the fitting set of ``suffix``."""
    fitted = {}
    for suffix, val in fitting_sets.items():
        for name, entry in definitions.items():
            key = f"{name}{suffix}"
            calibrator = build_calibrator(entry["name"], **(entry.get("params") or {}))
            fitted[key] = calibrator.fit(val["logits"], val["labels"])
            logger.info(
                "%s: %s learned %s%s",
                run,
                key,
                {k: v for k, v in calibrator.learned().items() if not isinstance(v, list)},
                "" if calibrator.converged else " (NOT converged)",
            )
    return fitted
