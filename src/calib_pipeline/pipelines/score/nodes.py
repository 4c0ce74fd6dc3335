"""Nodes of the score pipeline: unpack parameters, call :mod:`calib_pipeline.reports.scoring`.

The predictions file is read by the catalog (``kedro_datasets.PredictionsDataset``, its path
from ``--params=predictions.path=...``), not here: nodes do no file I/O.
"""

from __future__ import annotations

from typing import Any

import matplotlib

# Report nodes draw figures in worker processes without a display.
matplotlib.use("Agg")

import pandas as pd

from calib_pipeline.data.predictions import PredictionsFile
from calib_pipeline.reports.registry import build_report
from calib_pipeline.reports.scoring import fit_calibrators, predictions_results, score_predictions


def _bin_counts(evaluation: dict[str, Any]) -> tuple[int, list[int]]:
    """``n_bins`` and the bin counts of the reliability diagrams (``reliability_bins``)."""
    n_bins = int(evaluation.get("n_bins", 15))
    return n_bins, [int(b) for b in evaluation.get("reliability_bins") or [n_bins]]


def fit(
    predictions: PredictionsFile, calibrators: dict[str, Any], *, keys: list[str]
) -> dict[str, Any]:
    """The calibrators ``keys`` of the ``calibrators`` parameters, fitted on val.

    Returns:
        ``{"provenance": the file's record, "fitted": key -> calibrator}``.
    """
    fitted = fit_calibrators(predictions, {key: calibrators[key] for key in keys})
    return {"provenance": predictions.provenance(), "fitted": fitted}


def evaluate(
    predictions: PredictionsFile,
    calibrators: dict[str, Any],
    evaluation: dict[str, Any],
    *,
    name: str,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The tidy metrics table (val and test, every calibrator) and the test reliability bins.

    Raises:
        ValueError: the calibrators were fitted on another file.
    """
    predictions.check_provenance(calibrators["provenance"])
    n_bins, reliability_bins = _bin_counts(evaluation)
    return score_predictions(
        predictions,
        calibrators["fitted"],
        name=name,
        n_bins=n_bins,
        reliability_bin_counts=tuple(sorted({n_bins, *reliability_bins})),
    )


def report(
    metrics: pd.DataFrame,
    bins: pd.DataFrame,
    calibrators: dict[str, Any],
    evaluation: dict[str, Any],
    *,
    report: str,
) -> dict[str, Any]:
    """Registered report ``report`` (``summary`` or ``reliability``) of the scored file."""
    results = predictions_results(metrics, bins, calibrators["fitted"])
    options = {"n_bins": _bin_counts(evaluation)[1]} if report == "reliability" else {}
    return build_report(report, results, **options)
