"""Nodes of the reporting stage.

``evaluate_runs`` scores every (method, seed, calibrator, split, shift, severity) cell
from cached logits into one tidy table; ``run_report`` builds one registered report
(``reports.py``) from that table, the per-bin reliability table and whatever per-run
artifacts the report needs.
"""

from __future__ import annotations

import logging
from typing import Any

import pandas as pd
import torch

from calib_pipeline.calibration.metrics import calibration_metrics, calibration_metrics_batched, reliability_bins
from calib_pipeline.calibration.posthoc import calibrated_scores
from calib_pipeline.pipelines.reporting.reports import StudyResults, build_report

logger = logging.getLogger(__name__)

TIDY_COLUMNS = [
    "dataset", "study", "method", "label", "seed", "calibrator",
    "split", "shift", "severity", "metric", "value",
]
UNCALIBRATED = "none"


def _cells(run: dict[str, Any]) -> list[tuple[str, str, int, dict[str, Any]]]:
    """(split, shift, severity, entry) of every evaluated set of a run.

    Shift entries carry their split (``"test"``, or ``"val"`` for shifted validation sets;
    older caches have none: test); skipped corruptions have no logits and no cell.
    """
    cells = [(part, "none", 0, run["logits"][part]) for part in ("val", "test") if part in run["logits"]]
    for entry in (run.get("shift") or {}).values():
        if "logits" in entry:
            cells.append((entry.get("split", "test"), entry["shift"], int(entry["severity"]), entry))
    return cells


SHIFT_METRICS = ("accuracy", "nll", "brier", "ece", "ece_em", "mce", "ece_l2", "auroc")


def _bins_frame(stats: dict[str, Any], count: int, base: dict[str, Any]) -> pd.DataFrame:
    frame = pd.DataFrame(
        {
            "lower": stats["edges"][:-1], "upper": stats["edges"][1:], "count": stats["counts"],
            "confidence": stats["confidence"], "accuracy": stats["accuracy"],
        }
    )
    frame.insert(0, "n_bins", count)
    for column, value in reversed(list(base.items())):
        if column not in ("split", "shift", "severity"):
            frame.insert(0, column, value)
    return frame


def evaluate_runs(
    runs: dict[str, dict[str, Any]],
    *,
    dataset: str,
    study: str,
    labels: dict[str, str],
    calibrators: list[str],
    n_bins: int = 15,
    reliability_bin_counts: tuple[int, ...] = (15,),
    shift_metrics: tuple[str, ...] = SHIFT_METRICS,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Score every cell of a study.

    Clean val/test cells get the whole metric suite; shifted sets (often ~100 per run)
    get ``shift_metrics``, scored in one batched call per (run, calibrator) -- the sets
    of a run share their size, so they stack into R × N × K.

    Args:
        runs: ``"<method>|<seed>"`` -> ``{"logits", "calibrators", "shift"}`` artifacts.
        dataset, study: identifiers written into every row.
        labels: method key -> display label.
        calibrators: calibrator keys of the study (``"none"`` is always added first).
        n_bins: bins of the binned metrics.
        reliability_bin_counts: bin counts of the per-bin table (clean test split).
        shift_metrics: metric keys computed on shifted sets.

    Returns:
        The tidy metrics table (``TIDY_COLUMNS``) and the per-bin reliability table.
    """
    rows: list[dict[str, Any]] = []
    bins: list[pd.DataFrame] = []
    for run_key, run in runs.items():
        method, seed = run_key.split("|")
        fitted = run.get("calibrators") or {}
        missing = [c for c in calibrators if c not in fitted]
        if missing:
            raise KeyError(f"{method} seed {seed}: calibrator(s) {missing} were not fitted; re-run posthoc")
        for cal_name in [UNCALIBRATED, *calibrators]:
            calibrator = None if cal_name == UNCALIBRATED else fitted[cal_name]
            base = {
                "dataset": dataset, "study": study, "method": method, "label": labels.get(method, method),
                "seed": int(seed), "calibrator": cal_name,
            }
            shifted: dict[tuple[str, int], list[tuple[dict[str, Any], torch.Tensor, torch.Tensor]]] = {}
            for split, shift, severity, entry in _cells(run):
                scores, kind = (
                    (entry["logits"], "logits") if calibrator is None
                    else calibrated_scores(calibrator, entry["logits"])
                )
                cell = {**base, "split": split, "shift": shift, "severity": severity}
                if shift != "none":
                    shifted.setdefault((kind, len(entry["labels"])), []).append((cell, scores, entry["labels"]))
                    continue
                values = calibration_metrics(scores, entry["labels"], n_bins=n_bins, inputs=kind)
                rows.extend({**cell, "metric": k, "value": float(v)} for k, v in values.items())
                if split == "test":
                    for count in reliability_bin_counts:
                        stats = reliability_bins(scores, entry["labels"], n_bins=count, inputs=kind)
                        bins.append(_bins_frame(stats, count, cell))
            for (kind, _), cells in shifted.items():
                values = calibration_metrics_batched(
                    torch.stack([torch.as_tensor(c[1]) for c in cells]),
                    torch.stack([torch.as_tensor(c[2]) for c in cells]),
                    n_bins=n_bins, inputs=kind, keys=list(shift_metrics),
                )
                for index, (cell, _, _) in enumerate(cells):
                    rows.extend({**cell, "metric": k, "value": float(v[index])} for k, v in values.items())
    table = pd.DataFrame(rows, columns=TIDY_COLUMNS)
    logger.info("%s: scored %d rows", study, len(table))
    return table, pd.concat(bins, ignore_index=True) if bins else pd.DataFrame()


def run_report(
    metrics: pd.DataFrame,
    bins: pd.DataFrame,
    *,
    report: str,
    options: dict[str, Any],
    study: dict[str, Any],
    run_keys: dict[str, tuple[str, int]],
    **artifacts: Any,
) -> dict[str, Any]:
    """Build report ``report`` for a study.

    Args:
        metrics: the study's tidy metrics table.
        bins: the study's per-bin reliability table.
        report: registered report name.
        options: the report's options from the study's ``reports`` entry.
        study: name, dataset, methods, seeds, labels and sweep groups of the study.
        run_keys: ``r<i>`` -> (method, seed) for the ``r<i>_<kind>`` keyword artifacts.
        **artifacts: per-run artifacts the report declared it needs.

    Returns:
        artifact name -> DataFrame / Markdown string / Figure.
    """
    results = StudyResults(metrics=metrics, bins=bins, **study)
    for key, (method, seed) in run_keys.items():
        for kind in ("histories", "logits", "calibrators", "shift"):
            value = artifacts.get(f"{key}_{kind}")
            if value is not None:
                getattr(results, kind)[(method, int(seed))] = value
    return build_report(report, results, **options)
