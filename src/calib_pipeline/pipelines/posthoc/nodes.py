"""Nodes of the posthoc stage."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from calib_pipeline.calibration.methods import MethodSpec
from calib_pipeline.pipelines.artifacts import run_artifact
from calib_pipeline.pipelines.provenance import check_run
from calib_pipeline.training.artifacts import (
    FITTED_CALIBRATORS,
    SHIFT_LOGITS_SETS,
    SHIFTED_VAL_SUFFIX,
    fit_run_calibrators,
    selected_calibrators,
)


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
        dataset, model, training, splits, run_info: the session's parameters and identity;
            the run's artifacts must have been trained as they say, under its protocol.
        shift_logits: the run's shifted-set logits; when they contain shifted validation
            sets (``shift.shifted_val``), every calibrator is fitted a second time on clean
            val pooled with them and stored as ``<key>@shifted_val``.
        shift: the session's ``shift`` parameters; shift logits made under others are refused.
        method, seed: the run's method and seed.
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
    definitions = selected_calibrators(calibrators, keys)
    provenance = check_run(
        method,
        seed,
        _named(method.key, seed, logits, shift_logits),
        dataset=dataset,
        model=model,
        training=training,
        splits=splits,
        run_info=run_info,
        shift=shift,
    )
    fitted = fit_run_calibrators(
        logits,
        definitions,
        (shift_logits or {}).get(SHIFT_LOGITS_SETS),
        shifted_suffix=SHIFTED_VAL_SUFFIX,
        description=f"{method.key} seed {seed}",
    )
    return {"provenance": provenance, FITTED_CALIBRATORS: fitted}


def _named(
    method: str, seed: int, logits: dict[str, Any], shift_logits: dict[str, Any] | None
) -> dict[str, Any]:
    """The run's artifacts by catalog name, as the provenance check names them."""
    artifacts = {run_artifact("logits", method, seed): logits}
    if shift_logits is not None:
        artifacts[run_artifact("shift_logits", method, seed)] = shift_logits
    return artifacts
