"""What the tracking hook logs, as names and numbers: readable params (:func:`flatten`),
the evaluation settings of a run, and a tidy metrics table's per-run and per-study metrics."""

from __future__ import annotations

import re
from typing import Any

import pandas as pd


def flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            flatten(f"{prefix}.{key}" if prefix else str(key), item, out)
    else:
        out[prefix] = str(value)[:500]


# The settings every number of a run's evaluation depends on besides the training: logged on
# the parent run, so re-scorings of one training under other bins or calibrator definitions
# are told apart in the MLflow UI (their metric names are the same).
EVALUATION_GROUPS = ("evaluation", "calibrators", "shift")


def evaluation_settings(run_params: dict[str, Any], catalog) -> dict[str, str]:
    """``kedro.params.<key>`` for each ``--params`` override and the resolved evaluation
    groups (``evaluation.n_bins``, ``calibrators.ts.name``, ...) as MLflow params."""
    settings: dict[str, str] = {}
    flatten("kedro.params", dict(run_params.get("runtime_params") or {}), settings)
    for group in EVALUATION_GROUPS:
        if catalog is None or f"params:{group}" not in catalog:
            continue  # a project (or test) without the group: nothing to log
        flatten(group, catalog.load(f"params:{group}"), settings)
    return settings


# the parent run's summary: few metrics, so that the UI's columns stay readable
SUMMARY_METRICS = ("accuracy", "ece", "nll")
COMPARED_SPLITS = ("test", "val")
NOT_IN_METRIC_NAMES = re.compile(r"[^/\w.\- :]")


def metric_name(*parts: Any) -> str:
    """``parts`` joined by dots, each character MLflow refuses in a metric name (``@``, ...)
    replaced by ``_``: ``("test", "ece", "ts@shifted_val")`` -> ``test.ece.ts_shifted_val``."""
    return NOT_IN_METRIC_NAMES.sub("_", ".".join(str(p) for p in parts))


def _clean(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of the clean (unshifted) splits of a tidy metrics table."""
    from calib_pipeline.reports.common import UNSHIFTED

    rows = table[(table["shift"] == UNSHIFTED) & table["split"].isin(COMPARED_SPLITS)]
    return rows[rows["severity"] == 0] if "severity" in rows else rows


def comparison_metrics(table: pd.DataFrame) -> dict[tuple[str, str], dict[str, float]]:
    """(method, seed) -> its clean per-calibrator metrics, named ``<split>.<metric>.<calibrator>``
    (``test.ece.ts``, ``test.nll.none``, ``val.accuracy.ts``), from a tidy metrics table."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    for row in _clean(table).itertuples(index=False):
        name = metric_name(row.split, row.metric, row.calibrator)
        out.setdefault((str(row.method), str(row.seed)), {})[name] = float(row.value)
    return out


def study_summary(study: str, table: pd.DataFrame) -> dict[str, float]:
    """A study's clean test accuracy, ECE and NLL per (method, calibrator), means over seeds:
    ``<study>.<method>.test.<metric>.<calibrator>``."""
    rows = _clean(table)
    rows = rows[(rows["split"] == "test") & rows["metric"].isin(SUMMARY_METRICS)]
    means = rows.groupby(["method", "metric", "calibrator"], sort=True)["value"].mean()
    return {metric_name(study, m, "test", k, c): float(v) for (m, k, c), v in means.items()}


def selected_row(history: pd.DataFrame, selected_epoch: Any) -> int:
    """Position of the ``selected_epoch`` row of a training history (the last row when the
    checkpoint names no epoch of the history)."""
    if selected_epoch is not None and "epoch" in history:
        matches = [
            i for i, epoch in enumerate(history["epoch"]) if int(epoch) == int(selected_epoch)
        ]
        if matches:
            return matches[-1]
    return len(history) - 1
