"""Formatting helpers shared by the reports: seed aggregation into ``mean ± std`` cells."""

from __future__ import annotations

import numpy as np
import pandas as pd

PERCENT_METRICS = ("accuracy", "error", "ece", "ece_em", "ece_l2", "ece_lb", "mce", "classwise_ece",
                   "overconfidence_error", "sece", "sb_ece", "dece", "smooth_ece", "debiased_ece_l2")


def mean_std_table(
    table: pd.DataFrame,
    metrics: list[str],
    *,
    split: str = "test",
    shift: str = "none",
    percent: tuple[str, ...] = PERCENT_METRICS,
) -> pd.DataFrame:
    """Rows (method label, calibrator) x metric columns, formatted ``mean ± std`` over seeds.

    Metrics listed in ``percent`` are shown ×100, as the papers report them; the cell is
    the mean alone when there is one seed.
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
