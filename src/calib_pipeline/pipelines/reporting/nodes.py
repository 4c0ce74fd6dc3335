"""Nodes of the reporting stage.

``evaluate_runs`` scores every (method, seed, calibrator, split, shift, severity) cell
from cached logits into one tidy table; every other node is a pivot or a plot of
that table (or of the per-bin reliability table it also returns).
"""

from __future__ import annotations

import logging
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402

from calib_pipeline.calibration.metrics import calibration_metrics, reliability_bins  # noqa: E402

logger = logging.getLogger(__name__)

TIDY_COLUMNS = [
    "dataset", "study", "method", "label", "seed", "calibrator",
    "split", "shift", "severity", "metric", "value",
]
UNCALIBRATED = "none"


def calibrated_scores(calibrator: Any, logits: torch.Tensor) -> tuple[torch.Tensor, str]:
    """Scores to evaluate after calibration: calibrated logits where the calibrator maps
    logits to logits (exact softmax downstream), probabilities otherwise."""
    if calibrator is None:
        return logits, "logits"
    if hasattr(calibrator, "transform_logits"):
        return calibrator.transform_logits(logits), "logits"
    return calibrator.predict_proba(logits), "probs"


def _cells(run: dict[str, Any]) -> list[tuple[str, str, int, dict[str, Any]]]:
    """(split, shift, severity, entry) of every evaluated set of a run."""
    cells = [(part, "none", 0, run["logits"][part]) for part in ("val", "test") if part in run["logits"]]
    for entry in (run.get("shift") or {}).values():
        cells.append(("test", entry["shift"], int(entry["severity"]), entry))
    return cells


def evaluate_runs(
    runs: dict[str, dict[str, Any]],
    *,
    dataset: str,
    study: str,
    labels: dict[str, str],
    calibrators: list[str],
    n_bins: int = 15,
    reliability_bin_counts: tuple[int, ...] = (15,),
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Score every cell of a study.

    Args:
        runs: ``"<method>|<seed>"`` -> ``{"logits", "calibrators", "shift"}`` artifacts.
        dataset, study: identifiers written into every row.
        labels: method key -> display label.
        calibrators: calibrator keys of the study (``"none"`` is always added first).
        n_bins: bins of the binned metrics.
        reliability_bin_counts: bin counts of the per-bin table (clean test split).

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
            for split, shift, severity, entry in _cells(run):
                scores, kind = calibrated_scores(calibrator, entry["logits"])
                values = calibration_metrics(scores, entry["labels"], n_bins=n_bins, inputs=kind)
                base = {
                    "dataset": dataset, "study": study, "method": method,
                    "label": labels.get(method, method), "seed": int(seed),
                    "calibrator": cal_name, "split": split, "shift": shift, "severity": severity,
                }
                rows.extend({**base, "metric": k, "value": float(v)} for k, v in values.items())
                if split == "test" and shift == "none":
                    for count in reliability_bin_counts:
                        stats = reliability_bins(scores, entry["labels"], n_bins=count, inputs=kind)
                        frame = pd.DataFrame(
                            {
                                "lower": stats["edges"][:-1], "upper": stats["edges"][1:],
                                "count": stats["counts"], "confidence": stats["confidence"],
                                "accuracy": stats["accuracy"],
                            }
                        )
                        frame.insert(0, "n_bins", count)
                        for column, value in reversed(list(base.items())):
                            if column not in ("split", "shift", "severity"):
                                frame.insert(0, column, value)
                        bins.append(frame)
    table = pd.DataFrame(rows, columns=TIDY_COLUMNS)
    logger.info("%s: scored %d cells into %d rows", study, len(table) // max(1, table["metric"].nunique()), len(table))
    return table, pd.concat(bins, ignore_index=True) if bins else pd.DataFrame()


def mean_std_table(
    table: pd.DataFrame,
    metrics: list[str],
    *,
    split: str = "test",
    shift: str = "none",
    percent: tuple[str, ...] = ("accuracy", "error", "ece", "ece_em", "mce", "classwise_ece"),
) -> pd.DataFrame:
    """Rows (method label, calibrator) x metric columns, formatted ``mean ± std`` over seeds.

    Metrics listed in ``percent`` are shown ×100, as the papers report them.
    """
    subset = table[(table["split"] == split) & (table["shift"] == shift) & table["metric"].isin(metrics)]
    if subset.empty:
        raise ValueError(f"no rows for split={split!r}, shift={shift!r}, metrics={metrics}")
    scaled = subset.assign(value=np.where(subset["metric"].isin(percent), subset["value"] * 100, subset["value"]))
    grouped = scaled.groupby(["label", "calibrator", "metric"], sort=False)["value"]
    stats = grouped.agg(["mean", "std", "count"]).reset_index()
    stats["cell"] = [
        f"{m:.2f} ± {s:.2f}" if c > 1 else f"{m:.2f}"
        for m, s, c in zip(stats["mean"], stats["std"].fillna(0.0), stats["count"])
    ]
    wide = stats.pivot(index=["label", "calibrator"], columns="metric", values="cell")
    order = list(dict.fromkeys(subset["label"]))
    wide = wide.reindex(columns=[m for m in metrics if m in wide.columns])
    wide = wide.reset_index()
    wide["label"] = pd.Categorical(wide["label"], categories=order, ordered=True)
    return wide.sort_values(["label", "calibrator"]).reset_index(drop=True).astype({"label": str})


def summary_tables(table: pd.DataFrame, summary: dict[str, Any]) -> tuple[pd.DataFrame, str]:
    """The study's summary: mean ± std over seeds on the clean test split (CSV + Markdown)."""
    metrics = summary.get("metrics", ["accuracy", "nll", "brier", "ece", "ece_em", "mce", "classwise_ece", "auroc"])
    wide = mean_std_table(table, metrics)
    study = table["study"].iloc[0]
    dataset = table["dataset"].iloc[0]
    seeds = table["seed"].nunique()
    header = (
        f"# {study} on {dataset}\n\n"
        f"Clean test split, mean ± std over {seeds} seed(s); accuracy and calibration errors in %.\n"
        "`none` = uncalibrated; other calibrators were fitted on the validation split.\n\n"
    )
    return wide, header + wide.to_markdown(index=False) + "\n"


def reliability_figure(bins: pd.DataFrame, evaluation: dict[str, Any]) -> plt.Figure:
    """Reliability diagrams on the clean test split: one row per method, one column per
    calibrator; filled bars are per-bin accuracy pooled over seeds (count-weighted),
    hatched outlines the mean confidence of the bin, the diagonal perfect calibration."""
    n_bins = int(evaluation.get("n_bins", 15))
    frame = bins[bins["n_bins"] == n_bins]
    if frame.empty:
        raise ValueError(f"no reliability bins with n_bins={n_bins}")
    labels = list(dict.fromkeys(frame["label"]))
    calibrators = list(dict.fromkeys(frame["calibrator"]))
    fig, axes = plt.subplots(
        len(labels), len(calibrators), figsize=(2.6 * len(calibrators), 2.6 * len(labels)),
        squeeze=False, sharex=True, sharey=True,
    )
    for i, label in enumerate(labels):
        for j, cal in enumerate(calibrators):
            ax = axes[i, j]
            cell = frame[(frame["label"] == label) & (frame["calibrator"] == cal)]
            weight = cell["count"].to_numpy(dtype=float)
            pooled = (
                cell.assign(
                    acc_w=cell["accuracy"].fillna(0) * weight,
                    conf_w=cell["confidence"].fillna(0) * weight,
                )
                .groupby(["lower", "upper"], as_index=False)[["count", "acc_w", "conf_w"]]
                .sum()
            )
            with np.errstate(invalid="ignore", divide="ignore"):
                acc = pooled["acc_w"] / pooled["count"]
                conf = pooled["conf_w"] / pooled["count"]
            width = pooled["upper"] - pooled["lower"]
            ax.bar(pooled["lower"], acc, width=width, align="edge", color="#4C72B0", edgecolor="white")
            ax.bar(pooled["lower"], conf, width=width, align="edge", fill=False, edgecolor="#C44E52", hatch="//", linewidth=0.6)
            ax.plot([0, 1], [0, 1], "k--", linewidth=0.8)
            ax.set_xlim(0, 1)
            ax.set_ylim(0, 1)
            if i == 0:
                ax.set_title(cal, fontsize=9)
            if j == 0:
                ax.set_ylabel(f"{label}\naccuracy", fontsize=8)
            if i == len(labels) - 1:
                ax.set_xlabel("confidence", fontsize=8)
    fig.suptitle(f"Reliability diagrams, test split, {n_bins} bins", fontsize=10)
    fig.tight_layout()
    return fig
