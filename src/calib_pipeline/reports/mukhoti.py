"""Mukhoti et al. (2020), *Calibrating deep neural networks using focal loss*.

- ``mukhoti_table`` (Table 1, C.1-C.3): error and calibration errors before / after
  temperature scaling, the fitted T in parentheses; :func:`table` computes it from the
  tidy metrics table alone.
- ``mukhoti_curves`` (Fig. 1-2): NLL, entropies and the last-layer weight norm over the
  training epochs (:func:`epoch_summary` from the runs' histories).

Every report takes ``selection`` (a rule of :mod:`calib_pipeline.reports.selection`, or
``None`` to show every sweep member) and ``selection_metric``; the selection record is
returned as the ``selection`` table.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.ticker import MaxNLocator

from calib_pipeline.registry import check_choice
from calib_pipeline.reports.common import (
    EQUAL_MASS_NOTE,
    MEAN_OVER_SEEDS,
    SPREADS,
    UNCALIBRATED,
    as_cells,
    calibrator_key,
    clean_rows,
    legend_beside,
    legend_outside,
    method_colors,
    method_labels,
    method_order,
    metric_name,
    metric_unit,
    paper_header,
    paper_view,
    require_metrics,
    run_cells,
    seed_stats,
    units_note,
    with_numbers,
    with_selection,
)
from calib_pipeline.reports.published import published_artifacts
from calib_pipeline.reports.registry import (
    TEXT,
    StudyResults,
    calibrators_in,
    choice,
    integer,
    list_of,
    optional,
    report,
    study_needs_calibrator,
)
from calib_pipeline.reports.selection import SELECTION_OPTIONS, apply_selection

DEFAULT_METRICS = ("ece", "ece_em", "classwise_ece")
SPLITS = ("test", "val")
CURVE_PANELS = (
    "nll",
    "nll_correct",
    "nll_incorrect",
    "entropy_correct",
    "entropy_incorrect",
    "head_weight_norm",
)
# Panel titles of quantities that are not metrics (a metric's panel is titled by its name).
CURVE_TITLES = {
    "nll_correct": "NLL (correct)",
    "nll_incorrect": "NLL (incorrect)",
    "entropy_correct": "entropy (correct)",
    "entropy_incorrect": "entropy (incorrect)",
    "head_weight_norm": "last-layer weight norm",
    "train_loss": "train loss (objective)",
    "train_accuracy": "train Accuracy",
    "lr": "learning rate",
}


# --- Table 1 -----------------------------------------------------------------------------


def fitted_temperatures(
    calibrators: dict[tuple[str, int], dict[str, Any]], runs: Iterable[tuple[str, int]], key: str
) -> pd.DataFrame:
    """The temperature of calibrator ``key`` fitted for each of ``runs``.

    Args:
        calibrators: (method, seed) -> calibrator key -> fitted calibrator.
        runs: the (method, seed) pairs to read.
        key: the temperature calibrator's key.

    Returns:
        Columns method, seed, temperature (NaN for a calibrator without one).
    """
    rows = []
    for method, seed in runs:
        fitted = calibrators.get((method, int(seed)))
        if fitted is None:
            raise ValueError(
                f"no fitted calibrators for run ({method!r}, {seed}); "
                "the report needs 'calibrators'"
            )
        if key not in fitted:
            raise ValueError(
                f"run ({method!r}, {seed}) has no calibrator {key!r}; valid calibrator keys: "
                f"{sorted(fitted)}"
            )
        learned = fitted[key].learned()
        rows.append(
            {
                "method": method,
                "seed": int(seed),
                "temperature": learned.get("temperature", math.nan),
            }
        )
    return pd.DataFrame(rows, columns=["method", "seed", "temperature"])


def table(
    tidy: pd.DataFrame,
    calibrator: str | None = None,
    *,
    metrics: Iterable[str] = DEFAULT_METRICS,
    methods: list[str] | None = None,
    temperatures: pd.DataFrame | None = None,
    spread: str = "std",
    digits: int = 2,
    temperature_digits: int = 2,
) -> pd.DataFrame:
    """Mukhoti et al. Table 1: per method, the error and each calibration error before and
    after temperature scaling on the clean test split, ×100, ``mean ± spread`` over seeds.

    Args:
        tidy: the tidy metrics table (columns method, label, seed, calibrator, split,
            shift, severity, metric, value).
        calibrator: key of the temperature calibrator (default: the table's first
            calibrator other than ``none``).
        metrics: calibration errors shown pre / post (default ECE, AdaECE, classwise ECE).
        methods: the row order (default: first seen in ``tidy``).
        temperatures: :func:`fitted_temperatures`; their mean over seeds is appended to
            each Post-T cell in parentheses.
        spread: ``"std"`` or ``"sem"``.
        digits, temperature_digits: decimals of the cells and of T.

    Returns:
        Columns Method, Error, then ``<metric> Pre T`` / ``<metric> Post T`` (formatted),
        then their numbers (:func:`~.common.with_numbers`: ``error_pct_mean``,
        ``error_pct_std``, ``ece_pre_t_pct_mean``, ...), ``temperature_mean`` (the mean T
        of the Post-T cells) and ``n_seeds``.

    >>> tidy = pd.DataFrame({
    ...     "method": "ce", "label": "CE", "split": "test", "shift": "none", "severity": 0,
    ...     "seed": [0, 1] * 4,
    ...     "calibrator": ["none"] * 4 + ["ts"] * 4,
    ...     "metric": ["error", "error", "ece", "ece"] * 2,
    ...     "value": [0.20, 0.22, 0.10, 0.12, 0.20, 0.22, 0.03, 0.05],
    ... })
    >>> wide = table(tidy, metrics=["ece"])
    >>> paper_view(wide).to_dict("records")
    [{'Method': 'CE', 'Error': '21.00 ± 1.41', 'ECE Pre T': '11.00 ± 1.41',
      'ECE Post T': '4.00 ± 1.41'}]
    >>> wide[["ece_post_t_pct_mean", "ece_post_t_pct_std", "n_seeds"]].round(2).to_dict("records")
    [{'ece_post_t_pct_mean': 4.0, 'ece_post_t_pct_std': 1.41, 'n_seeds': 2}]
    """
    check_choice("spread", spread, SPREADS)
    metrics = list(metrics)
    key = calibrator_key(tidy, calibrator)
    require_metrics(tidy, ["error", *metrics])
    cell = _table_cells(tidy, key, metrics, spread, digits)
    order = method_order(methods or list(dict.fromkeys(tidy["method"])), present=tidy["method"])
    return _layout(cell, order, method_labels(tidy), key, metrics, temperatures, temperature_digits)


def _table_cells(
    tidy: pd.DataFrame, key: str, metrics: list[str], spread: str, digits: int
) -> pd.Series:
    """``mean ± spread`` cells (×100, clean test split) by (method, calibrator, metric) of
    the error and ``metrics``, uncalibrated and under calibrator ``key``."""
    rows = clean_rows(tidy)
    rows = rows[
        rows["metric"].isin(["error", *metrics]) & rows["calibrator"].isin([UNCALIBRATED, key])
    ]
    return run_cells(rows, spread, digits)


def _layout(
    cell: pd.Series,
    order: list[str],
    labels: dict[str, str],
    key: str,
    metrics: list[str],
    temperatures: pd.DataFrame | None,
    temperature_digits: int,
) -> pd.DataFrame:
    """:func:`table`'s rows in ``order``: Error, Pre T / Post T cells (the mean T of
    ``temperatures`` in parentheses), then the numbers and ``temperature_mean``."""
    mean_t = (
        temperatures.groupby("method")["temperature"].mean() if temperatures is not None else {}
    )
    out_rows = []
    for method in order:
        t = mean_t.get(method, math.nan)
        suffix = "" if math.isnan(t) else f" ({t:.{temperature_digits}f})"
        row = {"Method": labels[method], metric_name("error"): cell[method, UNCALIBRATED, "error"]}
        for metric in metrics:
            name = metric_name(metric)
            row[f"{name} Pre T"] = cell[method, UNCALIBRATED, metric]
            row[f"{name} Post T"] = cell[method, key, metric] + suffix
        out_rows.append(row)
    wide = with_numbers(pd.DataFrame(out_rows))
    if temperatures is not None:
        temperature = [mean_t.get(method, math.nan) for method in order]
        wide.insert(len(wide.columns) - 1, "temperature_mean", temperature)
    return wide


def paper_orientation(
    wide: pd.DataFrame, metrics: Iterable[str], dataset: str
) -> dict[str, pd.DataFrame]:
    """The paper's layout of :func:`table`: per metric (and the error) one row for the
    dataset with a column per method (a Pre T / Post T pair for calibration errors).

    Returns:
        ``paper_<metric>`` -> the one-row table, its cells' numbers after them
        (:func:`~.common.with_numbers`).
    """
    cell_frame = as_cells(wide)
    out = {}
    for metric in ["error", *metrics]:
        name = metric_name(metric)
        columns = (
            [metric_name("error")] if metric == "error" else [f"{name} Pre T", f"{name} Post T"]
        )
        stacked = cell_frame.set_index("Method")[columns].stack()
        names = [m if len(columns) == 1 else f"{m} {c}" for m, c in stacked.index]
        out[f"paper_{metric}"] = with_numbers(
            pd.DataFrame([[dataset, *stacked.to_numpy()]], columns=["Dataset", *names])
        )
    return out


def _temperatures_of(results: StudyResults, runs: Any, key: str) -> pd.DataFrame:
    """:func:`fitted_temperatures`, refusing a calibrator that fitted none: the table's
    "Post T" columns, T in parentheses and the paper's TS numbers beside them would all
    describe another calibrator."""
    temperatures = fitted_temperatures(results.calibrators, runs, key)
    if len(temperatures) and temperatures["temperature"].isna().all():
        raise ValueError(
            f"mukhoti_table: calibrator {key!r} fitted no temperature; the table compares "
            "before / after temperature scaling -- name a temperature calibrator in its "
            "`calibrator` option (the paper's: ts_grid_mukhoti)"
        )
    return temperatures


TABLE_OPTIONS = {
    "calibrator": optional(TEXT),
    "metrics": optional(list_of(TEXT)),
    "spread": choice(*SPREADS),
    "digits": integer(low=0),
    "temperature_digits": integer(low=0),
    **SELECTION_OPTIONS,
}


@report(
    "mukhoti_table",
    needs=("calibrators",),
    calibrators=calibrators_in("calibrator"),
    study_check=study_needs_calibrator("calibrator"),
    options=TABLE_OPTIONS,
)
def mukhoti_table(
    results: StudyResults,
    calibrator: str | None = None,
    metrics: list[str] | None = None,
    spread: str = "std",
    digits: int = 2,
    temperature_digits: int = 2,
    selection: str | None = None,
    selection_metric: str | None = None,
) -> dict[str, Any]:
    """Mukhoti et al. Table 1, C.1-C.3: error and calibration errors pre / post temperature
    scaling, the fitted T in parentheses.

    Args:
        calibrator: key of the temperature calibrator (default: the table's first
            calibrator other than ``none``; the paper cross-validates T on ECE:
            ``ts_grid_mukhoti``). T is ``learned()["temperature"]`` of each run's fitted
            calibrator, averaged over seeds.
        metrics: calibration errors shown pre / post (default ``ece``, ``ece_em`` (AdaECE),
            ``classwise_ece``); all ×100 on the clean test split.
        spread: ``"std"`` or ``"sem"``.
        digits, temperature_digits: decimals of the cells and of T.
        selection, selection_metric: sweep selection (module docstring); default: every
            member is a row (the paper lists γ = 1, 2, 3 in its figures).

    Returns:
        ``table`` (a row per method: Error, then ``<metric> Pre T`` / ``Post T``),
        ``paper_<metric>`` (the paper's orientation: one row, a column pair per method),
        ``temperatures`` (per run), ``mukhoti_table`` (Markdown), ``selection`` when
        a rule was applied, and ``published`` (the paper's Table 1 / C.1-C.3 numbers
        beside ours) when the study's dataset and architecture are the paper's.
    """
    metrics = list(metrics or DEFAULT_METRICS)
    selected, record = apply_selection(results.metrics, results.groups, selection, selection_metric)
    key = calibrator_key(selected, calibrator)
    runs = selected[["method", "seed"]].drop_duplicates().itertuples(index=False)
    temperatures = _temperatures_of(results, runs, key)
    cells = {"spread": spread, "digits": digits, "temperature_digits": temperature_digits}
    wide = table(
        selected, key, metrics=metrics, methods=results.methods, temperatures=temperatures, **cells
    )
    text = _table_text(results, wide, key, metrics, spread, record)
    published, section = published_artifacts(results, "mukhoti", {"ts": key}, temperatures)
    artifacts = {
        "table": wide,
        "temperatures": temperatures,
        **paper_orientation(wide, metrics, results.dataset),
        **published,
        "mukhoti_table": text + section,
    }
    return with_selection(artifacts, record)


def _table_text(
    results: StudyResults,
    wide: pd.DataFrame,
    key: str,
    metrics: list[str],
    spread: str,
    record: Any,
) -> str:
    """The Markdown of :func:`mukhoti_table` before its section on published numbers."""
    text = paper_header(
        results, "Mukhoti et al.: calibration pre / post temperature scaling", spread, record
    )
    return text + (
        f"Clean test split. {units_note(['error', *metrics])} Post T: calibrator `{key}` "
        "fitted on the validation split; its temperature (mean over seeds) in parentheses. "
        "Error is unchanged by TS."
        + (f" {EQUAL_MASS_NOTE}" if "ece_em" in metrics else "")
        + "\n\n"
        + paper_view(wide).to_markdown(index=False)
        + "\n"
    )


# --- Fig. 1-2 ----------------------------------------------------------------------------


def history_table(
    histories: dict[tuple[str, int], pd.DataFrame], methods: list[str]
) -> pd.DataFrame:
    """All histories of ``methods`` stacked, with method and seed columns."""
    missing = [m for m in methods if not any(k[0] == m for k in histories)]
    if missing:
        raise ValueError(
            f"no training history for method(s) {missing}; the report needs 'histories'"
        )
    frames = [
        history.assign(method=method, seed=seed)
        for (method, seed), history in histories.items()
        if method in methods
    ]
    return pd.concat(frames, ignore_index=True)


def curve_column(history: pd.DataFrame, name: str, split: str) -> str:
    """History column of panel ``name``: itself if unprefixed, else ``<split>_<name>``."""
    for column in (name, f"{split}_{name}"):
        if column in history.columns:
            return column
    valid = sorted(
        {
            c.removeprefix(f"{split}_")
            for c in history.columns
            if c not in ("epoch", "method", "seed")
        }
    )
    raise ValueError(f"history has no panel {name!r} for split {split!r}; valid panels: {valid}")


def epoch_summary(history: pd.DataFrame, columns: dict[str, str]) -> pd.DataFrame:
    """Mean, std and count over seeds of each quantity per method and epoch.

    Args:
        history: :func:`history_table`.
        columns: quantity name -> its history column.

    Returns:
        Columns method, quantity, epoch, mean, std, n (NaN epochs skipped, not counted).
    """
    long = history.melt(
        id_vars=["method", "seed", "epoch"],
        value_vars=list(columns.values()),
        var_name="column",
        value_name="value",
    )
    long["quantity"] = long["column"].map({v: k for k, v in columns.items()})
    return seed_stats(long, ["method", "quantity", "epoch"])


def curve_unit(quantity: str) -> str:
    """The unit a figure shows history quantity ``quantity`` in: its metric's
    (:func:`~.common.metric_unit`; ``train_accuracy`` as accuracy), else as computed.

    >>> curve_unit("ece"), curve_unit("train_accuracy"), curve_unit("nll_correct")
    ('%', '%', '')
    """
    return metric_unit(quantity.removeprefix("train_"))


def curve_title(quantity: str) -> str:
    """A panel's title: the quantity's name (a metric's :func:`~.common.metric_name`) and
    its unit.

    >>> curve_title("ece"), curve_title("nll_correct"), curve_title("train_accuracy")
    ('ECE (%)', 'NLL (correct)', 'train Accuracy (%)')
    """
    title = CURVE_TITLES.get(quantity, metric_name(quantity))
    unit = curve_unit(quantity)
    return f"{title} ({unit})" if unit else title


def draw_curve(
    ax: plt.Axes, curve: pd.DataFrame, label: str, color: Any = None, unit: str = ""
) -> None:
    """Mean over seeds with a ±1 std band where there are several seeds; a quantity of unit
    ``"%"`` or ``"×100"`` (the history holds fractions) drawn ×100."""
    scale = 100.0 if unit else 1.0
    mean, std = scale * curve["mean"], scale * curve["std"].fillna(0)
    (line,) = ax.plot(curve["epoch"], mean, label=label, linewidth=1.2, color=color)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    band = curve["n"] > 1
    if band.any():
        low = mean - std
        high = mean + std
        ax.fill_between(
            curve["epoch"], low, high, where=band, color=line.get_color(), alpha=0.2, linewidth=0
        )


def panel_figure(
    curves: pd.DataFrame,
    methods: list[str],
    columns: dict[str, str],
    colors: dict[str, Any],
    split: str,
    study: str,
) -> plt.Figure:
    """Fig. 2: one panel per quantity of ``columns``, one curve per method (``colors``:
    method -> colour); ``curves`` is :func:`epoch_summary` with a label column."""
    names = list(columns)
    cols = min(3, len(names))
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False, layout="constrained"
    )
    labels = curves.drop_duplicates("method").set_index("method")["label"]
    for ax, name in zip(axes.flat, names):
        for method in methods:
            part = curves[(curves["method"] == method) & (curves["quantity"] == name)]
            draw_curve(ax, part, labels[method], colors.get(method), curve_unit(name))
        title = curve_title(name)
        ax.set_title(f"{split} {title}" if columns[name].startswith(split) else title, fontsize=9)
        ax.set_xlabel("epoch", fontsize=8)
    for ax in list(axes.flat)[len(names) :]:
        ax.set_visible(False)
    legend_outside(fig, axes.flat[0])
    fig.suptitle(f"{study}: per-epoch {split} statistics (mean ± std over seeds)", fontsize=10)
    return fig


def overview_figure(history: pd.DataFrame, split: str, label: str, study: str) -> plt.Figure:
    """Fig. 1 for one method: train loss vs NLL, entropies, train / eval error and ECE (in %),
    each the mean over seeds."""
    wanted = {
        "train loss (objective)": "train_loss",
        f"{split} {metric_name('nll')}": f"{split}_nll",
        f"{split} entropy (correct)": f"{split}_entropy_correct",
        f"{split} entropy (incorrect)": f"{split}_entropy_incorrect",
        f"train {metric_name('error')}": "train_accuracy",
        f"{split} {metric_name('error')}": f"{split}_accuracy",
        f"{split} {metric_name('ece')}": f"{split}_ece",
    }
    present = {k: v for k, v in wanted.items() if v in history.columns}
    summary = epoch_summary(history, present)
    names = list(wanted)
    rates = f"{metric_name('error')} / {metric_name('ece')} ({metric_unit('ece')})"
    panels = [("loss", names[:2]), ("entropy", names[2:4]), (rates, names[4:])]
    fig, axes = plt.subplots(1, 3, figsize=(14.0, 3.2), squeeze=False, layout="constrained")
    for ax, (title, quantities) in zip(axes[0], panels):
        for name in [n for n in quantities if n in present]:
            curve = summary[summary["quantity"] == name].copy()
            if present[name].endswith("accuracy"):
                curve["mean"] = 1.0 - curve["mean"]
            draw_curve(ax, curve, name, unit=metric_unit("ece") if title == rates else "")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("epoch", fontsize=8)
        legend_beside(ax)
    fig.suptitle(f"{study}: {label} over training ({MEAN_OVER_SEEDS}, ±1 std band)", fontsize=10)
    return fig


def _curve_methods(
    order: list[str], methods: list[str] | None, overview_method: str | None
) -> tuple[list[str], str]:
    """The methods drawn and the overview method, each checked against ``order``."""
    chosen = list(methods or order)
    unknown = [m for m in chosen if m not in order]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; the study (after selection) has: {order}")
    overview = overview_method or chosen[0]
    if overview not in order:
        raise ValueError(f"overview_method {overview!r} is not a method of the study: {order}")
    return chosen, overview


@report(
    "mukhoti_curves",
    needs=("histories",),
    options={
        "split": choice(*SPLITS),
        "panels": optional(list_of(TEXT)),
        "methods": optional(list_of(TEXT)),
        "overview_method": optional(TEXT),
        **SELECTION_OPTIONS,
    },
)
def mukhoti_curves(
    results: StudyResults,
    split: str = "test",
    panels: list[str] | None = None,
    methods: list[str] | None = None,
    overview_method: str | None = None,
    selection: str | None = None,
    selection_metric: str | None = None,
) -> dict[str, Any]:
    """Mukhoti et al. Fig. 1-2: calibration-related quantities over training epochs.

    Args:
        split: ``"test"`` (the paper) or ``"val"``; the history columns ``<split>_*``.
        panels: quantities of the per-method figure (Fig. 2), default NLL, NLL of
            correct / incorrect samples, entropy of correct / incorrect samples and the
            last-layer weight norm; any history column (without the split prefix) works.
        methods: method keys to draw (default: every method of the study).
        overview_method: the method of the Fig. 1 overview (train loss vs NLL, entropies,
            train / test error and ECE); default the first method (the CE baseline).
        selection, selection_metric: sweep selection (module docstring).

    Returns:
        ``curves`` (long table: method, label, quantity, epoch, mean, std, n over seeds),
        figures ``epochs_by_method`` (Fig. 2) and ``overview`` (Fig. 1).
    """
    selected, record = apply_selection(results.metrics, results.groups, selection, selection_metric)
    order = method_order(results.methods, present=selected["method"])
    chosen, overview = _curve_methods(order, methods, overview_method)
    history = history_table(results.histories, list(dict.fromkeys([*chosen, overview])))
    columns = {name: curve_column(history, name, split) for name in panels or CURVE_PANELS}
    labels = method_labels(selected)
    curves = epoch_summary(history, columns)
    curves.insert(1, "label", curves["method"].map(labels))
    colors = method_colors(results.methods)
    figure = panel_figure(curves, chosen, columns, colors, split, results.study)
    overview_history = history[history["method"] == overview]
    over = overview_figure(overview_history, split, labels[overview], results.study)
    return with_selection({"curves": curves, "epochs_by_method": figure, "overview": over}, record)
