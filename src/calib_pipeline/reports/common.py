"""What every report shares: cell formatting, seed aggregation, method order and colours,
and writing a report's artifacts to a folder.

Paper tables show a metric over seeds as one ``mean ± spread`` cell; every report formats
it with :func:`mean_std_cell`, orders methods with :func:`method_order` and colours them
with :func:`method_colors`, so a method looks the same in every figure of a study.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib
import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from calib_pipeline.reports.registry import StudyResults

UNCALIBRATED = "none"  # the calibrator key of raw scores
UNSHIFTED = "none"  # the shift of the clean splits
PERCENT_METRICS = (
    "accuracy",
    "error",
    "ece",
    "ece_em",
    "ece_l2",
    "ece_lb",
    "mce",
    "classwise_ece",
    "overconfidence_error",
    "sece",
    "sb_ece",
    "dece",
    "smooth_ece",
    "debiased_ece_l2",
)
SPREADS = ("std", "sem")
MISSING_CELL = "–"
# Column headers of the metrics in the paper layouts.
METRIC_NAMES = {
    "accuracy": "Accuracy",
    "error": "Error",
    "ece": "ECE",
    "ece_em": "AdaECE",
    "ece_l2": "ECE",
    "classwise_ece": "Classwise-ECE",
    "brier": "Brier",
    "auroc": "AUROC",
    "nll": "NLL",
    "decomp_alpha": "α",
    "decomp_beta": "β",
    "decomp_gamma": "γ",
    "decomp_ece": "α − β − γ",
}
# A Markdown table is for reading; beyond this many rows only the CSV is written (the tidy
# metrics tables have ~10^5 rows, and tabulate needs ~0.15 ms per row to render them).
MARKDOWN_MAX_ROWS = 2000


# --- cells -------------------------------------------------------------------------------


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

    >>> mean_std_cell(12.0, 2.0, 3), mean_std_cell(12.0, float("nan"), 1), mean_std_cell(float("nan"), 0.0, 0)
    ('12.00 ± 2.00', '12.00', '–')
    """
    if n == 0 or math.isnan(mean):
        return MISSING_CELL
    if (n is not None and n < 2) or not math.isfinite(spread):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {spread:.{digits}f}"


def mean_std_cells(stats: pd.DataFrame, spread: str = "std", digits: int = 2) -> list[str]:
    """:func:`mean_std_cell` of every row of a :func:`seed_stats` frame (``spread``: its
    ``std`` or ``sem`` column)."""
    return [
        mean_std_cell(m, s, n, digits) for m, s, n in zip(stats["mean"], stats[spread], stats["n"])
    ]


def percent_scaled(rows: pd.DataFrame, percent: Iterable[str] = PERCENT_METRICS) -> pd.DataFrame:
    """``rows`` of a tidy table with the values of the ``percent`` metrics ×100."""
    return rows.assign(
        value=np.where(rows["metric"].isin(list(percent)), rows["value"] * 100, rows["value"])
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


def mean_std_table(
    table: pd.DataFrame,
    metrics: list[str],
    *,
    split: str = "test",
    shift: str = UNSHIFTED,
    percent: tuple[str, ...] = PERCENT_METRICS,
) -> pd.DataFrame:
    """Rows (method label, calibrator) x metric columns, formatted ``mean ± std`` over seeds.

    Metrics listed in ``percent`` are shown ×100, as the papers report them; the cell is
    the mean alone when there is one seed.

    Args:
        table: the tidy metrics table.
        metrics: metric keys, one column each (in this order).
        split, shift: the rows shown (default the clean test split).
        percent: metrics shown ×100.

    Returns:
        Columns ``label, calibrator, *metrics``; labels in first-seen order.
    """
    subset = table[
        (table["split"] == split) & (table["shift"] == shift) & table["metric"].isin(metrics)
    ]
    if subset.empty:
        raise ValueError(f"no rows for split={split!r}, shift={shift!r}, metrics={metrics}")
    stats = seed_stats(percent_scaled(subset, percent), ["label", "calibrator", "metric"])
    stats["cell"] = mean_std_cells(stats)
    wide = stats.pivot(index=["label", "calibrator"], columns="metric", values="cell")
    order = list(dict.fromkeys(subset["label"]))
    wide = wide.reindex(columns=[m for m in metrics if m in wide.columns])
    wide = wide.reset_index()
    wide["label"] = pd.Categorical(wide["label"], categories=order, ordered=True)
    return wide.sort_values(["label", "calibrator"]).reset_index(drop=True).astype({"label": str})


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
            f"calibrator {requested!r} is not in the study's metrics table; valid calibrator keys: {valid}"
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


def method_colors(methods: Sequence[str], labels: dict[str, str] | None = None) -> dict[str, Any]:
    """One colour per method of a study, the same in every figure that draws it.

    Args:
        methods: every method of the study, in its order (the colour follows the position,
            so pass the whole study, not the methods one figure shows).
        labels: when given, the map is keyed by each method's label instead of its key.

    Returns:
        Method key (or label) -> RGBA colour of ``tab10`` (``tab20`` beyond 10 methods).
    """
    palette = matplotlib.colormaps["tab20" if len(methods) > 10 else "tab10"]
    keys = [labels.get(m, m) for m in methods] if labels is not None else list(methods)
    return {key: palette(i % palette.N) for i, key in enumerate(keys)}


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
            text += "**[test-selected]** marks a member chosen on the test set (optimistic, as in Wang et al.).\n"
    return text + "\n"


def with_selection(artifacts: dict[str, Any], record: pd.DataFrame | None) -> dict[str, Any]:
    """``artifacts`` with the sweep-selection record as its ``selection`` table, if any."""
    if record is not None:
        artifacts["selection"] = record
    return artifacts


# --- writing -----------------------------------------------------------------------------


def write_artifacts(folder: Path, data: dict[str, Any], dpi: int = 120) -> None:
    """Write a report's artifacts into ``folder``, each by its type.

    A DataFrame becomes ``<name>.csv`` and, up to ``MARKDOWN_MAX_ROWS`` rows, ``<name>.md``
    and a LaTeX ``tabular`` ``<name>.tex`` (``DataFrame.to_latex``, special characters
    escaped; jinja2, which it needs, comes with torch and Flask);
    a string ``<name>.md``; a matplotlib figure ``<name>.png`` (then closed); a dict or
    list ``<name>.json``.

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
                (folder / f"{name}.md").write_text(
                    value.to_markdown(index=False) + "\n", encoding="utf-8"
                )
                (folder / f"{name}.tex").write_text(
                    value.to_latex(index=False, escape=True), encoding="utf-8"
                )
        elif isinstance(value, str):
            (folder / f"{name}.md").write_text(value, encoding="utf-8")
        elif hasattr(value, "savefig"):
            import matplotlib.pyplot as plt  # only where a figure is written: tables need no pyplot

            value.savefig(folder / f"{name}.png", dpi=dpi, bbox_inches="tight")
            plt.close(value)
        elif isinstance(value, (dict, list)):
            (folder / f"{name}.json").write_text(
                json.dumps(value, indent=2, default=str), encoding="utf-8"
            )
        else:
            raise TypeError(f"report artifact {name!r} has unsupported type {type(value).__name__}")
