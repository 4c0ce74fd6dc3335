"""Reports of the meta-regularisation study (γ-Net + SECE): Tables 1–2, Fig. 3, 5, γ histogram."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from matplotlib.ticker import MaxNLocator

from calib_pipeline.calibration.metrics import calibration_metrics_batched
from calib_pipeline.reports.common import (
    EQUAL_MASS_NOTE,
    MEAN_OVER_SEEDS,
    POOLED_OVER_SEEDS,
    SEEDS_AVERAGED,
    UNCALIBRATED,
    MethodStyle,
    axis_label,
    cell_table,
    legend_outside,
    method_colors,
    method_styles,
    metric_name,
    paper_view,
    table_units_note,
    with_numbers,
)
from calib_pipeline.reports.published import published_artifacts
from calib_pipeline.reports.registry import (
    TEXT,
    StudyResults,
    calibrators_in,
    integer,
    list_of,
    mapping,
    optional,
    report,
)

TABLE_METRICS = ["error", "nll", "ece", "mce", "ece_em", "classwise_ece"]
# The paper's "Methods" column, then each metric by its name (the paper's ACE is AdaECE).
TABLE_HEADERS = {"label": "Methods", **{m: metric_name(m) for m in TABLE_METRICS}}
BIN_COUNTS = [10, 20, 50, 100, 200, 500, 1000]
# Fig. 3's ECE axis leaves out this share of the first epochs (at least one), in runs of at
# least MIN_EPOCHS_TO_SKIP epochs (robust_limits).
WARMUP_SHARE = 0.1
MIN_EPOCHS_TO_SKIP = 5
CURVE_COLUMNS = (
    "test_ece",
    "test_error",
    "test_gamma_mean",
    "test_gamma_std",
    "val_gamma_mean",
    "val_gamma_std",
)


def paper_table(
    table: pd.DataFrame, methods: list[str], calibrated: dict[str, str] | None = None
) -> pd.DataFrame:
    """Table 1 / 2 of the paper from the tidy metrics table.

    Args:
        table: the study's tidy metrics table.
        methods: the rows, in the paper's order, each uncalibrated.
        calibrated: method -> calibrator key; adds that calibrated row (e.g. "CE (TS)")
            right after its method.

    Returns:
        Columns Methods, Error, NLL, ECE, MCE, AdaECE (the paper's ACE), Classwise-ECE:
        mean ± std over seeds
        on the test split, % except NLL; then their numbers (``error_pct_mean``,
        ``error_pct_std``, ..., ``nll_mean``, ..., ``n_seeds``: :func:`~.common.with_numbers`).
    """
    unknown = sorted(set(methods) - set(table["method"]))
    if unknown:
        raise ValueError(
            f"methods {unknown} are not in the study's table; it has "
            f"{sorted(table['method'].unique())}"
        )
    pieces = []
    for method in methods:
        rows = table[(table["method"] == method) & (table["calibrator"] == UNCALIBRATED)]
        pieces.append(rows)
        calibrator = (calibrated or {}).get(method)
        if calibrator is not None:
            cal_rows = table[(table["method"] == method) & (table["calibrator"] == calibrator)]
            if cal_rows.empty:
                raise ValueError(
                    f"calibrator {calibrator!r} was not evaluated for {method!r}; evaluated: "
                    f"{sorted(table.loc[table['method'] == method, 'calibrator'].unique())}"
                )
            pieces.append(
                cal_rows.assign(
                    label=cal_rows["label"] + f" ({calibrator.upper()})", calibrator=UNCALIBRATED
                )
            )
    wide = cell_table(pd.concat(pieces), TABLE_METRICS)
    return with_numbers(wide.drop(columns="calibrator").rename(columns=TABLE_HEADERS))


@report(
    "meta_tables",
    calibrators=calibrators_in("calibrated"),
    options={"calibrated": optional(mapping(TEXT, TEXT)), "ablation": optional(list_of(TEXT))},
)
def meta_tables(
    results: StudyResults,
    calibrated: dict[str, str] | None = None,
    ablation: list[str] | None = None,
) -> dict[str, Any]:
    """Table 1 (every method; ``calibrated`` adds e.g. {fm_ce: ts} as "CE (TS)") and Table 2
    (the ``ablation`` pair, FL_γ vs FL_γ-SECE): Error, NLL, ECE, MCE, AdaECE (the paper's ACE:
    adaptive, equal-mass), Classwise-ECE on the test split, mean ± std over seeds, % except
    NLL; and ``published`` (the paper's Tables 1-2 beside ours) when the study's dataset and
    architecture are the paper's (ResNet-18 on CIFAR-10 / 100, Tiny-ImageNet)."""
    table1 = paper_table(results.metrics, results.methods, calibrated)
    out: dict[str, Any] = {"table1": table1}
    text = [
        f"# {results.study} on {results.dataset_label}: Table 1\n",
        f"Test split, mean ± std over seeds {SEEDS_AVERAGED}. "
        f"{table_units_note(table1, TABLE_METRICS)}"
        + (f" {EQUAL_MASS_NOTE}" if metric_name("ece_em") in table1 else "")
        + "\n",
        paper_view(table1).to_markdown(index=False),
    ]
    if ablation:
        table2 = paper_table(results.metrics, ablation)
        out["table2"] = table2
        text += [
            "\n\n## Table 2: calibration gain of the meta loss\n",
            paper_view(table2).to_markdown(index=False),
        ]
    ts_key = next(iter((calibrated or {}).values()), None)
    published, section = published_artifacts(
        results, "focal_meta", {"ts": ts_key} if ts_key else {}
    )
    out["tables"] = "\n".join(text) + "\n" + section
    return {**out, **published}


def epoch_curves(
    histories: dict[tuple[str, int], pd.DataFrame], labels: dict[str, str]
) -> pd.DataFrame:
    """Per label and epoch, the seed mean of test ECE, test error (from the accuracy) and
    the mean / std of the learned γ on test and val.

    Args:
        histories: (method, seed) -> the run's per-epoch history.
        labels: method key -> display label.

    Returns:
        Columns label, epoch and those of the history columns present.
    """
    frames = [h.assign(label=labels[m]) for (m, _), h in histories.items()]
    if not frames:
        raise ValueError("meta_curves needs the runs' histories")
    history = pd.concat(frames, ignore_index=True)
    columns = [c for c in CURVE_COLUMNS if c in history.columns]
    if "test_accuracy" in history:
        history["test_error"] = 1.0 - history["test_accuracy"]
        columns = sorted(set(columns) | {"test_error"})
    return history.groupby(["label", "epoch"], sort=False)[columns].mean().reset_index()


def robust_limits(curves: pd.DataFrame, column: str) -> tuple[float, float, int]:
    """Y-limits of ``column`` (×100) that show the range of the later epochs.

    The first epochs of a run from scratch have an ECE far above the rest (48 % after
    epoch 1 where later epochs lie between 2 and 10 %): axis limits set by them flatten
    every curve that matters. The limits cover the epochs after the first
    :data:`WARMUP_SHARE` of them (at least one epoch skipped once a run has
    :data:`MIN_EPOCHS_TO_SKIP` epochs), with a 5 % margin.

    Returns:
        ``(low, high, first)``: the limits and the first epoch they cover (the first epoch
        of the curves when none is skipped).
    """
    epochs = np.sort(curves["epoch"].unique())
    skipped = int(np.ceil(WARMUP_SHARE * len(epochs))) if len(epochs) >= MIN_EPOCHS_TO_SKIP else 0
    first = int(epochs[skipped])
    values = 100 * curves.loc[curves["epoch"] >= first, column].dropna()
    low, high = float(values.min()), float(values.max())
    margin = 0.05 * (high - low) or 0.5
    return low - margin, high + margin, first


def curves_figure(curves: pd.DataFrame, styles: dict[str, MethodStyle]) -> plt.Figure:
    """Fig. 3: test ECE per epoch (a–b), mean and std of the learned γ on test (c–d); the
    ECE axis fitted to the later epochs (:func:`robust_limits`, stated under its title),
    one legend right of the panels.

    Args:
        curves: :func:`epoch_curves`.
        styles: label -> style (:func:`~calib_pipeline.reports.common.method_styles`).
    """
    fig, axes = plt.subplots(1, 3, figsize=(15, 4), layout="constrained")
    line = {"linewidth": 1.2, "markersize": 3}
    for label, frame in curves.groupby("label", sort=False):
        style = styles[label].line()
        axes[0].plot(frame["epoch"], 100 * frame["test_ece"], label=label, **style, **line)
        if "test_gamma_mean" in frame and frame["test_gamma_mean"].notna().any():
            axes[1].plot(frame["epoch"], frame["test_gamma_mean"], **style, **line)
            axes[2].plot(frame["epoch"], frame["test_gamma_std"], **style, **line)
    low, high, first = robust_limits(curves, "test_ece")
    title = f"test ECE per epoch, {MEAN_OVER_SEEDS}"
    above = 100 * curves.loc[curves["epoch"] < first, "test_ece"].max()
    if above > high:
        title += f"\ny-axis fitted to epochs ≥ {first} (epochs before reach {above:.1f} %)"
    axes[0].set_ylim(low, high)
    axes[0].set(title=title, xlabel="epoch", ylabel=axis_label("ece"))
    axes[1].set(title=f"mean of γ on test, {MEAN_OVER_SEEDS}", xlabel="epoch", ylabel="mean γ")
    axes[2].set(title=f"std of γ on test, {MEAN_OVER_SEEDS}", xlabel="epoch", ylabel="std γ")
    for ax in axes:
        ax.title.set_fontsize(10)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    legend_outside(fig, axes[0])
    return fig


@report("meta_curves", needs=("histories",))
def meta_curves(results: StudyResults) -> dict[str, Any]:
    """Fig. 3: test ECE per epoch for every method (a–b) and the mean / std of the learned γ
    on test (and val) per epoch for the γ-Net methods (c–d), averaged over seeds."""
    curves = epoch_curves(results.histories, results.labels)
    styles = method_styles(results.methods, results.labels)
    return {"curves": curves, "figure3": curves_figure(curves, styles)}


def _test_logits(logits: dict[tuple[str, int], dict[str, Any]]) -> dict[str, list[tuple[Any, Any]]]:
    """method -> [(test logits, test labels)] of every seed."""
    by_method: dict[str, list[tuple[Any, Any]]] = {}
    for (method, _), run in sorted(logits.items()):
        by_method.setdefault(method, []).append((run["test"]["logits"], run["test"]["labels"]))
    if not by_method:
        raise ValueError("this report needs the runs' logits")
    return by_method


def ece_mce_by_bins(
    logits: dict[tuple[str, int], dict[str, Any]],
    labels: dict[str, str],
    bin_counts: Sequence[int] = BIN_COUNTS,
) -> pd.DataFrame:
    """Test ECE and MCE of every method for each bin count, mean over seeds.

    Args:
        logits: (method, seed) -> the run's cached logits (``test``: logits, labels).
        labels: method key -> display label.
        bin_counts: the bin counts.

    Returns:
        Columns method, label, n_bins, ece, mce (fractions, not %).
    """
    rows = []
    for method, runs in _test_logits(logits).items():
        stacked_logits = torch.stack([z for z, _ in runs])
        stacked_labels = torch.stack([y for _, y in runs])
        for count in bin_counts:
            values = calibration_metrics_batched(
                stacked_logits, stacked_labels, n_bins=count, keys=["ece", "mce"]
            )
            rows.append(
                {
                    "method": method,
                    "label": labels[method],
                    "n_bins": count,
                    "ece": float(np.mean(values["ece"])),
                    "mce": float(np.mean(values["mce"])),
                }
            )
    return pd.DataFrame(rows)


def bins_figure(table: pd.DataFrame, styles: dict[str, MethodStyle]) -> plt.Figure:
    """Fig. 5: ECE and MCE (%) against the number of bins, a line per method, the legend
    right of the panels.

    Args:
        table: :func:`ece_mce_by_bins`.
        styles: method key -> style (:func:`~calib_pipeline.reports.common.method_styles`).
    """
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
    for (method, label), frame in table.groupby(["method", "label"], sort=False):
        style = {**styles[method].line(), "markersize": 4}
        axes[0].plot(frame["n_bins"], 100 * frame["ece"], label=label, **style)
        axes[1].plot(frame["n_bins"], 100 * frame["mce"], **style)
    for ax, metric in zip(axes, ("ece", "mce")):
        ax.set(
            xscale="log",
            xlabel="number of bins",
            ylabel=axis_label(metric),
            title=f"test {metric_name(metric)} vs number of bins, {MEAN_OVER_SEEDS}",
        )
    legend_outside(fig, axes[0])
    return fig


@report("bin_robustness", needs=("logits",), options={"n_bins": optional(list_of(integer(low=1)))})
def bin_robustness(results: StudyResults, n_bins: list[int] | None = None) -> dict[str, Any]:
    """Fig. 5: test ECE and MCE of every method for bin counts 10 … 1000 (mean over seeds)."""
    table = ece_mce_by_bins(results.logits, results.labels, n_bins or BIN_COUNTS)
    return {"ece_mce_vs_bins": table, "figure5": bins_figure(table, method_styles(results.methods))}


def learned_gammas(
    logits: dict[tuple[str, int], dict[str, Any]], labels: dict[str, str]
) -> dict[str, np.ndarray]:
    """Label -> the learned per-sample γ on the test set of every γ-Net method, seeds pooled."""
    gammas: dict[str, np.ndarray] = {}
    for (method, _), run in sorted(logits.items()):
        if "gamma_test" in run:
            values = torch.as_tensor(run["gamma_test"]).double().numpy()
            gammas[labels[method]] = np.concatenate(
                [gammas.get(labels[method], np.empty(0)), values]
            )
    if not gammas:
        raise ValueError(
            "no run of this study has learned γ values (γ-Net methods store gamma_test)"
        )
    return gammas


def gamma_summary(gammas: dict[str, np.ndarray]) -> pd.DataFrame:
    """Mean, std, min, median and max of the learned γ per label."""
    return pd.DataFrame(
        [
            {
                "label": k,
                "mean": v.mean(),
                "std": v.std(),
                "min": v.min(),
                "median": np.median(v),
                "max": v.max(),
            }
            for k, v in gammas.items()
        ]
    )


def gamma_figure(gammas: dict[str, np.ndarray], bins: int, colors: dict[str, Any]) -> plt.Figure:
    """Overlaid histograms of the learned γ, one per label (``colors``: label -> colour):
    each a light fill under an outline in the method's colour, so overlapping ones stay
    apart; the legend right of the panel."""
    fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
    for label, values in gammas.items():
        ax.hist(values, bins=bins, histtype="stepfilled", alpha=0.25, color=colors[label])
        ax.hist(values, bins=bins, histtype="step", linewidth=1.4, label=label, color=colors[label])
    ax.set(
        xlabel="learned γ on test",
        ylabel="samples",
        title=f"distribution of the learned focal γ, {POOLED_OVER_SEEDS}",
    )
    legend_outside(fig, ax)
    return fig


@report("gamma_histogram", needs=("logits",), options={"bins": integer(low=1)})
def gamma_histogram(results: StudyResults, bins: int = 40) -> dict[str, Any]:
    """Histogram of the learned per-sample γ on the test set for every γ-Net method (seeds
    pooled)."""
    gammas = learned_gammas(results.logits, results.labels)
    colors = method_colors(results.methods, results.labels)
    return {
        "gamma_summary": gamma_summary(gammas),
        "gamma_histogram": gamma_figure(gammas, bins, colors),
    }
