"""Reports every study can use: the summary table and reliability diagrams."""

from __future__ import annotations

import textwrap
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.collections import PolyCollection

from calib_pipeline.registry import MAX_BINS, check_bins
from calib_pipeline.reports.common import (
    MEAN_OVER_SEEDS,
    POOLED_OVER_SEEDS,
    SEEDS_AVERAGED,
    mean_std_table,
    method_colors,
    metric_name,
    paper_view,
    table_units_note,
)
from calib_pipeline.reports.ensembles import ENSEMBLE_SEED, ensembles_section
from calib_pipeline.reports.registry import (
    METRIC,
    Option,
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
BIN_COUNT = Option(f"an integer >= 1 (at most {MAX_BINS})", check_bins)


def fit_warnings(results: StudyResults) -> pd.DataFrame:
    """Every warning a calibrator of the study raised while fitting (degenerate validation
    sets, T at a search bound, non-convergence), one row per (method, seed, calibrator,
    warning). A run shared with other studies also holds their calibrators: only those in
    the study's metrics table count."""
    evaluated = set(results.metrics["calibrator"])
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
        if key in evaluated
        for warning in getattr(calibrator, "warnings", [])
    ]
    return pd.DataFrame(rows, columns=["method", "seed", "calibrator", "converged", "warning"])


@report(
    "summary",
    needs=("calibrators",),
    options={"metrics": optional(list_of(METRIC))},
    ensembles=True,
)
def summary(results: StudyResults, metrics: list[str] | None = None) -> dict[str, Any]:
    """Mean ± std over seeds on the clean test split, per method and calibrator, followed
    by every calibrator fit warning (a degenerate fit is reported, never hidden)."""
    metrics = metrics or DEFAULT_SUMMARY_METRICS
    wide = mean_std_table(results.metrics, metrics)
    header = (
        f"# {results.study} on {results.dataset_label}\n\n"
        f"Clean test split, mean ± std over {len(results.seeds)} seed(s) {SEEDS_AVERAGED}. "
        f"{table_units_note(wide, metrics)}\n"
        "`none` = uncalibrated; other calibrators were fitted on the validation split. "
        "table.csv also holds each cell's numbers (`<column>[_pct|_x100]_mean`, `..._std`, "
        "`n_seeds`).\n\n"
    )
    warnings = fit_warnings(results)
    footer = "\n## Calibrator fit warnings\n\n" + (
        warnings.to_markdown(index=False) if len(warnings) else "None."
    )
    return {
        "table": wide,
        "fit_warnings": warnings,
        "summary": header
        + paper_view(wide).to_markdown(index=False)
        + "\n"
        + ensembles_section(results.ensembles)
        + footer
        + "\n",
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


MAX_COLUMNS = 4  # panels per row: 4 panels of PANEL_WIDTH inches fit a page's width
PANEL_WIDTH = 2.4  # inches; a panel is a reliability diagram over its count histogram
PANEL_HEIGHT = 2.7
GAP_COLOR = "#D62728"
# The gap's hatching and outline: dark, so the gap reads on bars of any method colour (a red
# method's bars would hide a red outline).
GAP_EDGE_COLOR = "0.2"
TITLE_SIZE = 9  # points
# Characters of a title line that fit a panel: its width less ~0.6 in of tick labels, an
# average glyph ~0.6 em wide.
TITLE_CHARACTERS = int((PANEL_WIDTH - 0.6) * 72 / (0.6 * TITLE_SIZE))


def panel_title(label: str, calibrator: str) -> str:
    """A panel's title, ``<label> · <calibrator>``, wrapped to the panel's width (a long
    file name of the score pipeline, a long calibrator key): constrained layout makes room
    for the lines but never shortens one, so a line wider than its panel would be cut
    off at the figure's edge or run into its neighbour."""
    title = f"{label} · {calibrator}"
    return "\n".join(textwrap.wrap(title, TITLE_CHARACTERS, break_on_hyphens=False))


def pooled_ece(pooled: pd.DataFrame) -> float:
    """The ECE of count-weighted bins, ``Σ count·|accuracy − confidence| / N`` (empty bins
    contribute nothing); NaN without samples."""
    count = pooled["count"].to_numpy(dtype=float)
    accuracy = pooled["accuracy"].to_numpy(dtype=float)
    gap = np.abs(accuracy - pooled["confidence"].to_numpy(dtype=float))
    total = count.sum()
    return float(np.nansum(count * gap) / total) if total > 0 else float("nan")


def _bars(
    ax: plt.Axes,
    left: np.ndarray,
    width: np.ndarray,
    bottom: np.ndarray,
    height: np.ndarray,
    **style: Any,
) -> None:
    """Bars drawn as one collection of rectangles (bins without samples -- NaN height --
    get none). ``ax.bar`` makes an artist per bar: a figure of 24 panels at 100 bins then
    has ~7,000 of them; one collection per series draws the same rectangles, and such a
    figure builds and saves faster (``benchmarks/bench_reports.py``; its figures:
    benchmarks/README.md)."""
    keep = np.isfinite(height) & np.isfinite(bottom)
    x0, x1 = left[keep], left[keep] + width[keep]
    y0, y1 = bottom[keep], bottom[keep] + height[keep]
    corners = np.stack(
        [
            np.stack([x0, y0], 1),
            np.stack([x0, y1], 1),
            np.stack([x1, y1], 1),
            np.stack([x1, y0], 1),
        ],
        axis=1,
    )
    ax.add_collection(PolyCollection(corners, **style), autolim=False)


def reliability_axes(
    ax: plt.Axes,
    hist: plt.Axes,
    pooled: pd.DataFrame,
    color: Any,
    *,
    seeds_pooled: bool = False,
) -> None:
    """One reliability diagram as the papers draw it: accuracy bars per bin (the method's
    colour), the gap to the bin's mean confidence shaded, the diagonal, the ECE in the
    panel (marked ``(pooled)`` when ``seeds_pooled``: the bins of several seeds, whose ECE
    is not the tables' mean over seeds); below it (``hist``) the share of samples per bin,
    so a bin of one sample reads as light as it is."""
    left = pooled["lower"].to_numpy(dtype=float)
    width = (pooled["upper"] - pooled["lower"]).to_numpy(dtype=float)
    accuracy = pooled["accuracy"].to_numpy(dtype=float)
    confidence = pooled["confidence"].to_numpy(dtype=float)
    ax.plot([0, 1], [0, 1], "k--", linewidth=0.8, label="perfect calibration")
    _bars(
        ax,
        left,
        width,
        np.zeros_like(accuracy),
        accuracy,
        facecolor=color,
        edgecolor="white",
        linewidth=0.5,
        label="accuracy",
    )
    _bars(
        ax,
        left,
        width,
        np.fmin(accuracy, confidence),
        np.abs(confidence - accuracy),
        facecolor=GAP_COLOR,
        alpha=0.25,
        edgecolor=GAP_EDGE_COLOR,
        hatch="//",
        linewidth=0.5,
        label="gap to confidence",
    )
    ax.text(
        0.04,
        0.95,
        f"{metric_name('ece')} {100 * pooled_ece(pooled):.2f}%"
        + (" (pooled)" if seeds_pooled else ""),
        transform=ax.transAxes,
        va="top",
        fontsize=8,
        bbox={"facecolor": "white", "edgecolor": "0.7", "pad": 2},
    )
    ax.set(xlim=(0, 1), ylim=(0, 1))
    ax.tick_params(labelbottom=False, labelsize=7)
    _share_axes(hist, left, width, pooled["count"].to_numpy(dtype=float), color)


def _share_axes(
    hist: plt.Axes, left: np.ndarray, width: np.ndarray, count: np.ndarray, color: Any
) -> None:
    """The share of samples per bin, under a reliability diagram."""
    total = count.sum()
    share = count / total if total else np.zeros_like(count)
    _bars(
        hist,
        left,
        width,
        np.zeros_like(share),
        share,
        facecolor=color,
        alpha=0.6,
        edgecolor="white",
        linewidth=0.5,
    )
    peak = float(share.max()) if total else 1.0
    hist.set_ylim(0, 1.15 * peak)
    hist.set_yticks([0, round(peak, 2)])
    hist.tick_params(labelsize=7)


def seeds_note(bins: pd.DataFrame, seed: int | None) -> str:
    """What a reliability figure pools: one seed, or every seed of the table (count-weighted);
    with several seeds, that its ECE is not the tables' mean over seeds."""
    if seed is not None:
        return f"seed {seed} only"
    seeds = sorted(s for s in bins["seed"].unique().tolist() if s != ENSEMBLE_SEED)
    listed = ", ".join(map(str, seeds))
    note = f"{POOLED_OVER_SEEDS} (count-weighted bins of {len(seeds)} seed(s): {listed})"
    if len(seeds) > 1:
        note += f"; ECE of the pooled bins, not the tables' {MEAN_OVER_SEEDS}"
    if (bins["seed"] == ENSEMBLE_SEED).any():
        note += "; an ensemble's panel is its one run"
    return note


def reliability_figure(
    bins: pd.DataFrame, title: str, colors: dict[str, Any] | None = None, note: str = ""
) -> plt.Figure:
    """Reliability diagrams of one bin count, a panel per (method label, calibrator) in
    rows of at most ``MAX_COLUMNS``, the bins of each panel pooled (:func:`pooled_bins`).

    Args:
        bins: the per-bin rows to draw (one bin count; the seeds to pool).
        title: the figure's title; ``note`` (e.g. :func:`seeds_note`) goes below it.
        colors: method label -> colour (:func:`method_colors`); default one colour.
    """
    panels = list(dict.fromkeys(zip(bins["label"], bins["calibrator"])))
    columns = min(MAX_COLUMNS, len(panels))
    rows = -(-len(panels) // columns)
    size = (PANEL_WIDTH * columns, PANEL_HEIGHT * rows + 0.6)
    fig = plt.figure(figsize=size, layout="constrained")
    grid = fig.add_gridspec(rows, columns)
    for index, (label, cal) in enumerate(panels):
        cell = grid[divmod(index, columns)].subgridspec(2, 1, height_ratios=[3, 1], hspace=0)
        ax = fig.add_subplot(cell[0])
        hist = fig.add_subplot(cell[1], sharex=ax)
        rows_of = bins[(bins["label"] == label) & (bins["calibrator"] == cal)]
        reliability_axes(
            ax,
            hist,
            pooled_bins(rows_of),
            (colors or {}).get(label, "#4C72B0"),
            seeds_pooled=rows_of["seed"].nunique() > 1,
        )
        ax.set_title(panel_title(label, cal), fontsize=TITLE_SIZE)
        if index % columns == 0:
            ax.set_ylabel("accuracy", fontsize=8)
            hist.set_ylabel("share", fontsize=8)
        hist.set_xlabel("confidence", fontsize=8)
    handles, names = ax.get_legend_handles_labels()
    fig.legend(handles, names, loc="outside lower center", ncols=3, fontsize=8)
    fig.suptitle(f"{title}\n{note}" if note else title, fontsize=10)
    return fig


@report(
    "reliability",
    options={"n_bins": either(BIN_COUNT, list_of(BIN_COUNT)), "seed": optional(integer())},
    ensembles=True,
)
def reliability(
    results: StudyResults, n_bins: list[int] | int = 15, seed: int | None = None
) -> dict[str, Any]:
    """Reliability diagrams on the clean test split, one figure per bin count: a panel per
    (method, calibrator), every seed pooled (count-weighted) or only ``seed``; ECE of the
    drawn bins in each panel, the share of samples per bin below it."""
    bins = results.bins
    if seed is not None:
        if seed not in set(bins["seed"]):
            raise ValueError(
                f"reliability: seed {seed} is not in the study's bins; "
                f"seeds: {sorted(set(bins['seed']))}"
            )
        bins = bins[bins["seed"] == seed]
    colors = method_colors(results.row_methods, results.row_labels)
    suffix = "" if seed is None else f"_seed_{seed}"
    return {
        f"reliability_{count}_bins{suffix}": reliability_figure(
            bins_with_count(bins, count),
            f"{results.study}: reliability on the test split, {count} bins",
            colors,
            seeds_note(bins, seed),
        )
        for count in ([n_bins] if isinstance(n_bins, int) else n_bins)
    }
