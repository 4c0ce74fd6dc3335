"""What the tracking hook logs, as names and numbers: readable params (:func:`flatten`),
the evaluation settings of a run (and their digest), and a tidy metrics table's per-run,
per-calibrator-family and per-study metrics."""

from __future__ import annotations

import hashlib
import json
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


def evaluation_digest(settings: dict[str, str]) -> str:
    """A short hash of the resolved evaluation settings (:func:`evaluation_settings` less the
    ``--params`` overrides, which they already contain): two scorings with the same digest
    give the same numbers for the same training and code."""
    resolved = {k: v for k, v in settings.items() if not k.startswith("kedro.params.")}
    return hashlib.sha256(json.dumps(resolved, sort_keys=True).encode()).hexdigest()[:12]


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


# Calibrators (registry names) that answer one question however they are fitted: "the
# metric after temperature scaling". Their family key (``test.ece.temperature_scaling``) is
# logged beside each member's own key, so that runs of studies that use different members
# (``ts`` here, ``ts_grid_mukhoti`` there) share one column; a tag names the member.
CALIBRATOR_FAMILIES = {
    "temperature_scaling": (
        "temperature_nll",
        "temperature_grid_ece",
        "temperature_sb_ece",
        "temperature_fixed",
    ),
}


def family_members(definitions: dict[str, Any]) -> dict[str, list[str]]:
    """Family -> the calibrator keys of ``definitions`` (the session's ``calibrators``
    parameters) in it, in the definitions' order: the first one a run is scored with
    fills the family key."""
    members: dict[str, list[str]] = {}
    for key, definition in definitions.items():
        name = definition.get("name") if isinstance(definition, dict) else None
        for family, names in CALIBRATOR_FAMILIES.items():
            if name in names:
                members.setdefault(family, []).append(str(key))
    return members


def family_metrics(
    table: pd.DataFrame, members: dict[str, list[str]]
) -> dict[tuple[str, str], dict[str, tuple[str, dict[str, float]]]]:
    """(method, seed) -> family -> (the member that fills it, ``<split>.<metric>.<family>``
    -> value): the clean metrics of the first of the family's ``members`` the run was scored
    with in ``table``."""
    rows = _clean(table)
    out: dict[tuple[str, str], dict[str, tuple[str, dict[str, float]]]] = {}
    for (method, seed), run in rows.groupby([rows["method"].astype(str), rows["seed"].astype(str)]):
        scored = set(run["calibrator"])
        for family, keys in members.items():
            member = next((key for key in keys if key in scored), None)
            if member is None:
                continue
            chosen = run[run["calibrator"] == member]
            values = {
                metric_name(split, metric, family): float(value)
                for split, metric, value in zip(chosen["split"], chosen["metric"], chosen["value"])
            }
            out.setdefault((method, seed), {})[family] = (member, values)
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
