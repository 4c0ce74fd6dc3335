"""Paper-layout reports of the ``focal`` (Mukhoti et al.), ``soft_calibration``
(Karandikar et al.) and ``dark_side`` (Singh et al.) studies.

Every report reads the study's tidy table (``StudyResults.metrics``) and, where declared
in ``needs``, per-run artifacts. Cells aggregate seeds with
:func:`calib_pipeline.calibration.stats.summarize` and are shown ``mean ± std`` (or
``± SEM``), the mean alone for a single seed. Every report takes ``selection`` (a rule of
:mod:`.selection`, or ``None`` to show every sweep member) and ``selection_metric``;
members chosen on the test set carry ``[test-selected]`` in their label and the
selection record is returned as the ``selection`` table.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import torch  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from calib_pipeline.calibration.posthoc import calibrated_scores  # noqa: E402
from calib_pipeline.calibration.stats import (  # noqa: E402
    T_TESTS,
    cohens_d,
    significance_direction,
    summarize,
    t_test,
)
from calib_pipeline.pipelines.reporting.reports import StudyResults, report  # noqa: E402
from calib_pipeline.pipelines.reporting.selection import select_sweep_members  # noqa: E402
from calib_pipeline.pipelines.reporting.tables import PERCENT_METRICS  # noqa: E402

UNCALIBRATED = "none"
SPREADS = ("std", "sem")
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


# --- shared helpers ------------------------------------------------------------------------


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> Any:
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


def _selected(
    results: StudyResults, selection: str | None, selection_metric: str | None
) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The study's tidy table reduced to one member per sweep group (or all of it)."""
    if selection is None:
        if selection_metric is not None:
            raise ValueError("selection_metric needs a selection rule (selection=...)")
        return results.metrics, None
    return select_sweep_members(results.metrics, results.groups, selection, metric=selection_metric)


def _ordered_methods(results: StudyResults, table: pd.DataFrame) -> list[str]:
    """Methods present in ``table``, in the study's order."""
    present = set(table["method"])
    return [m for m in results.methods if m in present] + sorted(present - set(results.methods))


def _labels(table: pd.DataFrame) -> dict[str, str]:
    return table.drop_duplicates("method").set_index("method")["label"].to_dict()


def _calibrator_key(table: pd.DataFrame, requested: str | None) -> str:
    """``requested`` if the table has it, else (when ``None``) its first calibrator."""
    valid = [c for c in dict.fromkeys(table["calibrator"]) if c != UNCALIBRATED]
    if requested is None and valid:
        return valid[0]
    if requested not in valid:
        raise ValueError(
            f"calibrator {requested!r} is not in the study's metrics table; "
            f"valid calibrator keys: {valid}"
        )
    return requested


def _clean(
    table: pd.DataFrame, split: str = "test", shift: str = "none", severity: int = 0
) -> pd.DataFrame:
    return table[
        (table["split"] == split) & (table["shift"] == shift) & (table["severity"] == severity)
    ]


def _check_metrics(table: pd.DataFrame, metrics: list[str]) -> None:
    available = sorted(set(table["metric"]))
    missing = [m for m in metrics if m not in available]
    if missing:
        raise ValueError(
            f"metric(s) {missing} are not in the metrics table; available: {available}"
        )


def _seed_summaries(frame: pd.DataFrame, keys: list[str], percent: tuple[str, ...]) -> pd.DataFrame:
    """One row per ``keys`` combination: mean, std, sem, n over seeds (``percent`` ×100)."""
    scaled = frame.assign(
        value=np.where(frame["metric"].isin(percent), frame["value"] * 100, frame["value"])
    )
    rows = [
        {
            **dict(zip(keys, key if isinstance(key, tuple) else (key,))),
            **asdict(summarize(values.to_numpy())),
        }
        for key, values in scaled.groupby(keys, sort=False)["value"]
    ]
    return pd.DataFrame(rows, columns=[*keys, "mean", "std", "sem", "n"])


def _cell(mean: float, spread: float, n: int, digits: int) -> str:
    """``mean ± spread`` with ``digits`` decimals, the mean alone for one seed."""
    if n < 2 or math.isnan(spread):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {spread:.{digits}f}"


def _cells(summaries: pd.DataFrame, spread: str, digits: int) -> pd.Series:
    return pd.Series(
        [
            _cell(m, s, n, digits)
            for m, s, n in zip(summaries["mean"], summaries[spread], summaries["n"])
        ],
        index=summaries.index,
    )


def _header(results: StudyResults, title: str, spread: str, record: pd.DataFrame | None) -> str:
    seeds = len(results.seeds)
    text = (
        f"# {title}\n\nStudy `{results.study}` on `{results.dataset}`, mean ± "
        f"{'SEM' if spread == 'sem' else 'std'} over {seeds} seed(s) "
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


def _with_selection(artifacts: dict[str, Any], record: pd.DataFrame | None) -> dict[str, Any]:
    if record is not None:
        artifacts["selection"] = record
    return artifacts


# --- Mukhoti et al. ----------------------------------------------------------------------


def _temperatures(results: StudyResults, table: pd.DataFrame, key: str) -> pd.DataFrame:
    """method, seed, temperature of calibrator ``key`` for every run of ``table``."""
    rows = []
    for method, seed in table[["method", "seed"]].drop_duplicates().itertuples(index=False):
        fitted = results.calibrators.get((method, int(seed)))
        if fitted is None:
            raise ValueError(
                f"no fitted calibrators for run ({method!r}, {seed}); "
                "the report needs 'calibrators'"
            )
        if key not in fitted:
            raise ValueError(
                f"run ({method!r}, {seed}) has no calibrator {key!r}; "
                f"valid calibrator keys: {sorted(fitted)}"
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


def _paper_orientation(wide: pd.DataFrame, columns: list[str], dataset: str) -> pd.DataFrame:
    """One row for the dataset, a column per (method, column) as in the paper's tables; with
    a single column the method name alone heads it."""
    stacked = wide.set_index("Method")[columns].stack()
    names = [m if len(columns) == 1 else f"{m} {c}" for m, c in stacked.index]
    return pd.DataFrame([[dataset, *stacked.to_numpy()]], columns=["Dataset", *names])


@report("mukhoti_table", needs=("calibrators",))
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
        ``temperatures`` (per run), ``mukhoti_table`` (Markdown) and ``selection`` when
        a rule was applied.
    """
    _check_choice("spread", spread, SPREADS)
    metrics = list(metrics or ["ece", "ece_em", "classwise_ece"])
    table, record = _selected(results, selection, selection_metric)
    key = _calibrator_key(table, calibrator)
    _check_metrics(table, ["error", *metrics])
    temperatures = _temperatures(results, table, key)
    rows = _clean(table)
    rows = rows[
        rows["metric"].isin(["error", *metrics]) & rows["calibrator"].isin([UNCALIBRATED, key])
    ]
    summaries = _seed_summaries(rows, ["method", "calibrator", "metric"], PERCENT_METRICS)
    summaries["cell"] = _cells(summaries, spread, digits)
    cell = summaries.set_index(["method", "calibrator", "metric"])["cell"]
    mean_t = temperatures.groupby("method")["temperature"].mean()
    labels = _labels(table)
    out_rows = []
    for method in _ordered_methods(results, table):
        t = mean_t.get(method, math.nan)
        suffix = "" if math.isnan(t) else f" ({t:.{temperature_digits}f})"
        row = {"Method": labels[method], "Error": cell[method, UNCALIBRATED, "error"]}
        for metric in metrics:
            name = METRIC_NAMES.get(metric, metric)
            row[f"{name} Pre T"] = cell[method, UNCALIBRATED, metric]
            row[f"{name} Post T"] = cell[method, key, metric] + suffix
        out_rows.append(row)
    wide = pd.DataFrame(out_rows)
    artifacts: dict[str, Any] = {"table": wide, "temperatures": temperatures}
    text = _header(
        results, "Mukhoti et al.: calibration pre / post temperature scaling", spread, record
    )
    text += (
        f"Clean test split, ×100. Post T: calibrator `{key}` fitted on the validation split; "
        "its temperature (mean over seeds) in parentheses. Error is unchanged by TS.\n\n"
        + wide.to_markdown(index=False)
        + "\n"
    )
    for metric in ["error", *metrics]:
        name = METRIC_NAMES.get(metric, metric)
        columns = ["Error"] if metric == "error" else [f"{name} Pre T", f"{name} Post T"]
        artifacts[f"paper_{metric}"] = _paper_orientation(wide, columns, results.dataset)
    artifacts["mukhoti_table"] = text
    return _with_selection(artifacts, record)


CURVE_PANELS = (
    "nll",
    "nll_correct",
    "nll_incorrect",
    "entropy_correct",
    "entropy_incorrect",
    "head_weight_norm",
)
CURVE_TITLES = {
    "nll": "NLL",
    "nll_correct": "NLL (correct)",
    "nll_incorrect": "NLL (incorrect)",
    "entropy_correct": "entropy (correct)",
    "entropy_incorrect": "entropy (incorrect)",
    "head_weight_norm": "last-layer weight norm",
    "accuracy": "accuracy",
    "ece": "ECE",
    "train_loss": "train loss (objective)",
    "train_accuracy": "train accuracy",
    "lr": "learning rate",
}


def _history_table(results: StudyResults, methods: list[str]) -> pd.DataFrame:
    """All histories of ``methods`` stacked, with method and seed columns."""
    frames = [
        history.assign(method=method, seed=seed)
        for (method, seed), history in results.histories.items()
        if method in methods
    ]
    missing = [m for m in methods if not any(k[0] == m for k in results.histories)]
    if missing:
        raise ValueError(
            f"no training history for method(s) {missing}; the report needs 'histories'"
        )
    return pd.concat(frames, ignore_index=True)


def _curve_column(history: pd.DataFrame, name: str, split: str) -> str:
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


def _epoch_summary(history: pd.DataFrame, columns: dict[str, str]) -> pd.DataFrame:
    """Long table method, epoch, quantity, mean, std, n over seeds (NaN-skipping)."""
    long = history.melt(
        id_vars=["method", "seed", "epoch"],
        value_vars=list(columns.values()),
        var_name="column",
        value_name="value",
    )
    long["quantity"] = long["column"].map({v: k for k, v in columns.items()})
    stats = long.groupby(["method", "quantity", "epoch"], sort=False)["value"].agg(
        ["mean", "std", "count"]
    )
    return stats.rename(columns={"count": "n"}).reset_index()


def _draw_curves(ax: plt.Axes, curves: pd.DataFrame, label: str) -> None:
    """Mean over seeds with a ±1 std band where there are several seeds."""
    (line,) = ax.plot(curves["epoch"], curves["mean"], label=label, linewidth=1.2)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    band = curves["n"] > 1
    if band.any():
        low = curves["mean"] - curves["std"].fillna(0)
        high = curves["mean"] + curves["std"].fillna(0)
        ax.fill_between(
            curves["epoch"], low, high, where=band, color=line.get_color(), alpha=0.2, linewidth=0
        )


def _panel_figure(
    curves: pd.DataFrame,
    methods: list[str],
    names: list[str],
    columns: dict[str, str],
    labels: dict[str, str],
    split: str,
    study: str,
) -> plt.Figure:
    """Fig. 2: one panel per quantity, one curve per method."""
    cols = min(3, len(names))
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names):
        for method in methods:
            part = curves[(curves["method"] == method) & (curves["quantity"] == name)]
            _draw_curves(ax, part, labels[method])
        title = CURVE_TITLES.get(name, name)
        ax.set_title(f"{split} {title}" if columns[name].startswith(split) else title, fontsize=9)
        ax.set_xlabel("epoch", fontsize=8)
    for ax in list(axes.flat)[len(names) :]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"{study}: per-epoch {split} statistics (mean ± std over seeds)", fontsize=10)
    fig.tight_layout()
    return fig


def _overview_figure(history: pd.DataFrame, split: str, label: str, study: str) -> plt.Figure:
    """Fig. 1 for one method: train loss vs NLL, entropies, train / eval error and ECE."""
    wanted = {
        "train loss (objective)": "train_loss",
        f"{split} NLL": f"{split}_nll",
        f"{split} entropy (correct)": f"{split}_entropy_correct",
        f"{split} entropy (incorrect)": f"{split}_entropy_incorrect",
        "train error": "train_accuracy",
        f"{split} error": f"{split}_accuracy",
        f"{split} ECE": f"{split}_ece",
    }
    present = {k: v for k, v in wanted.items() if v in history.columns}
    summary = _epoch_summary(history, present)
    names = list(wanted)
    panels = [("loss", names[:2]), ("entropy", names[2:4]), ("error / ECE", names[4:])]
    fig, axes = plt.subplots(1, 3, figsize=(12.6, 3.2), squeeze=False)
    for ax, (title, quantities) in zip(axes[0], panels):
        for name in [n for n in quantities if n in present]:
            curve = summary[summary["quantity"] == name].copy()
            if present[name].endswith("accuracy"):
                curve["mean"] = 1.0 - curve["mean"]
            _draw_curves(ax, curve, name)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("epoch", fontsize=8)
        ax.legend(fontsize=7)
    fig.suptitle(f"{study}: {label} over training", fontsize=10)
    fig.tight_layout()
    return fig


@report("mukhoti_curves", needs=("histories",))
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
    _check_choice("split", split, ("test", "val"))
    table, record = _selected(results, selection, selection_metric)
    order = _ordered_methods(results, table)
    chosen = list(methods or order)
    unknown = [m for m in chosen if m not in order]
    if unknown:
        raise ValueError(f"unknown method(s) {unknown}; the study (after selection) has: {order}")
    overview = overview_method or chosen[0]
    if overview not in order:
        raise ValueError(f"overview_method {overview!r} is not a method of the study: {order}")
    history = _history_table(results, list(dict.fromkeys([*chosen, overview])))
    names = list(panels or CURVE_PANELS)
    columns = {name: _curve_column(history, name, split) for name in names}
    labels = _labels(table)
    curves = _epoch_summary(history, columns)
    curves.insert(1, "label", curves["method"].map(labels))

    fig = _panel_figure(curves, chosen, names, columns, labels, split, results.study)
    over = _overview_figure(
        history[history["method"] == overview], split, labels[overview], results.study
    )
    return _with_selection({"curves": curves, "epochs_by_method": fig, "overview": over}, record)


# --- Karandikar et al. ---------------------------------------------------------------------

LABEL_ALIASES = {"CE": "NLL"}
PARAMETER_SUFFIX = re.compile(r"\s*\([^()]*\)$")


def _loss_cells(
    results: StudyResults, methods: list[str], losses: dict[str, Any] | None
) -> dict[str, tuple[str, str]]:
    """method -> (primary, secondary), from ``losses`` or parsed from the labels.

    A label ``"<Primary> + <Secondary>"`` gives both, a bare ``"<Primary>"`` has secondary
    ``none``; a trailing sweep suffix ``"(param=value)"`` is ignored and ``CE`` means
    ``NLL``.
    """
    if losses is not None:
        missing = [m for m in methods if m not in losses]
        bad = {
            m: v for m, v in losses.items() if not (isinstance(v, (list, tuple)) and len(v) == 2)
        }
        if missing or bad:
            raise ValueError(
                "losses must map every method to [primary, secondary]; "
                f"missing: {missing}, malformed: {bad}"
            )
        return {m: (str(losses[m][0]), str(losses[m][1])) for m in methods}
    cells = {}
    for method in methods:
        label = PARAMETER_SUFFIX.sub("", results.labels.get(method, method))
        primary, _, secondary = (part.strip() for part in label.partition(" + "))
        cells[method] = (LABEL_ALIASES.get(primary, primary), secondary or UNCALIBRATED)
    clash = pd.Series(cells).loc[lambda s: s.duplicated(keep=False)]
    if not clash.empty:
        raise ValueError(
            f"methods share a (primary, secondary) cell: {clash.to_dict()}; "
            "pass losses=... to map them"
        )
    return cells


def _karandikar_table_data(
    results: StudyResults,
    selection: str | None,
    selection_metric: str | None,
    losses: dict[str, Any] | None,
) -> tuple[pd.DataFrame, pd.DataFrame | None, dict[str, tuple[str, str]]]:
    table, record = _selected(results, selection, selection_metric)
    cells = _loss_cells(results, _ordered_methods(results, table), losses)
    return table, record, cells


@report("karandikar_table")
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
            rule (lowest val ``ece_l2`` within 1 point of the best val accuracy).

    Returns:
        ``table`` (Primary, Secondary, Accuracy, ECE, ECE+TS, ECE+TS-SB-ECE; clean test
        split), ``grid_<column>`` (rows primary, columns secondary, one per column),
        ``karandikar_table`` (Markdown, best ECE of each column in bold) and
        ``selection``.
    """
    _check_choice("spread", spread, SPREADS)
    table, record, cells = _karandikar_table_data(results, selection, selection_metric, losses)
    _check_metrics(table, ["accuracy", metric])
    columns = {"Accuracy": ("accuracy", UNCALIBRATED), "ECE": (metric, UNCALIBRATED)}
    for name, key in (("ECE+TS", ts), ("ECE+TS-SB-ECE", ts_sb_ece)):
        if key is not None:
            columns[name] = (metric, _calibrator_key(table, key))
    rows = _clean(table)
    rows = rows[rows["metric"].isin(["accuracy", metric])]
    summaries = _seed_summaries(rows, ["method", "calibrator", "metric"], ("accuracy", metric))
    summaries["cell"] = _cells(summaries, spread, digits)
    indexed = summaries.set_index(["method", "calibrator", "metric"])
    primaries = list(dict.fromkeys(p for p, _ in cells.values()))
    secondaries = list(dict.fromkeys([UNCALIBRATED, *(s for _, s in cells.values())]))
    ordered = sorted(
        cells, key=lambda m: (primaries.index(cells[m][0]), secondaries.index(cells[m][1]))
    )
    wide = pd.DataFrame(
        [
            {
                "Primary": cells[m][0],
                "Secondary": cells[m][1],
                **{name: indexed.at[(m, cal, key), "cell"] for name, (key, cal) in columns.items()},
            }
            for m in ordered
        ]
    )
    bold = wide.copy()
    for name, (key, cal) in columns.items():
        if name == "Accuracy":
            continue
        means = [indexed.at[(m, cal, key), "mean"] for m in ordered]
        best = int(np.nanargmin(means))
        bold.loc[best, name] = f"**{bold.loc[best, name]}**"
    artifacts: dict[str, Any] = {"table": wide}
    for name in columns:
        grid = wide.pivot(index="Primary", columns="Secondary", values=name)
        grid = grid.reindex(index=primaries, columns=[s for s in secondaries if s in grid.columns])
        artifacts[f"grid_{name.lower().replace('+', '_').replace('-', '_')}"] = grid.reset_index()
    calibrated = ", ".join(
        f"{n} = `{cal}`" for n, (_, cal) in columns.items() if cal != UNCALIBRATED
    )
    text = _header(results, "Karandikar et al. Table 2: primary × secondary losses", spread, record)
    text += (
        f"Clean test split, ×100; ECE = `{metric}`. Post-hoc columns: {calibrated or 'none'}, "
        "fitted on the validation split. Bold: lowest mean in each ECE column.\n\n"
        + bold.to_markdown(index=False)
        + "\n"
    )
    artifacts["karandikar_table"] = text
    return _with_selection(artifacts, record)


@report("karandikar_effects")
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
    _check_choice("test", test, T_TESTS)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    table, record, cells = _karandikar_table_data(results, selection, selection_metric, losses)
    _check_metrics(table, [metric])
    keys = [UNCALIBRATED, *[c for c in dict.fromkeys(table["calibrator"]) if c != UNCALIBRATED]]
    chosen = list(calibrators or keys)
    unknown = [c for c in chosen if c not in keys]
    if unknown:
        raise ValueError(f"unknown calibrator(s) {unknown}; valid calibrator keys: {keys}")
    rows = _clean(table)
    values = (
        rows[rows["metric"] == metric]
        .set_index(["method", "calibrator", "seed"])["value"]
        .sort_index()
    )
    by_cell = {cell: method for method, cell in cells.items()}
    effects = []
    for (primary, secondary), method in by_cell.items():
        baseline = by_cell.get((primary, UNCALIBRATED))
        if secondary == UNCALIBRATED or baseline is None:
            continue
        for cal in chosen:
            effects.append(
                _effect_row(values, metric, baseline, method, cal, test, paired, alpha)
                | {"primary": primary, "secondary": secondary}
            )
    if not effects:
        raise ValueError(
            f"no primary loss has both a 'none' cell and a secondary loss; cells: {sorted(by_cell)}"
        )
    order = [
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
    frame = pd.DataFrame(effects)[order]
    fig = _effects_figure(frame, chosen, results.study)
    text = _header(
        results, "Karandikar et al.: effect of each secondary loss on ECE", "std", record
    )
    text += (
        f"Cohen's d on test `{metric}` of `<primary>` vs `<primary> + <secondary>`, pooled SD; "
        "positive = the secondary loss lowers the ECE (0.8 = large). "
        f"p: {'paired' if paired else test} t-test, two-sided; "
        f"significant at {alpha}. Means ×100 for ECE-type metrics.\n\n"
        + frame.to_markdown(index=False, floatfmt=".3g")
        + "\n"
    )
    return _with_selection(
        {"effects": frame, "effect_sizes": fig, "karandikar_effects": text}, record
    )


def _effect_row(
    values: pd.Series,
    metric: str,
    baseline: str,
    method: str,
    calibrator: str,
    test: str,
    paired: bool,
    alpha: float,
) -> dict[str, Any]:
    """Cohen's d and t-test of ``baseline`` vs ``method`` under ``calibrator`` (NaN with a note
    if either has fewer than 2 seeds)."""
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


def _effects_figure(frame: pd.DataFrame, calibrators: list[str], study: str) -> plt.Figure:
    """Grouped bars of Cohen's d: secondary losses along x, one bar per primary loss."""
    fig, axes = plt.subplots(
        1, len(calibrators), figsize=(4.5 * len(calibrators), 3.4), squeeze=False, sharey=True
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
    axes[0, 0].set_ylabel("Cohen's d (positive = lower ECE)", fontsize=8)
    axes[0, 0].legend(fontsize=7, title="primary", title_fontsize=7)
    fig.suptitle(f"{study}: effect size of secondary losses (dashed: d = 0.8)", fontsize=10)
    fig.tight_layout()
    return fig


# --- Singh et al. --------------------------------------------------------------------------

SINGH_METRICS = ["brier", "ece", "auroc", "decomp_alpha", "decomp_beta", "decomp_gamma"]
LOWER_IS_BETTER = {"brier": True, "ece": True, "auroc": False}
DECOMPOSITION = ("decomp_alpha", "decomp_beta", "decomp_gamma")


def _with_decomposed_ece(rows: pd.DataFrame) -> pd.DataFrame:
    """Adds ``decomp_ece = alpha - beta - gamma`` per run (Singh et al. eq. 9)."""
    keys = ["method", "label", "seed", "calibrator", "split", "shift", "severity"]
    parts = rows[rows["metric"].isin(DECOMPOSITION)].pivot_table(
        index=keys, columns="metric", values="value"
    )
    if parts.empty or not set(DECOMPOSITION) <= set(parts.columns):
        return rows
    derived = (
        (parts["decomp_alpha"] - parts["decomp_beta"] - parts["decomp_gamma"])
        .rename("value")
        .reset_index()
    )
    return pd.concat([rows, derived.assign(metric="decomp_ece")], ignore_index=True)


@report("singh_table")
def singh_table(
    results: StudyResults,
    calibrator: str | None = None,
    calibrated: str = "all",
    baseline: str | None = None,
    metrics: list[str] | None = None,
    shifts: list[str] | None = None,
    test: str = "welch",
    alpha: float = 0.05,
    spread: str = "std",
    digits: int = 2,
    selection: str | None = None,
    selection_metric: str | None = None,
) -> dict[str, Any]:
    """Singh et al. Tables 1-3: Brier, ECE, refinement AUROC and the ECE decomposition
    α − β − γ (eq. 9), before and after (fixed-T) temperature scaling, all ×100.

    Args:
        calibrator: calibrator key of the TS rows (default: the table's first calibrator
            other than ``none``, i.e. ``ts_fixed`` in the ``dark_side`` study).
        calibrated: ``"all"`` (a ``<method> + <calibrator>`` row after every method) or
            ``"baseline"`` (the paper: only the baseline's TS row).
        baseline: the baseline method key (default the study's first method, CE).
        metrics: metric keys (default Brier, ECE, AUROC, α, β, γ; ``α − β − γ`` is added
            when all three decomposition terms are present).
        shifts: shift names (default ``["none"]``, the clean test split); every other
            shift gives one table per severity (Table 3 for natural shift sets).
        test, alpha: a cell is **bold** in the Markdown (the paper's "clearly worse than
            the baseline") when it is worse than the uncalibrated baseline by a
            two-sample t-test at ``alpha`` (Brier / ECE higher, AUROC lower); needs at
            least 2 seeds.
        spread, digits: ``"std"`` (the paper) or ``"sem"``; decimals.
        selection, selection_metric: sweep selection (module docstring).

    Returns:
        ``table`` (clean test) and ``table_<shift>_s<severity>`` per requested shift,
        ``comparisons`` (every test against the baseline), ``singh_table`` (Markdown)
        and ``selection`` when a rule was applied.
    """
    _check_choice("spread", spread, SPREADS)
    _check_choice("calibrated", calibrated, ("all", "baseline"))
    _check_choice("test", test, T_TESTS)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    table, record = _selected(results, selection, selection_metric)
    key = _calibrator_key(table, calibrator)
    metrics = list(metrics or SINGH_METRICS)
    _check_metrics(table, metrics)
    methods = _ordered_methods(results, table)
    base = baseline or methods[0]
    if base not in methods:
        raise ValueError(f"baseline {base!r} is not a method of the study: {methods}")
    tested = table[(table["split"] == "test") & table["metric"].isin(metrics)]
    available = tested[["shift", "severity"]].drop_duplicates()
    wanted = list(shifts or ["none"])
    unknown = [s for s in wanted if s not in set(available["shift"])]
    if unknown:
        raise ValueError(
            f"unknown shift(s) {unknown}; the metrics table has: {sorted(set(available['shift']))}"
        )
    rows_order = [
        (m, c)
        for m in [base, *(m for m in methods if m != base)]
        for c in [UNCALIBRATED, key]
        if c == UNCALIBRATED or calibrated == "all" or m == base
    ]
    labels = _labels(table)
    artifacts: dict[str, Any] = {}
    comparisons = []
    text = _header(results, "Singh et al.: calibration and refinement", spread, record)
    text += (
        f"Test split, all values ×100. `{key}` rows: the calibrator fitted on the validation "
        f"split. Bold: worse than the uncalibrated baseline ({labels[base]}) by a {test} t-test "
        f"at {alpha} (needs ≥ 2 seeds). α − β − γ is Singh et al.'s eq. 9 (equals ECE when "
        "every bin is overconfident).\n"
    )
    for shift, severity in available[available["shift"].isin(wanted)].itertuples(index=False):
        part = _with_decomposed_ece(_clean(tested, "test", shift, severity))
        plain, marked, tests = _singh_shift_table(
            part, metrics, rows_order, labels, base, spread, digits, test, alpha
        )
        comparisons.extend(tests.assign(shift=shift, severity=severity).to_dict("records"))
        artifacts["table" if shift == "none" else f"table_{shift}_s{severity}"] = plain
        title = "clean test set" if shift == "none" else f"shift `{shift}`, severity {severity}"
        text += f"\n## {title}\n\n" + marked.to_markdown(index=False) + "\n"
    artifacts["comparisons"] = pd.DataFrame(
        comparisons,
        columns=["shift", "severity", "method", "metric", "mean_difference", "p_value", "worse"],
    )
    artifacts["singh_table"] = text
    return _with_selection(artifacts, record)


def _singh_shift_table(
    part: pd.DataFrame,
    metrics: list[str],
    rows_order: list[tuple[str, str]],
    labels: dict[str, str],
    base: str,
    spread: str,
    digits: int,
    test: str,
    alpha: float,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """One Singh table (one test set) of ``metrics`` (+ α − β − γ): plain cells, cells with
    bold where significantly worse than the uncalibrated baseline, and every baseline test
    (method, metric, mean_difference, p_value, worse)."""
    names = [m for m in [*metrics, "decomp_ece"] if m in set(part["metric"])]
    summaries = _seed_summaries(part, ["method", "calibrator", "metric"], tuple(names))
    summaries["cell"] = _cells(summaries, spread, digits)
    cell = summaries.set_index(["method", "calibrator", "metric"])["cell"]
    per_seed = part.set_index(["method", "calibrator", "metric"])["value"].sort_index()
    plain, marked, tests = [], [], []
    for method, cal in rows_order:
        label = labels[method] if cal == UNCALIBRATED else f"{labels[method]} + {cal}"
        row = {"Method": label, **{METRIC_NAMES.get(m, m): cell[method, cal, m] for m in names}}
        bold = dict(row)
        compared = [m for m in names if m in LOWER_IS_BETTER]
        for metric in compared if (method, cal) != (base, UNCALIBRATED) else []:
            # one seed makes .loc return a scalar
            a = np.atleast_1d(per_seed.loc[(method, cal, metric)])
            b = np.atleast_1d(per_seed.loc[(base, UNCALIBRATED, metric)])
            result = t_test(a, b, test=test) if min(len(a), len(b)) >= 2 else None
            worse = result is not None and significance_direction(result, alpha) == (
                1 if LOWER_IS_BETTER[metric] else -1
            )
            tests.append(
                {
                    "method": label,
                    "metric": metric,
                    "mean_difference": result.mean_difference if result else math.nan,
                    "p_value": result.p_value if result else math.nan,
                    "worse": worse,
                }
            )
            if worse:
                bold[METRIC_NAMES[metric]] = f"**{row[METRIC_NAMES[metric]]}**"
        plain.append(row)
        marked.append(bold)
    columns = ["method", "metric", "mean_difference", "p_value", "worse"]
    return pd.DataFrame(plain), pd.DataFrame(marked), pd.DataFrame(tests, columns=columns)


def _confidence_correct(
    scores: torch.Tensor, kind: str, labels: torch.Tensor
) -> tuple[np.ndarray, np.ndarray]:
    """Top-label confidence and correctness of logits or probabilities."""
    probs = torch.softmax(scores.double(), dim=1) if kind == "logits" else scores.double()
    confidence, prediction = probs.max(dim=1)
    return confidence.cpu().numpy(), (prediction.cpu() == labels.cpu()).numpy()


@report("singh_density", needs=("logits", "calibrators"))
def singh_density(
    results: StudyResults,
    calibrator: str | None = None,
    bins: int = 20,
    split: str = "test",
    selection: str | None = None,
    selection_metric: str | None = None,
) -> dict[str, Any]:
    """Singh et al. Fig. 1(d-e), 2: densities of the top-label confidence of correct and
    incorrect predictions, per method, before and after the calibrator.

    Seeds are pooled. Each outcome's histogram integrates to 1 (``density``); the panel
    title gives the refinement AUROC (mean over seeds, from the metrics table) - the
    overlap of the two densities is what it measures.

    Args:
        calibrator: calibrator key of the right-hand column (default: the table's first
            calibrator other than ``none``).
        bins: equal-width bins on [0, 1].
        split: ``"test"`` or ``"val"``.
        selection, selection_metric: sweep selection (module docstring).

    Returns:
        ``histograms`` (method, label, calibrator, outcome, lower, upper, count, density)
        and the figure ``confidence_density`` (a row per method, columns uncalibrated /
        calibrated).
    """
    _check_choice("split", split, ("test", "val"))
    if isinstance(bins, bool) or not isinstance(bins, int) or bins < 2:
        raise ValueError(f"bins must be an integer >= 2, got {bins!r}")
    table, record = _selected(results, selection, selection_metric)
    key = _calibrator_key(table, calibrator)
    methods = _ordered_methods(results, table)
    labels = _labels(table)
    runs = table[["method", "seed"]].drop_duplicates()
    edges = np.linspace(0.0, 1.0, bins + 1)
    frames = []
    for method in methods:
        for cal in (UNCALIBRATED, key):
            confidence, correct = [], []
            for seed in runs.loc[runs["method"] == method, "seed"]:
                run = results.logits.get((method, int(seed)))
                if run is None:
                    raise ValueError(
                        f"no logits for run ({method!r}, {seed}); the report needs 'logits'"
                    )
                scores, kind = run[split]["logits"], "logits"
                if cal != UNCALIBRATED:
                    fitted = results.calibrators.get((method, int(seed))) or {}
                    if cal not in fitted:
                        raise ValueError(
                            f"run ({method!r}, {seed}) has no calibrator {cal!r}; "
                            f"valid calibrator keys: {sorted(fitted)}"
                        )
                    scores, kind = calibrated_scores(fitted[cal], scores)
                c, ok = _confidence_correct(scores, kind, run[split]["labels"])
                confidence.append(c)
                correct.append(ok)
            c, ok = np.concatenate(confidence), np.concatenate(correct)
            for outcome, mask in (("correct", ok), ("incorrect", ~ok)):
                counts, _ = np.histogram(c[mask], bins=edges)
                density = counts / max(int(mask.sum()), 1) / np.diff(edges)
                frames.append(
                    pd.DataFrame(
                        {
                            "method": method,
                            "label": labels[method],
                            "calibrator": cal,
                            "outcome": outcome,
                            "lower": edges[:-1],
                            "upper": edges[1:],
                            "count": counts,
                            "density": density,
                        }
                    )
                )
    histograms = pd.concat(frames, ignore_index=True)
    auroc = _clean(table, split)
    auroc = auroc[auroc["metric"] == "auroc"].groupby(["method", "calibrator"])["value"].mean()
    fig, axes = plt.subplots(
        len(methods), 2, figsize=(7.0, 2.3 * len(methods)), squeeze=False, sharex=True
    )
    colours = {"correct": "#4C72B0", "incorrect": "#C44E52"}
    for i, method in enumerate(methods):
        for j, cal in enumerate((UNCALIBRATED, key)):
            ax = axes[i, j]
            for outcome, colour in colours.items():
                part = histograms[
                    (histograms["method"] == method)
                    & (histograms["calibrator"] == cal)
                    & (histograms["outcome"] == outcome)
                ]
                ax.stairs(
                    part["density"].to_numpy(),
                    edges,
                    fill=True,
                    alpha=0.45,
                    color=colour,
                    label=outcome,
                )
            value = auroc.get((method, cal), math.nan)
            name = "uncalibrated" if cal == UNCALIBRATED else cal
            ax.set_title(f"{labels[method]}, {name}: AUROC {100 * value:.1f}", fontsize=8)
            if i == len(methods) - 1:
                ax.set_xlabel("top-label confidence", fontsize=8)
            if j == 0:
                ax.set_ylabel("density", fontsize=8)
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(
        f"{results.study}: confidence of correct vs incorrect {split} predictions", fontsize=10
    )
    fig.tight_layout()
    return _with_selection({"histograms": histograms, "confidence_density": fig}, record)
