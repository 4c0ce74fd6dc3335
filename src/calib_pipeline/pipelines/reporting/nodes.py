"""Nodes of the reporting stage: unpack the catalog's inputs, call :mod:`calib_pipeline.reports`.

``evaluate_study`` scores a study's cached logits into the tidy metrics table
(:func:`~calib_pipeline.reports.evaluation.evaluate_runs`); ``run_report`` builds one
registered report from that table, the per-bin reliability table and whatever per-run
artifacts the report needs.
"""

from __future__ import annotations

from typing import Any

import matplotlib

# Report nodes draw figures in worker processes without a display.
matplotlib.use("Agg")

import pandas as pd

from calib_pipeline.reports.evaluation import SHIFT_METRICS, evaluate_runs
from calib_pipeline.reports.registry import RUN_ARTIFACTS, StudyResults, build_report


def evaluate_study(
    dataset: dict[str, Any],
    evaluation: dict[str, Any],
    *,
    study: str,
    run_keys: dict[str, tuple[str, int]],
    labels: dict[str, str],
    calibrators: list[str],
    report_bins: tuple[int, ...] = (),
    **artifacts: Any,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Score a study's cached artifacts.

    Args:
        dataset: the ``dataset`` parameters (its ``name`` goes into every row).
        evaluation: the ``evaluation`` parameters (``n_bins``, ``reliability_bins``,
            ``shift_metrics``).
        study: the study name.
        run_keys: ``r<i>`` -> (method, seed) of the ``r<i>_<kind>`` keyword artifacts.
        labels: method key -> display label.
        calibrators: calibrator keys of the study.
        report_bins: bin counts the study's reports draw; their reliability bins are kept
            besides the evaluation's.
        **artifacts: ``r<i>_logits``, ``r<i>_calibrators`` and ``r<i>_shift`` of every run.

    Returns:
        The tidy metrics table and the per-bin reliability table.
    """
    runs = {
        f"{method}|{seed}": {
            "logits": artifacts[f"{key}_logits"],
            "calibrators": artifacts[f"{key}_calibrators"],
            "shift": artifacts.get(f"{key}_shift"),
        }
        for key, (method, seed) in run_keys.items()
    }
    n_bins = int(evaluation.get("n_bins", 15))
    return evaluate_runs(
        runs,
        dataset=dataset["name"],
        study=study,
        labels=labels,
        calibrators=calibrators,
        n_bins=n_bins,
        reliability_bin_counts=tuple(
            sorted({n_bins, *evaluation.get("reliability_bins", []), *report_bins})
        ),
        shift_metrics=tuple(evaluation.get("shift_metrics", SHIFT_METRICS)),
    )


def run_report(
    metrics: pd.DataFrame,
    bins: pd.DataFrame,
    model: dict[str, Any] | None = None,
    *,
    report: str,
    options: dict[str, Any],
    study: dict[str, Any],
    run_keys: dict[str, tuple[str, int]],
    model_overrides: dict[str, str | None] | None = None,
    **artifacts: Any,
) -> dict[str, Any]:
    """Build report ``report`` for a study.

    Args:
        metrics: the study's tidy metrics table.
        bins: the study's per-bin reliability table.
        model: the ``model`` parameters (its ``name`` is the architecture of every run
            whose method does not override it).
        report: registered report name.
        options: the report's options from the study's ``reports`` entry.
        study: name, dataset, methods, seeds, labels and sweep groups of the study.
        run_keys: ``r<i>`` -> (method, seed) for the ``r<i>_<kind>`` keyword artifacts.
        model_overrides: method -> the model name its own ``model`` sets (``None``: none).
        **artifacts: per-run artifacts the report declared it needs.

    Returns:
        artifact name -> DataFrame / Markdown string / Figure.
    """
    base = (model or {}).get("name")
    models = {m: name for m, name in (model_overrides or {}).items() if name} | {
        m: base for m in study["methods"] if base and not (model_overrides or {}).get(m)
    }
    results = StudyResults(metrics=metrics, bins=bins, models=models, **study)
    for key, (method, seed) in run_keys.items():
        for kind in RUN_ARTIFACTS:
            value = artifacts.get(f"{key}_{kind}")
            if value is not None:
                getattr(results, kind)[(method, int(seed))] = value
    return build_report(report, results, **options)
