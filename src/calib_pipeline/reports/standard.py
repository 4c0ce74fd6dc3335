"""Reports every study can use: the summary table and reliability diagrams."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from calib_pipeline.reports.common import mean_std_table
from calib_pipeline.reports.registry import (
    METRIC,
    StudyResults,
    either,
    integer,
    list_of,
    optional,
    report,
)

DEFAULT_SUMMARY_METRICS = [
    "accuracy",
    "nll",
    "brier",
    "ece",
    "ece_em",
    "mce",
    "classwise_ece",
    "auroc",
]
BIN_COUNT = integer(low=1)


def fit_warnings(results: StudyResults) -> pd.DataFrame:
    """Every warning a calibrator raised while fitting (degenerate validation sets, T at a
    search bound, non-convergence), one row per (method, seed, calibrator, warning)."""
    rows = [
        {
            "method": results.labels.get(method, method),
            "seed": seed,
            "calibrator": key,
            "converged": bool(getattr(calibrator, "converged", True)),
            "warning": warning,
        }
        for (method, seed), fitted in sorted(results.calibrators.items())
        for key, calibrator in fitted.items()
        for warning in getattr(calibrator, "warnings", [])
    ]
    return pd.DataFrame(rows, columns=["method", "seed", "calibrator", "converged", "warning"])


@report("summary", needs=("calibrators",), options={"metrics": optional(list_of(METRIC))})
def summary(results: StudyResults, metrics: list[str] | None = None) -> dict[str, Any]:
    """Mean ± std over seeds on the clean test split, per method and calibrator, followed
    by every calibrator fit warning (a degenerate fit is reported, never hidden)."""
    wide = mean_std_table(results.metrics, metrics or DEFAULT_SUMMARY_METRICS)
    header = (
        f"# {results.study} on {results.dataset_label}\n\n"
        f"Clean test split, mean ± std over {len(results.seeds)} seed(s); accuracy and "
        "calibration errors in %.\n`none` = uncalibrated; other calibrators were fitted on the "
        "validation split.\n\n"
    )
    warnings = fit_warnings(results)
    footer = "\n## Calibrator fit warnings\n\n" + (
        warnings.to_markdown(index=False) if len(warnings) else "None."
    )
    return {
        "table": wide,
        "fit_warnings": warnings,
        "summary": header + wide.to_markdown(index=False) + "\n" + footer + "\n",
    }


def pooled_bins(bins: pd.DataFrame) -> pd.DataFrame:
    """Per-bin accuracy and confidence of one reliability cell, pooled over seeds and
    weighted by the bin counts.

    Args:
        bins: rows of the per-bin reliability table (lower, upper, count, accuracy,
            confidence) of one (method, calibrator, bin count), every seed.

    Returns:
        Columns lower, upper, count, accuracy, confidence (NaN in empty bins).
    """
    weight = bins["count"].to_numpy(dtype=float)
    pooled = (
        bins.assign(
            acc_w=bins["accuracy"].fillna(0) * weight, conf_w=bins["confidence"].fillna(0) * weight
        )
        .groupby(["lower", "upper"], as_index=False)[["count", "acc_w", "conf_w"]]
        .sum()
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        pooled["accuracy"] = pooled["acc_w"] / pooled["count"]
        pooled["confidence"] = pooled["conf_w"] / pooled["count"]
    return pooled.drop(columns=["acc_w", "conf_w"])


def bins_with_count(bins: pd.DataFrame, n_bins: int) -> pd.DataFrame:
    """The rows of the per-bin table with ``n_bins`` bins; ``ValueError`` naming the
    available counts when the evaluation did not keep it."""
    frame = bins[bins["n_bins"] == n_bins]
    if frame.empty:
        raise ValueError(
            f"no reliability bins with n_bins={n_bins}; add it to evaluation.reliability_bins "
            f"(available: {sorted(bins['n_bins'].unique().tolist())})"
        )
    return frame


def reliability_axes(ax: plt.Axes, pooled: pd.DataFrame) -> None:
    """One reliability diagram: filled bars = accuracy, hatched = mean confidence per bin."""
    width = pooled["upper"] - pooled["lower"]
    ax.bar(
        pooled["lower"],
        pooled["accuracy"],
        width=width,
        align="edge",
        color="#4C72B0",
        edgecolor="white",
    )
    ax.bar(
        pooled["lower"],
        pooled["confidence"],
        width=width,
        align="edge",
        fill=False,
        edgecolor="#C44E52",
        hatch="//",
        linewidth=0.6,
    )
    ax.plot([0, 1], [0, 1], "k--", linewidth=0.8)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)


def reliability_figure(bins: pd.DataFrame, title: str) -> plt.Figure:
    """Reliability diagrams of one bin count: a row per method label, a column per
    calibrator, seeds pooled (:func:`pooled_bins`)."""
    labels = list(dict.fromkeys(bins["label"]))
    calibrators = list(dict.fromkeys(bins["calibrator"]))
    fig, axes = plt.subplots(
        len(labels),
        len(calibrators),
        figsize=(2.6 * len(calibrators), 2.6 * len(labels)),
        squeeze=False,
        sharex=True,
        sharey=True,
    )
    for i, label in enumerate(labels):
        for j, cal in enumerate(calibrators):
            ax = axes[i, j]
            reliability_axes(
                ax, pooled_bins(bins[(bins["label"] == label) & (bins["calibrator"] == cal)])
            )
            if i == 0:
                ax.set_title(cal, fontsize=9)
            if j == 0:
                ax.set_ylabel(f"{label}\naccuracy", fontsize=8)
            if i == len(labels) - 1:
                ax.set_xlabel("confidence", fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


@report("reliability", options={"n_bins": either(BIN_COUNT, list_of(BIN_COUNT))})
def reliability(results: StudyResults, n_bins: list[int] | int = 15) -> dict[str, Any]:
    """Reliability diagrams on the clean test split, one figure per bin count: a row per
    method, a column per calibrator, seeds pooled (count-weighted)."""
    return {
        f"reliability_{count}_bins": reliability_figure(
            bins_with_count(results.bins, count),
            f"{results.study}: reliability on the test split, {count} bins",
        )
        for count in ([n_bins] if isinstance(n_bins, int) else n_bins)
    }
