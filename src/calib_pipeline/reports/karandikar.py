"""Karandikar et al. (2021), *Soft calibration objectives for neural networks*: every
(primary, secondary) loss pair of the ``soft_calibration`` study.

- ``karandikar_table`` (Table 2): accuracy and ECE before / after TS and TS-SB-ECE
  (:func:`table`, :func:`grids`).
- ``karandikar_effects`` (Fig. 1): Cohen's d of each secondary loss against none
  (:func:`effects`, drawn by :func:`effects_figure`).

A method's cell (primary, secondary) comes from its label ``"<Primary> + <Secondary>"``
(:func:`loss_cells`) or from the ``losses`` option. Both reports select one member per
sweep group by default, with the paper's rule (``selection="karandikar"``).
"""

from __future__ import annotations

import math
import re
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from calib_pipeline.calibration.stats import T_TESTS, cohens_d, significance_direction, t_test
from calib_pipeline.registry import check_choice
from calib_pipeline.reports.common import (
    PERCENT_METRICS,
    SPREADS,
    UNCALIBRATED,
    as_cells,
    calibrator_key,
    clean_rows,
    legend_outside,
    method_order,
    metric_name,
    paper_header,
    paper_view,
    percent_scaled,
    require_metrics,
    seed_stats,
    stat_cells,
    units_note,
    with_numbers,
    with_selection,
)
from calib_pipeline.reports.registry import (
    BOOLEAN,
    SIGNIFICANCE,
    TEXT,
    StudyResults,
    calibrators_in,
    choice,
    integer,
    list_of,
    mapping,
    optional,
    report,
)
from calib_pipeline.reports.selection import SELECTION_OPTIONS, apply_selection

LABEL_ALIASES = {"CE": "NLL"}
PARAMETER_SUFFIX = re.compile(r"\s*\([^()]*\)$")
LOSSES = optional(mapping(TEXT, list_of(TEXT, length=2)))
EFFECT_COLUMNS = [
    "primary",
    "secondary",
    "calibrator",
    "n_none",
    "n_secondary",
    "mean_none",
    "mean_secondary",
    "cohens_d",
    "t",
    "df",
    "p_value",
    "significant",
    "note",
]

Cells = dict[str, tuple[str, str]]


def loss_cells(
    labels: dict[str, str], methods: list[str], losses: dict[str, Any] | None = None
) -> Cells:
    """method -> (primary, secondary), from ``losses`` or parsed from the labels.

    A label ``"<Primary> + <Secondary>"`` gives both, a bare ``"<Primary>"`` has secondary
    ``none``; a trailing sweep suffix ``"(param=value)"`` is ignored and ``CE`` means
    ``NLL``.

    Args:
        labels: method key -> display label.
        methods: the methods of the table.
        losses: method key -> ``[primary, secondary]``, overriding the labels.

    Returns:
        Method key -> (primary, secondary); ``ValueError`` when two methods share a cell.
    """
    if losses is not None:
        missing = [m for m in methods if m not in losses]
        bad = {
            m: v for m, v in losses.items() if not (isinstance(v, (list, tuple)) and len(v) == 2)
        }
        if missing or bad:
            raise ValueError(
                f"losses must map every method to [primary, secondary]; missing: {missing}, "
                f"malformed: {bad}"
            )
        return {m: (str(losses[m][0]), str(losses[m][1])) for m in methods}
    cells = {}
    for method in methods:
        label = PARAMETER_SUFFIX.sub("", labels.get(method, method))
        primary, _, secondary = (part.strip() for part in label.partition(" + "))
        cells[method] = (LABEL_ALIASES.get(primary, primary), secondary or UNCALIBRATED)
    clash = pd.Series(cells).loc[lambda s: s.duplicated(keep=False)]
    if not clash.empty:
        raise ValueError(
            f"methods share a (primary, secondary) cell: {clash.to_dict()}; "
            "pass losses=... to map them"
        )
    return cells


def _selected_cells(
    results: StudyResults,
    selection: str | None,
    selection_metric: str | None,
    losses: dict[str, Any] | None,
) -> tuple[pd.DataFrame, pd.DataFrame | None, Cells]:
    selected, record = apply_selection(results.metrics, results.groups, selection, selection_metric)
    cells = loss_cells(
        results.labels, method_order(results.methods, present=selected["method"]), losses
    )
    return selected, record, cells


# --- Table 2 -----------------------------------------------------------------------------


def _axes(cells: Cells) -> tuple[list[str], list[str]]:
    """The primary losses and the secondary losses (``none`` first) in first-seen order."""
    primaries = list(dict.fromkeys(p for p, _ in cells.values()))
    secondaries = list(dict.fromkeys([UNCALIBRATED, *(s for _, s in cells.values())]))
    return primaries, secondaries


def table_columns(
    tidy: pd.DataFrame, metric: str, ts: str | None, ts_sb_ece: str | None
) -> dict[str, tuple[str, str]]:
    """Column header -> (metric, calibrator) of Table 2, each metric by its name (the paper's
    "ECE", "ECE+TS" are ``L2-ECE``, ``L2-ECE+TS`` with the default ``ece_l2``); a ``None``
    calibrator drops its column."""
    name = metric_name(metric)
    columns = {metric_name("accuracy"): ("accuracy", UNCALIBRATED), name: (metric, UNCALIBRATED)}
    for suffix, key in (("+TS", ts), ("+TS-SB-ECE", ts_sb_ece)):
        if key is not None:
            columns[name + suffix] = (metric, calibrator_key(tidy, key))
    return columns


def table(
    tidy: pd.DataFrame,
    cells: Cells,
    *,
    metric: str = "ece_l2",
    ts: str | None = "ts",
    ts_sb_ece: str | None = "ts_sb_ece",
    spread: str = "sem",
    digits: int = 2,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Karandikar et al. Table 2 on the clean test split, ×100.

    Args:
        tidy: the tidy metrics table.
        cells: :func:`loss_cells` of its methods.
        metric: the ECE shown (default ``ece_l2``).
        ts, ts_sb_ece: calibrator keys of the ``ECE+TS`` / ``ECE+TS-SB-ECE`` columns
            (``None`` drops the column).
        spread: ``"sem"`` (the paper) or ``"std"``.
        digits: decimals.

    Returns:
        ``(table, means)``: the table (Primary, Secondary, Accuracy, <metric name>,
        <metric name>+TS, <metric name>+TS-SB-ECE formatted (:func:`table_columns`); rows
        by primary, then secondary with ``none`` first; then their numbers,
        :func:`~.common.with_numbers`) and the seed means of its cells in the layout.
    """
    check_choice("spread", spread, SPREADS)
    require_metrics(tidy, ["accuracy", metric])
    columns = table_columns(tidy, metric, ts, ts_sb_ece)
    rows = clean_rows(tidy)
    rows = rows[rows["metric"].isin(["accuracy", metric])]
    stats = seed_stats(percent_scaled(rows), ["method", "calibrator", "metric"], sem=True)
    stats["cell"] = stat_cells(stats, spread, digits)
    indexed = stats.set_index(["method", "calibrator", "metric"])
    primaries, secondaries = _axes(cells)
    ordered = sorted(
        cells, key=lambda m: (primaries.index(cells[m][0]), secondaries.index(cells[m][1]))
    )

    def layout(value: str) -> pd.DataFrame:
        return pd.DataFrame(
            [
                {
                    "Primary": cells[m][0],
                    "Secondary": cells[m][1],
                    **{
                        name: indexed.at[(m, cal, key), value]
                        for name, (key, cal) in columns.items()
                    },
                }
                for m in ordered
            ]
        )

    return with_numbers(layout("cell")), layout("mean")


def grids(wide: pd.DataFrame, cells: Cells) -> dict[str, pd.DataFrame]:
    """Each column of :func:`table` as a grid: rows primary, columns secondary, in the
    first-seen order of ``cells``.

    Returns:
        ``grid_<column>`` (lower case, ``+`` and ``-`` as ``_``) -> the grid, its cells'
        numbers after them.
    """
    primaries, secondaries = _axes(cells)
    cell_frame = as_cells(wide)
    out = {}
    for name in cell_frame.columns[2:]:
        grid = cell_frame.pivot(index="Primary", columns="Secondary", values=name)
        grid = grid.reindex(index=primaries, columns=[s for s in secondaries if s in grid.columns])
        grid.columns.name = None
        key = f"grid_{name.lower().replace('+', '_').replace('-', '_')}"
        out[key] = with_numbers(grid.reset_index())
    return out


def bold_lowest(wide: pd.DataFrame, means: pd.DataFrame) -> pd.DataFrame:
    """The layout of :func:`table` with the lowest mean of each ECE column in Markdown bold."""
    bold = paper_view(wide).copy()
    for name in bold.columns[3:]:
        best = int(np.nanargmin(means[name].to_numpy(dtype=float)))
        bold.loc[best, name] = f"**{bold.loc[best, name]}**"
    return bold


TABLE_OPTIONS = {
    "metric": TEXT,
    "ts": optional(TEXT),
    "ts_sb_ece": optional(TEXT),
    "spread": choice(*SPREADS),
    "digits": integer(low=0),
    "losses": LOSSES,
    **SELECTION_OPTIONS,
}


@report("karandikar_table", calibrators=calibrators_in("ts", "ts_sb_ece"), options=TABLE_OPTIONS)
def karandikar_table(
    results: StudyResults,
    metric: str = "ece_l2",
    ts: str | None = "ts",
    ts_sb_ece: str | None = "ts_sb_ece",
    spread: str = "sem",
    digits: int = 2,
    losses: dict[str, list[str]] | None = None,
    selection: str | None = "karandikar",
    selection_metric: str | None = None,
) -> dict[str, Any]:
    """Karandikar et al. Table 2: accuracy and ECE (ℓ2, equal mass) before / after TS and
    TS-SB-ECE for every (primary, secondary) loss.

    Args:
        metric: the ECE (default ``ece_l2``, 15 equal-mass bins, ℓ2 norm); ×100.
        ts, ts_sb_ece: calibrator keys of the ``ECE+TS`` and ``ECE+TS-SB-ECE`` columns
            (``None`` drops the column).
        spread: ``"sem"`` (the paper) or ``"std"``.
        digits: decimals.
        losses: method key -> ``[primary, secondary]``; default parses the labels
            ``"<Primary> + <Secondary>"`` / ``"<Primary>"`` (secondary ``none``), ``CE`` =
            ``NLL``.
        selection, selection_metric: one member per sweep group, by default the paper's
            rule (lowest val ``ece_l2`` less than 1 point below the best val accuracy).

    Returns:
        ``table`` (Primary, Secondary, Accuracy, L2-ECE, L2-ECE+TS, L2-ECE+TS-SB-ECE with
        the default metric: the paper's ECE columns; clean test split), ``grid_<column>``
        (rows primary, columns secondary, one per column), ``karandikar_table`` (Markdown,
        best value of each of those columns in bold) and ``selection``.
    """
    selected, record, cells = _selected_cells(results, selection, selection_metric, losses)
    wide, means = table(
        selected, cells, metric=metric, ts=ts, ts_sb_ece=ts_sb_ece, spread=spread, digits=digits
    )
    columns = table_columns(selected, metric, ts, ts_sb_ece)
    calibrated = ", ".join(
        f"{n} = `{cal}`" for n, (_, cal) in columns.items() if cal != UNCALIBRATED
    )
    text = paper_header(
        results, "Karandikar et al. Table 2: primary × secondary losses", spread, record
    )
    text += (
        f"Clean test split; {metric_name(metric)} = `{metric}`, in the paper's columns ECE, "
        f"ECE+TS, ECE+TS-SB-ECE. {units_note(['accuracy', metric])} "
        f"Post-hoc columns: {calibrated or 'none'}, "
        f"fitted on the validation split. Bold: lowest mean in each {metric_name(metric)} "
        "column.\n\n" + bold_lowest(wide, means).to_markdown(index=False) + "\n"
    )
    return with_selection({"table": wide, **grids(wide, cells), "karandikar_table": text}, record)


# --- Fig. 1 ------------------------------------------------------------------------------


def effect_row(
    values: pd.Series,
    metric: str,
    baseline: str,
    method: str,
    calibrator: str,
    test: str,
    paired: bool,
    alpha: float,
) -> dict[str, Any]:
    """Cohen's d and t-test of ``baseline`` vs ``method`` under ``calibrator``.

    Args:
        values: per-seed test values indexed by (method, calibrator, seed).
        metric: the metric (means in its unit, :func:`~.common.metric_unit`).
        baseline, method: the method without and with the secondary loss.
        calibrator: the calibrator both are compared under.
        test, paired, alpha: see :func:`effects`.

    Returns:
        calibrator, n_none, n_secondary, mean_none, mean_secondary, cohens_d, t, df,
        p_value, significant, note (NaN with a note if either has fewer than 2 seeds).
    """
    a = values.loc[(baseline, calibrator)]
    b = values.loc[(method, calibrator)]
    if paired:
        common = a.index.intersection(b.index)
        a, b = a.loc[common], b.loc[common]
    scale = 100.0 if metric in PERCENT_METRICS else 1.0
    row = {
        "calibrator": calibrator,
        "n_none": len(a),
        "n_secondary": len(b),
        "mean_none": scale * float(a.mean()),
        "mean_secondary": scale * float(b.mean()),
        "cohens_d": math.nan,
        "t": math.nan,
        "df": math.nan,
        "p_value": math.nan,
        "significant": False,
        "note": "",
    }
    if min(len(a), len(b)) < 2:
        return row | {
            "note": "needs >= 2 seeds per method"
            + (" (shared seeds when paired)" if paired else "")
        }
    result = t_test(a.to_numpy(), b.to_numpy(), test=test, paired=paired)
    return row | {
        "cohens_d": cohens_d(a.to_numpy(), b.to_numpy(), paired=paired),
        "t": result.statistic,
        "df": result.df,
        "p_value": result.p_value,
        "significant": significance_direction(result, alpha) != 0,
    }


def effects(
    tidy: pd.DataFrame,
    cells: Cells,
    *,
    metric: str = "ece_l2",
    calibrators: list[str] | None = None,
    test: str = "welch",
    paired: bool = False,
    alpha: float = 0.05,
) -> pd.DataFrame:
    """Cohen's d of every ``<primary> + <secondary>`` against ``<primary>`` alone.

    Args:
        tidy: the tidy metrics table.
        cells: :func:`loss_cells` of its methods.
        metric: the ECE compared, clean test split.
        calibrators: calibrator keys to compare under (default every one of the table,
            ``none`` included).
        test: ``"welch"`` or ``"student"`` (ignored when ``paired``).
        paired: pair the runs of the two methods by seed.
        alpha: significance level of the ``significant`` column.

    Returns:
        Columns ``EFFECT_COLUMNS``, a row per (primary, secondary, calibrator).
    """
    check_choice("test", test, T_TESTS)
    SIGNIFICANCE.validate("alpha", alpha)
    require_metrics(tidy, [metric])
    keys = [UNCALIBRATED, *[c for c in dict.fromkeys(tidy["calibrator"]) if c != UNCALIBRATED]]
    chosen = list(calibrators or keys)
    unknown = [c for c in chosen if c not in keys]
    if unknown:
        raise ValueError(f"unknown calibrator(s) {unknown}; valid calibrator keys: {keys}")
    rows = clean_rows(tidy)
    values = (
        rows[rows["metric"] == metric]
        .set_index(["method", "calibrator", "seed"])["value"]
        .sort_index()
    )
    by_cell = {cell: method for method, cell in cells.items()}
    found = [
        effect_row(
            values, metric, by_cell[(primary, UNCALIBRATED)], method, cal, test, paired, alpha
        )
        | {"primary": primary, "secondary": secondary}
        for (primary, secondary), method in by_cell.items()
        if secondary != UNCALIBRATED and (primary, UNCALIBRATED) in by_cell
        for cal in chosen
    ]
    if not found:
        raise ValueError(
            f"no primary loss has both a 'none' cell and a secondary loss; cells: {sorted(by_cell)}"
        )
    return pd.DataFrame(found)[EFFECT_COLUMNS]


def effects_figure(frame: pd.DataFrame, study: str, metric: str = "ece_l2") -> plt.Figure:
    """Grouped bars of Cohen's d on ``metric``: secondary losses along x, one bar per primary
    loss, a panel per calibrator of ``frame`` (:func:`effects`)."""
    calibrators = list(dict.fromkeys(frame["calibrator"]))
    fig, axes = plt.subplots(
        1,
        len(calibrators),
        figsize=(4.5 * len(calibrators) + 1.2, 3.4),
        squeeze=False,
        sharey=True,
        layout="constrained",
    )
    primaries = list(dict.fromkeys(frame["primary"]))
    secondaries = list(dict.fromkeys(frame["secondary"]))
    width = 0.8 / len(primaries)
    x = np.arange(len(secondaries))
    for ax, cal in zip(axes[0], calibrators):
        part = frame[frame["calibrator"] == cal].set_index(["primary", "secondary"])["cohens_d"]
        for i, primary in enumerate(primaries):
            heights = [part.get((primary, s), math.nan) for s in secondaries]
            ax.bar(
                x + (i - (len(primaries) - 1) / 2) * width,
                np.nan_to_num(heights, nan=0.0, posinf=0.0, neginf=0.0),
                width,
                label=primary,
            )
        ax.axhline(0.8, color="k", linestyle="--", linewidth=0.8)
        ax.axhline(0.0, color="k", linewidth=0.6)
        ax.set_xticks(x, secondaries, rotation=30, fontsize=8)
        ax.set_title(
            "no post-hoc calibration" if cal == UNCALIBRATED else f"after {cal}", fontsize=9
        )
    axes[0, 0].set_ylabel(f"Cohen's d (positive = lower {metric_name(metric)})", fontsize=8)
    legend_outside(fig, axes[0, 0], title="primary", title_fontsize=7)
    fig.suptitle(f"{study}: effect size of secondary losses (dashed: d = 0.8)", fontsize=10)
    return fig


def _effects_legend(metric: str, test: str, alpha: float) -> str:
    """What :func:`karandikar_effects`' table holds, before it."""
    return (
        f"Cohen's d on test `{metric}` of `<primary>` vs `<primary> + <secondary>`, pooled SD; "
        "positive = the secondary loss lowers the ECE (0.8 = large). "
        f"p: {test} t-test, two-sided; "
        f"significant at {alpha}. Means (`mean_none`, `mean_secondary`): "
        f"{units_note([metric])}\n\n"
    )


EFFECTS_OPTIONS = {
    "metric": TEXT,
    "calibrators": optional(list_of(TEXT)),
    "test": choice(*T_TESTS),
    "paired": BOOLEAN,
    "alpha": SIGNIFICANCE,
    "losses": LOSSES,
    **SELECTION_OPTIONS,
}


@report("karandikar_effects", calibrators=calibrators_in("calibrators"), options=EFFECTS_OPTIONS)
def karandikar_effects(
    results: StudyResults,
    metric: str = "ece_l2",
    calibrators: list[str] | None = None,
    test: str = "welch",
    paired: bool = False,
    alpha: float = 0.05,
    losses: dict[str, list[str]] | None = None,
    selection: str | None = "karandikar",
    selection_metric: str | None = None,
) -> dict[str, Any]:
    """Karandikar et al. Fig. 1: Cohen's d of each secondary loss against no secondary loss,
    per primary loss, on the test ECE, with a two-sample t-test.

    ``d = (mean_none - mean_secondary) / s_p`` with the pooled standard deviation
    ``s_p = sqrt(((n_1-1) s_1^2 + (n_2-1) s_2^2) / (n_1 + n_2 - 2))`` (``d_z`` of the
    seed-wise differences when ``paired``): **positive = the secondary loss lowers the
    ECE**; 0.8 is a large effect. Needs at least 2 seeds per method; with fewer, d and p
    are NaN and the ``note`` column says why.

    Args:
        metric: the ECE (default ``ece_l2``), clean test split.
        calibrators: calibrator keys to compare under (default every one of the table,
            ``none`` included: the paper shows with and without TS).
        test: ``"welch"`` or ``"student"`` (ignored when ``paired``).
        paired: pair the runs of the two methods by seed.
        alpha: significance level of the ``significant`` column.
        losses, selection, selection_metric: as for ``karandikar_table``.

    Returns:
        ``effects`` (primary, secondary, calibrator, n_none, n_secondary, mean_none,
        mean_secondary, cohens_d, t, df, p_value, significant, note), the bar chart
        ``effect_sizes`` and ``karandikar_effects`` (Markdown).
    """
    selected, record, cells = _selected_cells(results, selection, selection_metric, losses)
    frame = effects(
        selected,
        cells,
        metric=metric,
        calibrators=calibrators,
        test=test,
        paired=paired,
        alpha=alpha,
    )
    text = paper_header(
        results, "Karandikar et al.: effect of each secondary loss on ECE", "std", record
    )
    text += _effects_legend(metric, "paired" if paired else test, alpha)
    text += frame.to_markdown(index=False, floatfmt=".3g") + "\n"
    figure = effects_figure(frame, results.study, metric)
    return with_selection(
        {"effects": frame, "effect_sizes": figure, "karandikar_effects": text}, record
    )
