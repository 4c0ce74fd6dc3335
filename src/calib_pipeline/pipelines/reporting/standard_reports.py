"""Reports every study can use: the summary table and reliability diagrams."""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from calib_pipeline.pipelines.reporting.reports import StudyResults, report  # noqa: E402
from calib_pipeline.pipelines.reporting.tables import mean_std_table  # noqa: E402

DEFAULT_SUMMARY_METRICS = ["accuracy", "nll", "brier", "ece", "ece_em", "mce", "classwise_ece", "auroc"]


def fit_warnings(results: StudyResults) -> pd.DataFrame:
    """Every warning a calibrator raised while fitting (degenerate validation sets, T at a
    search bound, non-convergence), one row per (method, seed, calibrator, warning)."""
    rows = [
        {"method": results.labels.get(method, method), "seed": seed, "calibrator": key,
         "converged": bool(getattr(calibrator, "converged", True)), "warning": warning}
        for (method, seed), fitted in sorted(results.calibrators.items())
        for key, calibrator in fitted.items()
        for warning in getattr(calibrator, "warnings", [])
    ]
    return pd.DataFrame(rows, columns=["method", "seed", "calibrator", "converged", "warning"])


@report("summary", needs=("calibrators",))
def summary(results: StudyResults, metrics: list[str] | None = None) -> dict[str, Any]:
    """Mean ± std over seeds on the clean test split, per method and calibrator, followed
    by every calibrator fit warning (a degenerate fit is reported, never hidden)."""
    wide = mean_std_table(results.metrics, metrics or DEFAULT_SUMMARY_METRICS)
    header = (
        f"# {results.study} on {results.dataset}\n\n"
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


def _pooled_bins(cell: pd.DataFrame) -> pd.DataFrame:
    """Per-bin accuracy and confidence pooled over seeds, weighted by bin counts."""
    weight = cell["count"].to_numpy(dtype=float)
    pooled = (
        cell.assign(acc_w=cell["accuracy"].fillna(0) * weight, conf_w=cell["confidence"].fillna(0) * weight)
        .groupby(["lower", "upper"], as_index=False)[["count", "acc_w", "conf_w"]]
        .sum()
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        pooled["accuracy"] = pooled["acc_w"] / pooled["count"]
        pooled["confidence"] = pooled["conf_w"] / pooled["count"]
    return pooled


def reliability_axes(ax: plt.Axes, pooled: pd.DataFrame) -> None:
    """One reliability diagram: filled bars = accuracy, hatched = mean confidence per bin."""
    width = pooled["upper"] - pooled["lower"]
    ax.bar(pooled["lower"], pooled["accuracy"], width=width, align="edge", color="#4C72B0", edgecolor="white")
    ax.bar(pooled["lower"], pooled["confidence"], width=width, align="edge", fill=False,
           edgecolor="#C44E52", hatch="//", linewidth=0.6)
    ax.plot([0, 1], [0, 1], "k--", linewidth=0.8)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)


@report("reliability")
def reliability(results: StudyResults, n_bins: list[int] | int = 15) -> dict[str, Any]:
    """Reliability diagrams on the clean test split, one figure per bin count: a row per
    method, a column per calibrator, seeds pooled (count-weighted)."""
    figures: dict[str, Any] = {}
    for count in [n_bins] if isinstance(n_bins, int) else n_bins:
        frame = results.bins[results.bins["n_bins"] == count]
        if frame.empty:
            raise ValueError(
                f"no reliability bins with n_bins={count}; add it to evaluation.reliability_bins "
                f"(available: {sorted(results.bins['n_bins'].unique().tolist())})"
            )
        labels = list(dict.fromkeys(frame["label"]))
        calibrators = list(dict.fromkeys(frame["calibrator"]))
        fig, axes = plt.subplots(
            len(labels), len(calibrators), figsize=(2.6 * len(calibrators), 2.6 * len(labels)),
            squeeze=False, sharex=True, sharey=True,
        )
        for i, label in enumerate(labels):
            for j, cal in enumerate(calibrators):
                ax = axes[i, j]
                reliability_axes(ax, _pooled_bins(frame[(frame["label"] == label) & (frame["calibrator"] == cal)]))
                if i == 0:
                    ax.set_title(cal, fontsize=9)
                if j == 0:
                    ax.set_ylabel(f"{label}\naccuracy", fontsize=8)
                if i == len(labels) - 1:
                    ax.set_xlabel("confidence", fontsize=8)
        fig.suptitle(f"{results.study}: reliability on the test split, {count} bins", fontsize=10)
        fig.tight_layout()
        figures[f"reliability_{count}_bins"] = fig
    return figures
