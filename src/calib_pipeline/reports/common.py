"""What every report shares: units, cell formatting, seed aggregation, method order and
colours, and writing a report's artifacts to a folder.

Paper tables show a metric over seeds as one ``mean ± spread`` cell; every report formats
it as a :class:`Cell` (:func:`stat_cells`), orders methods with :func:`method_order` and styles
them with :func:`method_styles` (colour, marker, line style), so a method looks the same in
every figure of a study; figures put their legends outside the data (:func:`legend_outside`).
:func:`with_numbers` turns a table of cells into the formatted layout followed by numeric
columns (``<column>_<unit>_mean``, ``..._std`` or ``..._sem``, ``n_seeds``): the CSV carries
both, the Markdown and LaTeX the layout alone (:func:`paper_view`).

Units, one per metric everywhere a report shows it (tables, figures, summaries): the metrics
of :data:`PERCENT_METRICS` ×100 -- accuracy, error, every ECE variant, AUROC and the ECE
decomposition terms in %, the Brier score ×100 -- and the rest (NLL, entropy) as computed.
The tidy metrics table, the MLflow metrics and ``calibration_metrics`` keep fractions.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from calib_pipeline.calibration.metrics import METRIC_NAMES as REGISTERED_NAMES
from calib_pipeline.calibration.metrics import METRIC_UNITS
from calib_pipeline.reports.latex import latex_table

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from calib_pipeline.reports.registry import StudyResults

UNCALIBRATED = "none"  # the calibrator key of raw scores
UNSHIFTED = "none"  # the shift of the clean splits
# Shown ×100: every metric registered with unit "%" or "×100" (calibration.metrics
# METRIC_UNITS, declared with the metric), and the α − β − γ column derived from three of them.
DERIVED_UNITS = {"decomp_ece": "%"}
PERCENT_METRICS = tuple(key for key, unit in {**METRIC_UNITS, **DERIVED_UNITS}.items() if unit)
# A study's methods are drawn in these colours, by position (method_styles): tab10, then ten
# colours chosen (greedily, from an sRGB grid with CIELAB lightness 28-70 and chroma 25-65) to
# stay as far as possible from tab10 and each other: every pair is >= 27 CIELAB ΔE (CIE76)
# apart, checked by tests/reports/test_figures.py on drawn figures (docs/reports.md).
METHOD_PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
    "#004e21", "#6f6400", "#a6004e", "#85b17a", "#ff8585",
    "#de9b59", "#904300", "#593759", "#7a0b6f", "#4e90ff",
)  # fmt: skip
METHOD_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")
METHOD_LINESTYLES = ("-", "--", ":", "-.")
# How the ×100 of each metric reads: a rate or probability in %, the Brier score ×100.
UNIT_NAMES = {"%": "pct", "×100": "x100"}
SPREADS = ("std", "sem")
MISSING_CELL = "–"
# The one name of each metric in every table header, figure label and units line: the name
# declared with the metric (calibration.metrics METRIC_NAMES), and the α − β − γ column.
METRIC_NAMES = {**REGISTERED_NAMES, "decomp_ece": "α − β − γ"}
# Under a table with the equal-mass ECE: the papers' own names of that one quantity.
EQUAL_MASS_NOTE = (
    "AdaECE = the equal-mass (adaptive) ECE, `ece_em`: Mukhoti et al.'s AdaECE, the "
    "meta-regularisation paper's ACE (not Nixon et al.'s classwise ACE)."
)
# The two ways a number over seeds is made, named alike wherever a title or caption could be
# read either way: tables average each seed's metric; reliability diagrams and the γ histogram
# pool the seeds' samples (their ECE is that of the pooled bins, not a mean of per-seed ECEs).
# SEEDS_AVERAGED follows a table's "mean ± std over N seed(s)" to say which.
MEAN_OVER_SEEDS = "mean over seeds"
POOLED_OVER_SEEDS = "seeds pooled"
SEEDS_AVERAGED = "(each seed's value, then the mean; a reliability diagram pools the seeds instead)"
# A Markdown table is for reading; beyond this many rows only the CSV is written (the tidy
# metrics tables have ~10^5 rows, slow for tabulate to render: docs/performance.md).
MARKDOWN_MAX_ROWS = 2000
# Figures are written as vector PDF and as PNG at print resolution.
FIGURE_DPI = 300
PDF_METADATA = {"CreationDate": None}


# --- units -------------------------------------------------------------------------------


def metric_unit(metric: str) -> str:
    """How a report shows ``metric``: ``"%"``, ``"×100"`` (the Brier score) or ``""`` (as
    computed).

    >>> metric_unit("ece"), metric_unit("brier"), metric_unit("nll")
    ('%', '×100', '')
    """
    return {**METRIC_UNITS, **DERIVED_UNITS}.get(metric, "")


def metric_name(metric: str) -> str:
    """The name ``metric`` goes by in every report (:data:`METRIC_NAMES`); a key without a
    registered name (e.g. a history column) as it is.

    >>> metric_name("ece_em"), metric_name("classwise_ece"), metric_name("temperature")
    ('AdaECE', 'Classwise-ECE', 'temperature')
    """
    return METRIC_NAMES.get(metric, metric)


def axis_label(metric: str) -> str:
    """``metric``'s name and unit, as a figure's axis shows it.

    >>> axis_label("ece_em"), axis_label("brier"), axis_label("nll")
    ('AdaECE (%)', 'Brier (×100)', 'NLL')
    """
    unit = metric_unit(metric)
    return f"{metric_name(metric)} ({unit})" if unit else metric_name(metric)


def units_note(metrics: Iterable[str]) -> str:
    """One line stating the units of ``metrics`` as the reports show them, each by its name
    (:func:`metric_name`: the name of its column).

    >>> units_note(["accuracy", "nll", "ece", "ece_em", "brier"])
    'Units: Accuracy, ECE, AdaECE in %; Brier ×100; NLL as computed.'
    """
    by_unit: dict[str, list[str]] = {"%": [], "×100": [], "": []}
    for metric in dict.fromkeys(metrics):
        by_unit[metric_unit(metric)].append(metric_name(metric))
    parts = [
        f"{', '.join(names)} {'in %' if unit == '%' else unit or 'as computed'}"
        for unit, names in by_unit.items()
        if names
    ]
    return "Units: " + "; ".join(parts) + "."


def table_units_note(table: pd.DataFrame, metrics: Iterable[str]) -> str:
    """:func:`units_note` of those ``metrics`` that head a column of ``table``'s layout (a
    metric the metrics table lacks has no column, and the line names no column it lacks).

    Raises:
        ValueError: none of ``metrics`` heads a column.
    """
    columns = set(paper_view(table).columns)
    shown = [m for m in metrics if metric_name(m) in columns]
    if not shown:
        raise ValueError(f"no column of the table is one of the metrics {list(metrics)}")
    return units_note(shown)


# --- cells -------------------------------------------------------------------------------


@dataclass(frozen=True, repr=False)
class Cell:
    """One table cell: its text (``mean ± spread``) and the numbers behind it, in the unit
    it shows (``unit``: ``"%"``, ``"×100"`` or ``""``); ``spread_name`` is ``std`` or ``sem``,
    ``n`` how many values (seeds) the mean is over and ``metric`` the metric key, where one
    metric is behind it (the LaTeX table marks the best value by its direction).
    :func:`with_numbers` spreads a table of cells into text and numeric columns."""

    text: str
    mean: float
    spread: float = math.nan
    n: int = 0
    spread_name: str = "std"
    unit: str = ""
    metric: str = ""

    def __str__(self) -> str:
        return self.text

    __repr__ = __str__

    def __add__(self, suffix: str) -> Cell:
        """The cell with ``suffix`` appended to its text (e.g. a fitted T in parentheses)."""
        return replace(self, text=self.text + suffix)


def mean_std_cell(mean: float, spread: float, n: int | None = None, digits: int = 2) -> str:
    """One table cell: ``mean ± spread`` with ``digits`` decimals.

    The mean alone when the spread is undefined (one seed, or a NaN / infinite spread),
    ``–`` when there is no value at all.

    Args:
        mean: the mean over seeds (or corruption types).
        spread: its std or SEM.
        n: how many values the mean is over; ``None`` when only the spread tells.
        digits: decimals of both numbers.

    Returns:
        The formatted cell.

    >>> (mean_std_cell(12.0, 2.0, 3), mean_std_cell(12.0, float("nan"), 1),
    ...  mean_std_cell(float("nan"), 0.0, 0))
    ('12.00 ± 2.00', '12.00', '–')
    """
    if n == 0 or math.isnan(mean):
        return MISSING_CELL
    if (n is not None and n < 2) or not math.isfinite(spread):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {spread:.{digits}f}"


def stat_cells(
    stats: pd.DataFrame, spread: str = "std", digits: int = 2, unit: str | None = None
) -> list[Cell]:
    """A :class:`Cell` (:func:`mean_std_cell` text) for every row of a :func:`seed_stats`
    frame (``spread``: its ``std`` or ``sem`` column). Each cell's unit is ``unit``, or
    :func:`metric_unit` of the row's ``metric`` when ``unit`` is None (the values must
    already be in it: :func:`percent_scaled`)."""
    metrics = list(stats["metric"]) if "metric" in stats else [""] * len(stats)
    units = (
        [metric_unit(m) for m in metrics]
        if unit is None and "metric" in stats
        else [unit or ""] * len(stats)
    )
    return [
        Cell(mean_std_cell(m, s, n, digits), float(m), float(s), int(n), spread, u, metric)
        for m, s, n, u, metric in zip(stats["mean"], stats[spread], stats["n"], units, metrics)
    ]


def numeric_name(column: str, unit: str) -> str:
    """The stem of the numeric columns of a table column: its header in snake case (Greek
    letters spelled out, ``+`` / ``−`` as words) and the unit.

    >>> numeric_name("ECE+TS", "%"), numeric_name("α − β − γ", "%"), numeric_name("nll", "")
    ('ece_plus_ts_pct', 'alpha_minus_beta_minus_gamma_pct', 'nll')
    """
    words = {"α": " alpha ", "β": " beta ", "γ": " gamma ", "−": " minus ", "+": " plus "}
    text = "".join(words.get(ch, ch) for ch in str(column)).lower()
    stem = re.sub(r"[^0-9a-z]+", "_", text).strip("_")
    return f"{stem}_{UNIT_NAMES[unit]}" if unit else stem


def with_numbers(frame: pd.DataFrame, count: str = "n_seeds") -> pd.DataFrame:
    """A table of :class:`Cell` s as plain columns: the layout (each cell as its text),
    then per cell column ``<stem>_mean`` and ``<stem>_<std|sem>`` (:func:`numeric_name`;
    NaN where the layout has no cell), then ``count``: the most values any cell of the
    row averages. ``attrs["layout"]`` lists the layout's columns (:func:`paper_view`),
    ``attrs["metrics"]`` the metric of each cell column whose cells share one.

    Raises:
        ValueError: two columns whose numeric names coincide.
    """
    display = frame.copy()
    numbers: dict[str, list[float]] = {}
    counts, sources, metrics = [], {}, {}
    for column in frame.columns:
        values = list(frame[column])
        found = [v for v in values if isinstance(v, Cell)]
        if not found:
            continue
        display[column] = [str(v) if isinstance(v, Cell) else v for v in values]
        stem = numeric_name(column, found[0].unit)
        names = (f"{stem}_mean", f"{stem}_{found[0].spread_name}")
        for key, attribute in zip(names, ("mean", "spread")):
            if key in numbers:
                raise ValueError(f"columns of one table share the numeric name {key!r}")
            numbers[key] = [
                getattr(v, attribute) if isinstance(v, Cell) else math.nan for v in values
            ]
        counts.append([v.n if isinstance(v, Cell) else 0 for v in values])
        sources[column] = (*names, found[0].spread_name, found[0].unit)
        if len({v.metric for v in found}) == 1 and found[0].metric:
            metrics[column] = found[0].metric
    if not numbers:
        return frame
    out = pd.concat([display, pd.DataFrame(numbers, index=frame.index)], axis=1)
    out[count] = np.max(counts, axis=0)
    out.attrs.update(layout=list(display.columns), numbers=sources, count=count, metrics=metrics)
    return out


def as_cells(frame: pd.DataFrame) -> pd.DataFrame:
    """The layout of a :func:`with_numbers` table with its :class:`Cell` s back (for a
    table re-arranged from it, e.g. a paper's orientation); ``n`` is the row's count."""
    layout = paper_view(frame).copy()
    counts = frame[frame.attrs["count"]] if "count" in frame.attrs else None
    metrics = frame.attrs.get("metrics", {})
    for column, (mean, spread, spread_name, unit) in frame.attrs.get("numbers", {}).items():
        layout[column] = [
            Cell(text, m, s, int(n), spread_name, unit, metrics.get(column, ""))
            for text, m, s, n in zip(frame[column], frame[mean], frame[spread], counts)
        ]
    return layout


def paper_view(frame: pd.DataFrame) -> pd.DataFrame:
    """The formatted layout of a :func:`with_numbers` table (the frame itself otherwise):
    what its Markdown and LaTeX show."""
    layout = frame.attrs.get("layout")
    return frame[[c for c in layout if c in frame.columns]] if layout else frame


def percent_scaled(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` of a tidy table with the values of :data:`PERCENT_METRICS` ×100."""
    return rows.assign(
        value=np.where(rows["metric"].isin(PERCENT_METRICS), rows["value"] * 100, rows["value"])
    )


def seed_stats(
    rows: pd.DataFrame, by: list[str], value: str = "value", *, sem: bool = False
) -> pd.DataFrame:
    """Mean, sample std (NaN for one value) and count of ``value`` per ``by`` cell.

    NaN values are skipped (and not counted); cells keep their first-seen order.

    Args:
        rows: a long table, e.g. rows of the tidy metrics table.
        by: the columns naming a cell, e.g. ``["method", "calibrator", "metric"]``.
        value: the column aggregated.
        sem: also the standard error of the mean, ``std / sqrt(n)``.

    Returns:
        Columns ``*by, mean, std, n`` (``*by, mean, std, sem, n`` with ``sem``).
    """
    stats = rows.groupby(by, sort=False)[value].agg(["mean", "std", "count"]).reset_index()
    stats = stats.rename(columns={"count": "n"})
    if sem:
        stats.insert(len(by) + 2, "sem", stats["std"] / np.sqrt(stats["n"]))
    return stats


def run_cells(rows: pd.DataFrame, spread: str = "std", digits: int = 2) -> pd.Series:
    """:class:`Cell` s of tidy ``rows`` over seeds (each metric in its unit) by
    (method, calibrator, metric), the cells in first-seen order."""
    stats = seed_stats(percent_scaled(rows), ["method", "calibrator", "metric"], sem=True)
    return pd.Series(
        stat_cells(stats, spread, digits), index=pd.MultiIndex.from_frame(stats.iloc[:, :3])
    )


def cell_table(
    table: pd.DataFrame,
    metrics: list[str],
    *,
    split: str = "test",
    shift: str = UNSHIFTED,
) -> pd.DataFrame:
    """Rows (method label, calibrator) x metric columns of :class:`Cell` s, ``mean ± std``
    over seeds in each metric's unit (:func:`metric_unit`); the mean alone with one seed.

    Args:
        table: the tidy metrics table.
        metrics: metric keys, one column each (in this order).
        split, shift: the rows shown (default the clean test split).

    Returns:
        Columns ``label, calibrator, *metrics``; labels in first-seen order.
    """
    subset = table[
        (table["split"] == split) & (table["shift"] == shift) & table["metric"].isin(metrics)
    ]
    if subset.empty:
        raise ValueError(f"no rows for split={split!r}, shift={shift!r}, metrics={metrics}")
    stats = seed_stats(percent_scaled(subset), ["label", "calibrator", "metric"])
    stats["cell"] = stat_cells(stats)
    wide = stats.pivot(index=["label", "calibrator"], columns="metric", values="cell")
    order = list(dict.fromkeys(subset["label"]))
    wide = wide.reindex(columns=[m for m in metrics if m in wide.columns])
    wide = wide.reset_index()
    wide.columns.name = None
    wide["label"] = pd.Categorical(wide["label"], categories=order, ordered=True)
    return wide.sort_values(["label", "calibrator"]).reset_index(drop=True).astype({"label": str})


def mean_std_table(
    table: pd.DataFrame, metrics: list[str], *, split: str = "test", shift: str = UNSHIFTED
) -> pd.DataFrame:
    """:func:`cell_table` with its numbers (:func:`with_numbers`): columns ``label,
    calibrator`` and one per metric headed by its name (:func:`metric_name`, formatted),
    then ``<name>[_<unit>]_mean`` / ``_std`` per metric (``adaece_pct_mean`` for ``ece_em``)
    and ``n_seeds``."""
    wide = cell_table(table, metrics, split=split, shift=shift)
    return with_numbers(wide.rename(columns={m: metric_name(m) for m in metrics}))


# --- rows of the tidy table --------------------------------------------------------------


def clean_rows(
    table: pd.DataFrame, split: str = "test", shift: str = UNSHIFTED, severity: int = 0
) -> pd.DataFrame:
    """The rows of one evaluated set (default: the clean test split)."""
    return table[
        (table["split"] == split) & (table["shift"] == shift) & (table["severity"] == severity)
    ]


def require_metrics(table: pd.DataFrame, metrics: list[str]) -> None:
    """Raise ``ValueError`` naming the ``metrics`` the tidy ``table`` lacks, and what it has."""
    available = sorted(set(table["metric"]))
    missing = [m for m in metrics if m not in available]
    if missing:
        raise ValueError(
            f"metric(s) {missing} are not in the metrics table; available: {available}"
        )


def calibrator_key(table: pd.DataFrame, requested: str | None) -> str:
    """``requested`` if the tidy ``table`` has that calibrator, else (when ``None``) its
    first calibrator other than ``none``; ``ValueError`` listing the valid keys otherwise."""
    valid = [c for c in dict.fromkeys(table["calibrator"]) if c != UNCALIBRATED]
    if requested is None and valid:
        return valid[0]
    if requested not in valid:
        raise ValueError(
            f"calibrator {requested!r} is not in the study's metrics table; valid calibrator keys: "
            f"{valid}"
        )
    return requested


def method_labels(table: pd.DataFrame) -> dict[str, str]:
    """Method key -> display label, as the tidy ``table`` has them (selection marks included)."""
    return table.drop_duplicates("method").set_index("method")["label"].to_dict()


# --- methods: order and colour -----------------------------------------------------------


def method_order(
    methods: Sequence[str],
    present: Iterable[str] | None = None,
    groups: dict[str, str] | None = None,
) -> list[str]:
    """Methods in the study's order.

    Args:
        methods: the study's methods, in its order.
        present: keep only these (e.g. the methods of a filtered table); those the study
            does not list follow, sorted.
        groups: method -> sweep group; when given, the members of a group stand together
            where the group first appears.

    Returns:
        The ordered method keys.
    """
    order = list(methods)
    if groups:
        first_seen = list(dict.fromkeys(groups.get(m, m) for m in order))
        order = [m for group in first_seen for m in order if groups.get(m, m) == group]
    if present is None:
        return order
    present = set(present)
    return [m for m in order if m in present] + sorted(present - set(order))


@dataclass(frozen=True)
class MethodStyle:
    """How a method is drawn: colour, marker and line style (:func:`method_styles`)."""

    color: str
    marker: str
    linestyle: str

    def line(self) -> dict[str, str]:
        """The keywords of ``Axes.plot`` that draw a line in this style."""
        return {"color": self.color, "marker": self.marker, "linestyle": self.linestyle}


def method_styles(
    methods: Sequence[str], labels: dict[str, str] | None = None
) -> dict[str, MethodStyle]:
    """One style per method of a study, the same in every figure that draws it.

    The colour is the method's position in :data:`METHOD_PALETTE` (20 colours, pairwise at
    least 27 CIELAB ΔE apart: no two methods of a study of up to 20 share a hue, as
    ``tab20``'s light/dark pairs did); every method also gets a marker, and the methods past
    the 10th a dashed line (dotted past the 20th, where colours repeat), so lines stay apart
    in greyscale print too.

    Args:
        methods: every method of the study, in its order (the style follows the position,
            so pass the whole study, not the methods one figure shows).
        labels: when given, the map is keyed by each method's label instead of its key.

    Returns:
        Method key (or label) -> :class:`MethodStyle`.
    """
    keys = [labels.get(m, m) for m in methods] if labels is not None else list(methods)
    return {
        key: MethodStyle(
            METHOD_PALETTE[i % len(METHOD_PALETTE)],
            METHOD_MARKERS[i % len(METHOD_MARKERS)],
            METHOD_LINESTYLES[(i // 10) % len(METHOD_LINESTYLES)],
        )
        for i, key in enumerate(keys)
    }


def method_colors(methods: Sequence[str], labels: dict[str, str] | None = None) -> dict[str, str]:
    """Method key (or label, with ``labels``) -> the colour of :func:`method_styles`."""
    return {key: style.color for key, style in method_styles(methods, labels).items()}


def legend_outside(fig: Figure, ax: Axes, **options: Any) -> None:
    """One legend of ``ax``'s labelled artists for the whole figure, right of the panels,
    outside the data. The figure must use constrained layout, which makes room for it
    (``fig.legend(loc="outside ...")``); ``options`` go to ``fig.legend``."""
    handles, names = ax.get_legend_handles_labels()
    fig.legend(handles, names, loc="outside right upper", fontsize=7, **options)


def legend_beside(ax: Axes) -> None:
    """The legend of ``ax`` right of it, outside its data (a panel whose lines differ from
    its neighbours'; constrained layout makes room)."""
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)


# --- paper reports ------------------------------------------------------------------------


def paper_header(
    results: StudyResults, title: str, spread: str, record: pd.DataFrame | None
) -> str:
    """The Markdown heading of a paper table: title, study, seeds, spread and, when sweep
    members were selected, by which rule (and a warning for test-set choices)."""
    text = (
        f"# {title}\n\nStudy `{results.study}` on {results.dataset_label}, mean ± "
        f"{'SEM' if spread == 'sem' else 'std'} over {len(results.seeds)} seed(s) "
        "(the mean alone with one seed).\n"
    )
    if record is not None and not record.empty:
        rules = ", ".join(sorted(set(record["rule"])))
        text += f"Sweep members selected by rule `{rules}` (table `selection`).\n"
        if (record["selected_on"] == "test").any():
            text += (
                "**[test-selected]** marks a member chosen on the test set "
                "(optimistic, as in Wang et al.).\n"
            )
    return text + "\n"


def with_selection(artifacts: dict[str, Any], record: pd.DataFrame | None) -> dict[str, Any]:
    """``artifacts`` with the sweep-selection record as its ``selection`` table, if any."""
    if record is not None:
        artifacts["selection"] = record
    return artifacts


# --- writing -----------------------------------------------------------------------------


def write_artifacts(folder: Path, data: dict[str, Any], dpi: int = FIGURE_DPI) -> None:
    """Write a report's artifacts into ``folder``, each by its type.

    A DataFrame becomes ``<name>.csv`` (every column: a :func:`with_numbers` table's
    formatted cells and numeric columns) and, up to ``MARKDOWN_MAX_ROWS`` rows, ``<name>.md``
    and a booktabs LaTeX ``tabular`` ``<name>.tex`` of its layout
    (:func:`~calib_pipeline.reports.latex.latex_table`: escaped, numbers aligned, the best
    value of each metric column bold);
    a string ``<name>.md``; a matplotlib figure ``<name>.pdf`` (vector) and ``<name>.png``
    (then closed); a dict or list ``<name>.json``.

    Args:
        folder: the target folder (created if missing).
        data: artifact name -> artifact.
        dpi: resolution of the PNGs.

    Raises:
        TypeError: an artifact of another type (nothing after it is written).
    """
    folder.mkdir(parents=True, exist_ok=True)
    for name, value in data.items():
        if isinstance(value, pd.DataFrame):
            value.to_csv(folder / f"{name}.csv", index=False)
            if len(value) <= MARKDOWN_MAX_ROWS:
                layout = paper_view(value)
                (folder / f"{name}.md").write_text(
                    layout.to_markdown(index=False) + "\n", encoding="utf-8"
                )
                (folder / f"{name}.tex").write_text(latex_table(value), encoding="utf-8")
        elif isinstance(value, str):
            (folder / f"{name}.md").write_text(value, encoding="utf-8")
        elif hasattr(value, "savefig"):
            import matplotlib.pyplot as plt  # only where a figure is written: tables need no pyplot

            # no creation date in the PDF: the same figure gives the same file
            value.savefig(folder / f"{name}.pdf", bbox_inches="tight", metadata=PDF_METADATA)
            # the layout is in inches, the same at any dpi: the PNG keeps the PDF's instead
            # of solving constrained layout again (docs/performance.md)
            value.set_layout_engine("none")
            value.savefig(folder / f"{name}.png", dpi=dpi, bbox_inches="tight")
            plt.close(value)
        elif isinstance(value, (dict, list)):
            (folder / f"{name}.json").write_text(
                json.dumps(value, indent=2, default=str), encoding="utf-8"
            )
        else:
            raise TypeError(f"report artifact {name!r} has unsupported type {type(value).__name__}")
