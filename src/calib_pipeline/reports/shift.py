"""Reports under distribution shift, read from the tidy metrics table.

- ``shift_tables``: per method x calibrator, every metric per corruption and severity
  (mean ± std over seeds) and the mean over corruption types per severity (mean ± SEM
  across types, seeds averaged first), the corruptions that were skipped and why, and
  where accuracy does not fall monotonically with severity.
- ``natural_shift_table``: Singh et al. Table 3 -- per method and calibrator, the metrics
  on each natural-shift set (CIFAR-10.1, CIFAR-10.2), mean ± std over seeds.
- ``shift_figures``: ECE vs severity with ±1 SEM across corruption types (Karandikar et al.
  Fig. 7: a line per method, one panel per calibrator; Fig. 2 / 9: a line per calibrator,
  one panel per method), box plots of ECE over corruption types per severity (Ovadia et
  al.), and accuracy vs ECE under shift.

Corruption sets are grouped by source: generated look-alikes (``shift`` = the bare
corruption name) and official sets (``cifar10_c:fog``) are never pooled. Severity 0 in
the figures is the clean test split. Every metric is shown in its unit
(:func:`~.common.metric_unit`: ×100 but NLL).

SEM across corruption types: ``sem="plain"`` is std(ddof=1)/sqrt(n) over the n types;
``sem="within"`` removes the variability due to the corruption type shared by every
(method, calibrator) of a source and severity -- Cousineau's normalisation y - mean_type +
grand mean with Morey's factor sqrt(J / (J - 1)) over J conditions, the per-condition form
of the correction of Masson & Loftus (2003) that Karandikar et al. use.
"""

from __future__ import annotations

import math
from typing import Any

import matplotlib.colors
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from calib_pipeline.data.shift_suites import parse_shift
from calib_pipeline.registry import check_choice
from calib_pipeline.reports.common import (
    MEAN_OVER_SEEDS,
    PERCENT_METRICS,
    UNCALIBRATED,
    UNSHIFTED,
    axis_label,
    cell_table,
    legend_outside,
    method_colors,
    metric_name,
    paper_view,
    seed_stats,
    stat_cells,
    units_note,
    with_numbers,
)
from calib_pipeline.reports.registry import (
    BOOLEAN,
    METRIC,
    TEXT,
    StudyResults,
    choice,
    list_of,
    number,
    optional,
    report,
)

DEFAULT_SHIFT_METRICS = ["accuracy", "ece", "ece_em", "nll", "brier", "auroc"]
DEFAULT_NATURAL_METRICS = ["accuracy", "brier", "ece", "auroc"]
SEM_MODES = ("plain", "within")
CONDITION = ["label", "calibrator"]
SOURCES = optional(list_of(TEXT))


# --- tables ------------------------------------------------------------------------------


def shifted_rows(
    metrics: pd.DataFrame, kind: str, sources: list[str] | None = None
) -> pd.DataFrame:
    """Test rows of shifted sets of ``kind`` (``"corruption"`` or ``"natural"``), with
    ``source`` and ``corruption`` columns parsed from the ``shift`` label."""
    rows = metrics[(metrics["split"] == "test") & (metrics["shift"] != UNSHIFTED)]
    parsed = pd.DataFrame(
        [parse_shift(s) for s in rows["shift"].unique()], columns=["source", "kind", "corruption"]
    ).assign(shift=rows["shift"].unique())
    rows = rows.merge(parsed, on="shift", how="left")
    rows = rows[rows["kind"] == kind]
    if sources is not None:
        rows = rows[rows["source"].isin(sources)]
    return rows.reset_index(drop=True)


def with_metrics(rows: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """The rows of ``metrics``; a metric the evaluation did not compute on shifted sets
    raises ``ValueError``."""
    absent = [m for m in metrics if m not in set(rows["metric"])]
    if absent:
        raise ValueError(
            f"metric(s) {absent} were not computed on the shifted sets (they have "
            f"{sorted(set(rows['metric']))}); add them to the evaluation's shift metrics"
        )
    return rows[rows["metric"].isin(metrics)]


def corruption_means(rows: pd.DataFrame) -> pd.DataFrame:
    """Mean, std and count over seeds per (source, label, calibrator, corruption,
    severity, metric) of :func:`shifted_rows`."""
    return seed_stats(rows, ["source", *CONDITION, "corruption", "severity", "metric"])


def corruption_sem(grid: pd.DataFrame, mode: str) -> pd.Series:
    """SEM across corruption types (rows) of each condition (columns) of ``grid``.

    ``plain``: std(ddof=1) / sqrt(n). ``within`` (J >= 2 conditions, types with every
    condition): std of y_tc - mean_t + grand mean, times sqrt(J / (J - 1)), over sqrt(n).
    """
    check_choice("sem", mode, SEM_MODES)
    if mode == "within" and grid.shape[1] >= 2:
        complete = grid.dropna()
        normalised = complete.sub(complete.mean(axis=1), axis=0) + complete.to_numpy().mean()
        factor = math.sqrt(grid.shape[1] / (grid.shape[1] - 1))
        return normalised.std(ddof=1) * factor / np.sqrt(len(complete))
    return grid.std(ddof=1) / np.sqrt(grid.count())


def _clean_levels(table: pd.DataFrame, metrics: list[str], sources: list[str]) -> pd.DataFrame:
    """The clean test split as severity 0 (level ``clean``, one set, no SEM) of each of
    ``sources``."""
    clean = table[
        (table["split"] == "test") & (table["shift"] == UNSHIFTED) & table["metric"].isin(metrics)
    ]
    clean = (
        clean.groupby([*CONDITION, "metric"], sort=False)["value"]
        .mean()
        .rename("mean")
        .reset_index()
    )
    return pd.concat(
        [clean.assign(source=s, severity=0, level="clean", sem=np.nan, n=1) for s in sources],
        ignore_index=True,
    )


def severity_summary(
    table: pd.DataFrame, rows: pd.DataFrame, metrics: list[str], sem: str
) -> pd.DataFrame:
    """Per (source, method, calibrator, severity, metric): mean and SEM across corruption
    types of the seed-averaged values, plus the clean test split as severity 0 (SEM NaN)
    for graded sources; ``level`` names the row: ``clean``, ``1`` .. ``5`` or ``ungraded``
    (MNIST-C, whose corruptions have no severity).

    Args:
        table: the tidy table (for the clean rows).
        rows: :func:`shifted_rows` of the corruption kind.
        metrics: metric keys.
        sem: ``"plain"`` or ``"within"``.

    Returns:
        Columns source, label, calibrator, severity, level, metric, mean, sem, n (types).
    """
    out = []
    for (source, severity, metric), block in corruption_means(rows).groupby(
        ["source", "severity", "metric"], sort=False
    ):
        grid = block.pivot_table(index="corruption", columns=CONDITION, values="mean", sort=False)
        out.append(
            pd.DataFrame(
                {
                    "source": source,
                    "severity": severity,
                    "metric": metric,
                    "mean": grid.mean(),
                    "sem": corruption_sem(grid, sem),
                    "n": grid.count(),
                }
            ).reset_index()
        )
    summary = pd.concat(out, ignore_index=True)
    summary["level"] = np.where(
        summary["severity"] > 0, summary["severity"].astype(str), "ungraded"
    )
    graded = summary.groupby("source", sort=False)["severity"].min().loc[lambda m: m > 0].index
    columns = ["source", *CONDITION, "severity", "level", "metric", "mean", "sem", "n"]
    parts = [_clean_levels(table, metrics, list(graded))[columns]] if len(graded) else []
    summary = pd.concat([*parts, summary[columns]], ignore_index=True)
    return _ordered(summary, ["source", "label", "calibrator", "severity"], rows)


def accuracy_by_severity(rows: pd.DataFrame, tolerance: float = 0.0) -> pd.DataFrame:
    """Uncalibrated accuracy (×100, seed mean) per method and corruption by severity, the
    largest rise from one severity to the next (percentage points) and ``monotone``: no
    rise above ``tolerance``."""
    acc = rows[
        (rows["metric"] == "accuracy")
        & (rows["calibrator"] == UNCALIBRATED)
        & (rows["severity"] > 0)
    ]
    if acc.empty:
        return pd.DataFrame()
    wide = acc.assign(value=acc["value"] * 100).pivot_table(
        index=["source", "label", "corruption"], columns="severity", values="value", sort=False
    )
    steps = np.diff(wide.to_numpy(), axis=1)
    wide.columns = [f"severity {c}" for c in wide.columns]
    rise = np.nan_to_num(steps, nan=0.0).clip(min=0.0).max(axis=1, initial=0.0)
    wide = wide.round(2)
    wide["largest rise"] = rise.round(2)
    wide["monotone"] = rise <= tolerance
    return wide.reset_index()


def skipped_table(results: StudyResults) -> pd.DataFrame:
    """Corruptions the shift stage skipped (``"skipped"`` entries of the runs' shift logits)."""
    entries = {
        (entry["source"], entry["shift"]): entry["skipped"]
        for run in results.shift.values()
        for entry in run.values()
        if "skipped" in entry
    }
    return pd.DataFrame(
        [(source, shift, reason) for (source, shift), reason in entries.items()],
        columns=["source", "corruption", "reason"],
    )


def format_wide(
    stats: pd.DataFrame,
    keys: list[str],
    metrics: list[str],
    spread: str = "std",
    count: str = "n_seeds",
) -> pd.DataFrame:
    """``mean ± spread`` cells in each metric's unit (the mean alone where the spread is
    undefined), one column per metric headed by its name (:func:`~.common.metric_name`),
    rows in the first-seen order of ``keys``; then their numbers and ``count`` (how many
    values each mean is over: :func:`~.common.with_numbers`)."""
    scale = np.where(stats["metric"].isin(PERCENT_METRICS), 100.0, 1.0)
    scaled = stats.assign(mean=stats["mean"] * scale, **{spread: stats[spread] * scale})
    wide = scaled.assign(cell=stat_cells(scaled, spread)).pivot(
        index=keys, columns="metric", values="cell"
    )
    wide = wide.reindex(columns=[m for m in metrics if m in wide.columns]).reset_index()
    wide = wide.rename(columns={m: metric_name(m) for m in metrics})
    wide.columns.name = None
    return with_numbers(stats[keys].drop_duplicates().merge(wide, on=keys, how="left"), count)


def _ordered(frame: pd.DataFrame, keys: list[str], reference: pd.DataFrame) -> pd.DataFrame:
    """Sort by ``keys`` keeping the first-seen order of sources, labels and calibrators in
    ``reference``."""
    ranked_columns = ["source", *CONDITION]
    ranks = {c: {v: i for i, v in enumerate(dict.fromkeys(reference[c]))} for c in ranked_columns}
    ranked = frame.assign(**{f"_{c}": frame[c].map(ranks[c]) for c in ranked_columns})
    ordered_keys = [f"_{k}" if k in ranked_columns else k for k in keys]
    return (
        ranked.sort_values(ordered_keys, kind="stable")
        .drop(columns=[f"_{c}" for c in ranked_columns])
        .reset_index(drop=True)
    )


def _skipped_markdown(skipped: pd.DataFrame) -> str:
    if skipped.empty:
        return "none: every requested corruption was evaluated.\n"
    return skipped.to_markdown(index=False) + "\n"


def _empty_note(results: StudyResults, kind: str, sources: list[str] | None) -> str:
    how = (
        "add `natural: [cifar10_1, cifar10_2]` to the `shift` parameters (CIFAR-10 models; "
        "files in "
        "the layouts of docs/shift.md)"
        if kind == "natural"
        else "list corruptions in the `shift` parameters (`corruptions: all`)"
    )
    scope = f" from sources {sources}" if sources else ""
    return (
        f"# {results.study} on {results.dataset_label}\n\nNo {kind}-shift results{scope} in this "
        f"study's metrics table: {how} and re-run `kedro run --pipelines=shift,reporting`.\n"
    )


def _tables_markdown(
    results: StudyResults,
    mean_table: pd.DataFrame,
    skipped: pd.DataFrame,
    accuracy: pd.DataFrame,
    sem: str,
    tolerance: float,
    metrics: list[str],
) -> str:
    text = [
        f"# {results.study} on {results.dataset_label}: corruptions\n",
        (
            "Mean over corruption types per severity: mean ± SEM across types "
            f"({sem} SEM; seeds averaged first; clean = the unshifted test split). "
            f"{len(results.seeds)} seed(s). {units_note(metrics)} Calibrators were fitted on "
            "the clean validation split. Source `generated` = this project's re-implementation "
            "of H&D's corruptions, not the official benchmark files.\n"
        ),
        paper_view(mean_table).to_markdown(index=False),
        "\n## Skipped corruptions\n",
        _skipped_markdown(skipped),
    ]
    if not accuracy.empty:
        falling = accuracy[~accuracy["monotone"]]
        text += [
            "\n## Accuracy not monotonically falling with severity (uncalibrated)\n",
            (
                f"Rises up to {tolerance:g} percentage points between consecutive severities "
                "count as sampling noise; `largest rise` is the biggest one.\n"
            ),
            falling.to_markdown(index=False)
            if not falling.empty
            else "none: every corruption's accuracy falls monotonically.",
        ]
    return "\n".join(text) + "\n"


@report(
    "shift_tables",
    needs=("shift",),
    ensembles=True,
    options={
        "metrics": optional(list_of(METRIC)),
        "sem": choice(*SEM_MODES),
        "sources": SOURCES,
        "tolerance": number(low=0.0),
    },
)
def shift_tables(
    results: StudyResults,
    metrics: list[str] | None = None,
    sem: str = "plain",
    sources: list[str] | None = None,
    tolerance: float = 1.0,
) -> dict[str, Any]:
    """Corruption tables of a study.

    Args:
        results: the study (tidy metrics; per-run shift entries for the skipped list).
        metrics: metric keys (default accuracy, ece, ece_em (AdaECE), nll, brier, auroc).
        sem: ``"plain"`` or ``"within"`` (see the module docstring).
        sources: keep only these sources (``"generated"``, ``"cifar10_c"``, ...).
        tolerance: accuracy rises from one severity to the next up to this many percentage
            points count as sampling noise (1 pp = 3.6 digits test images).

    Returns:
        ``per_corruption``, ``mean_over_corruptions``, ``accuracy_by_severity`` and
        ``skipped`` tables and the Markdown ``shift_tables``; only the Markdown note when the
        study has no corruption rows.
    """
    metrics = list(metrics or DEFAULT_SHIFT_METRICS)
    rows = shifted_rows(results.metrics, "corruption", sources)
    skipped = skipped_table(results)
    if rows.empty:
        return {
            "shift_tables": _empty_note(results, "corruption", sources) + _skipped_markdown(skipped)
        }
    rows = with_metrics(rows, metrics)
    keys = ["source", *CONDITION, "corruption", "severity"]
    per_corruption = format_wide(corruption_means(rows), keys, metrics)
    summary = severity_summary(results.metrics, rows, metrics, sem)
    mean_table = format_wide(
        summary, ["source", *CONDITION, "level"], metrics, spread="sem", count="n_corruptions"
    )
    accuracy = accuracy_by_severity(rows, tolerance) if "accuracy" in metrics else pd.DataFrame()
    return {
        "per_corruption": per_corruption,
        "mean_over_corruptions": mean_table,
        "accuracy_by_severity": accuracy,
        "skipped": skipped,
        "shift_tables": _tables_markdown(
            results, mean_table, skipped, accuracy, sem, tolerance, metrics
        ),
    }


def natural_table(tidy: pd.DataFrame, sets: list[str], metrics: list[str]) -> pd.DataFrame:
    """Singh et al. Table 3 layout: per (label, calibrator), each metric on each set.

    Args:
        tidy: the tidy metrics table.
        sets: shift names (``"none"``: the clean test split, headed ``test``).
        metrics: metric keys, each in its unit (:func:`~.common.metric_unit`).

    Returns:
        Columns label, calibrator and ``"<set> <metric name>"``, mean ± std over seeds; then
        their numbers (:func:`~.common.with_numbers`).
    """
    table = None
    for shift in sets:
        wide = cell_table(tidy, metrics, shift=shift)
        name = "test" if shift == UNSHIFTED else shift
        wide = wide.rename(columns={m: f"{name} {metric_name(m)}" for m in metrics})
        table = wide if table is None else table.merge(wide, on=CONDITION, how="outer", sort=False)
    table.columns.name = None
    return with_numbers(table)


@report(
    "natural_shift_table",
    options={"metrics": optional(list_of(METRIC)), "include_clean": BOOLEAN},
    shifted=True,
    ensembles=True,
)
def natural_shift_table(
    results: StudyResults, metrics: list[str] | None = None, include_clean: bool = False
) -> dict[str, Any]:
    """Singh et al. Table 3: metrics on each natural-shift set, per method and calibrator.

    Args:
        results: the study.
        metrics: metric keys (default accuracy, brier, ece, auroc).
        include_clean: also show the clean test split first.

    Returns:
        ``table`` (columns ``"<set> <metric name>"``) and the Markdown ``natural_shift_table``;
        only the Markdown note when the study has no natural-shift rows.
    """
    metrics = list(metrics or DEFAULT_NATURAL_METRICS)
    sets = list(dict.fromkeys(shifted_rows(results.metrics, "natural")["shift"]))
    if not sets:
        return {"natural_shift_table": _empty_note(results, "natural", None)}
    table = natural_table(results.metrics, ([UNSHIFTED] if include_clean else []) + sets, metrics)
    text = (
        f"# {results.study} on {results.dataset_label}: natural shift (Singh et al. Table 3 "
        f"layout)\n\nMean ± std over {len(results.seeds)} seed(s). {units_note(metrics)} `none` = "
        "uncalibrated, other calibrators fitted on the clean validation split. Sets: "
        + ", ".join(f"`{s}`" for s in sets)
        + ".\n\n"
        + paper_view(table).to_markdown(index=False)
        + "\n"
    )
    return {"table": table, "natural_shift_table": text}


# --- figures -----------------------------------------------------------------------------


def _scaled(metric: str) -> float:
    return 100.0 if metric in PERCENT_METRICS else 1.0


def severity_lines(
    summary: pd.DataFrame,
    metric: str,
    panel: str,
    line: str,
    title: str,
    sem: str,
    colors: dict[str, Any] | None = None,
) -> plt.Figure:
    """Mean ``metric`` vs severity with ±1 SEM bars: a panel per ``panel`` value, a line per
    ``line`` value (severity 0 = clean test); ``colors`` maps line values to colours."""
    panels = list(dict.fromkeys(summary[panel]))
    fig, axes = plt.subplots(
        1,
        len(panels),
        figsize=(3.4 * len(panels), 3.0),
        squeeze=False,
        sharey=True,
        layout="constrained",
    )
    scale = _scaled(metric)
    for ax, name in zip(axes[0], panels):
        for key, curve in summary[summary[panel] == name].groupby(line, sort=False):
            curve = curve.sort_values("severity")
            ax.errorbar(
                curve["severity"],
                curve["mean"] * scale,
                yerr=curve["sem"].fillna(0) * scale,
                marker="o",
                markersize=3,
                capsize=2,
                linewidth=1,
                label=str(key),
                color=(colors or {}).get(key),
            )
        ax.set_title(f"{panel} {name}" if panel == "calibrator" else str(name), fontsize=9)
        ax.set_xticks(range(6), ["clean", "1", "2", "3", "4", "5"])
        ax.set_xlabel("severity", fontsize=8)
    legend_outside(fig, axes[0][0])
    axes[0][0].set_ylabel(f"{axis_label(metric)}, mean ± SEM ({sem})", fontsize=8)
    fig.suptitle(title, fontsize=10)
    return fig


def boxplots(means: pd.DataFrame, metric: str, title: str, colors: dict[str, Any]) -> plt.Figure:
    """Ovadia et al. style: per severity, one box per method (``colors``: label -> colour)
    of the seed-mean ``metric`` over corruption types; a panel per calibrator."""
    data = means[means["metric"] == metric]
    calibrators = list(dict.fromkeys(data["calibrator"]))
    labels = list(dict.fromkeys(data["label"]))
    severities = sorted(data["severity"].unique())
    panel_width = max(4.0, 0.2 * len(severities) * len(labels) + 1.0)
    fig, axes = plt.subplots(
        1,
        len(calibrators),
        figsize=(panel_width * len(calibrators), 3.2),
        squeeze=False,
        sharey=True,
        layout="constrained",
    )
    width = 0.8 / len(labels)
    scale = _scaled(metric)
    for ax, calibrator in zip(axes[0], calibrators):
        for i, label in enumerate(labels):
            subset = data[(data["calibrator"] == calibrator) & (data["label"] == label)]
            groups = [
                subset.loc[subset["severity"] == s, "mean"].to_numpy() * scale for s in severities
            ]
            positions = np.arange(len(severities)) + (i - (len(labels) - 1) / 2) * width
            boxes = ax.boxplot(
                groups,
                positions=positions,
                widths=width * 0.9,
                patch_artist=True,
                showfliers=True,
                flierprops={"markersize": 2},
            )
            for patch in boxes["boxes"]:
                patch.set_facecolor(colors[label])
            ax.plot([], [], color=colors[label], linewidth=6, label=label)
        ax.set_xticks(range(len(severities)), [str(s) for s in severities])
        ax.set_xlabel("severity", fontsize=8)
        ax.set_title(f"calibrator {calibrator}", fontsize=9)
    legend_outside(fig, axes[0][0])
    axes[0][0].set_ylabel(f"{axis_label(metric)} over corruption types", fontsize=8)
    fig.suptitle(title, fontsize=10)
    return fig


def accuracy_scatter(
    means: pd.DataFrame, metric: str, title: str, colors: dict[str, Any]
) -> plt.Figure:
    """Accuracy vs ``metric`` of every (method, corruption, severity), seed means; colour =
    method (``colors``: label -> colour), darker = more severe; a panel per calibrator."""
    wide = means.pivot_table(
        index=["label", "calibrator", "corruption", "severity"],
        columns="metric",
        values="mean",
        sort=False,
    ).reset_index()
    calibrators = list(dict.fromkeys(wide["calibrator"]))
    fig, axes = plt.subplots(
        1,
        len(calibrators),
        figsize=(3.6 * len(calibrators), 3.2),
        squeeze=False,
        sharex=True,
        sharey=True,
        layout="constrained",
    )
    for ax, calibrator in zip(axes[0], calibrators):
        for label, part in wide[wide["calibrator"] == calibrator].groupby("label", sort=False):
            colour = np.tile(matplotlib.colors.to_rgba(colors[label]), (len(part), 1))
            colour[:, 3] = np.clip(0.25 + 0.15 * part["severity"].to_numpy(), 0, 1)
            ax.scatter(
                part["accuracy"] * 100, part[metric] * _scaled(metric), s=9, c=colour, label=label
            )
        ax.set_title(f"calibrator {calibrator}", fontsize=9)
        ax.set_xlabel(axis_label("accuracy"), fontsize=8)
    legend_outside(fig, axes[0][0])
    axes[0][0].set_ylabel(axis_label(metric), fontsize=8)
    fig.suptitle(
        f"{title}: {metric_name('accuracy')} vs {metric_name(metric)}, {MEAN_OVER_SEEDS} "
        "(darker = more severe)",
        fontsize=10,
    )
    return fig


@report(
    "shift_figures",
    options={"metric": METRIC, "sem": choice(*SEM_MODES), "sources": SOURCES},
    shifted=True,
    ensembles=True,
)
def shift_figures(
    results: StudyResults, metric: str = "ece", sem: str = "plain", sources: list[str] | None = None
) -> dict[str, Any]:
    """Figures under corruption shift (Karandikar Fig. 2 / 7 / 9, Ovadia box plots).

    Args:
        results: the study.
        metric: the calibration metric plotted (Karandikar et al. use ``ece_l2``).
        sem: ``"plain"`` or ``"within"``.
        sources: keep only these sources.

    Returns:
        Figures ``<metric>_vs_severity`` (a line per method, a panel per calibrator),
        ``<metric>_vs_severity_by_method`` (a line per calibrator, a panel per method),
        ``<metric>_boxplots`` and ``accuracy_vs_<metric>``, suffixed ``_<source>`` when
        several sources are present; only a Markdown note without corruption rows.
    """
    rows = shifted_rows(results.metrics, "corruption", sources)
    if rows.empty:
        return {"shift_figures": _empty_note(results, "corruption", sources)}
    with_metrics(rows, [metric, "accuracy"])
    colors = method_colors(results.row_methods, results.row_labels)
    figures: dict[str, Any] = {}
    for source, part in rows.groupby("source", sort=False):
        suffix = f"_{source}" if rows["source"].nunique() > 1 else ""
        summary = severity_summary(results.metrics, part[part["metric"] == metric], [metric], sem)
        title = f"{results.study} on {results.dataset_label}, {source} corruptions"
        if (summary["severity"] > 0).any():  # MNIST-C has no severities to plot against
            figures[f"{metric}_vs_severity{suffix}"] = severity_lines(
                summary, metric, "calibrator", "label", title, sem, colors
            )
            figures[f"{metric}_vs_severity_by_method{suffix}"] = severity_lines(
                summary, metric, "label", "calibrator", title, sem
            )
        means = corruption_means(part)
        figures[f"{metric}_boxplots{suffix}"] = boxplots(means, metric, title, colors)
        if metric != "accuracy":
            figures[f"accuracy_vs_{metric}{suffix}"] = accuracy_scatter(
                means, metric, title, colors
            )
    return figures
