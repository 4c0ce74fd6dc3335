"""Calibratability analyses of Wang et al. (2021), *Rethinking calibration of deep neural
networks: do not be afraid of overconfidence*, as registered reports.

- ``calibratability_table`` (Table 2): test ECE before and after the val-fitted post-hoc
  calibrators, the fitted temperature, a two-sample t-test against CE, and -- in a separate
  table -- the ORACLE ECE with T searched on the test logits themselves.
- ``validation_size_sweep`` (Fig. 3): test ECE after calibrators fitted on class-stratified
  subsamples of the validation logits.
- ``optimal_ece_per_epoch`` (Fig. 4): oracle-TS ECE and raw ECE of every recorded epoch.
- ``max_logit_histograms`` (Fig. 5): maximum training logit by learned epoch.

ECE is the 15-bin equal-width top-label ECE (``metrics.ece``) in %, as in the paper. Every
figure is one matplotlib Figure; every table is computed from the cached logits and fitted
calibrators, so the reports re-run without retraining. Methods are listed with the members
of a sweep together under their group.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from matplotlib.ticker import MaxNLocator
from scipy.stats import spearmanr

from calib_pipeline.calibration import metrics, posthoc
from calib_pipeline.calibration.stats import significance_direction, t_test
from calib_pipeline.registry import check_choice, check_int
from calib_pipeline.reports.common import (
    MEAN_OVER_SEEDS,
    MISSING_CELL,
    UNCALIBRATED,
    MethodStyle,
    method_order,
    method_styles,
    paper_view,
    seed_stats,
    stat_cells,
    with_numbers,
)
from calib_pipeline.reports.published import published_artifacts
from calib_pipeline.reports.registry import (
    BOOLEAN,
    SIGNIFICANCE,
    TEXT,
    Option,
    StudyOutline,
    StudyResults,
    calibrators_in,
    choice,
    either,
    integer,
    list_of,
    number,
    optional,
    report,
)
from calib_pipeline.reports.selection import select_sweep_members

ORACLE = "oracle"
SELECTED = "test-selected"
# Wang et al. Table 2 marks every cell's direction against CE: filled when the t-test is
# significant, hollow when not.
HIGHER, LOWER = "▲", "▼"
HIGHER_NS, LOWER_NS = "△", "▽"
DEFAULT_CALIBRATORS = ("ts_grid_wang", "hist_binning")
# Wang et al. Section 4: T on the grid 0.01..10 step 0.01 minimising val ECE; HB with 15
# equal-size bins on the top-label confidence. Same specs as conf/base/parameters.yml.
WANG_CALIBRATORS: dict[str, dict[str, Any]] = {
    "ts_grid_wang": {"name": "temperature_grid_ece", "params": {"preset": "wang"}},
    "hist_binning": {
        "name": "histogram_binning",
        "params": {"n_bins": 15, "binning": "equal_size"},
    },
}
ORACLE_NOTE = (
    "**ORACLE bound, not a calibration result:** T is searched on the TEST logits themselves "
    '(Wang et al.\'s "optimal ECE"), so it lower-bounds what any validation-fitted '
    "temperature on the same grid can reach. Never compare it as a method."
)
POSITIVE = integer(low=1)
TEMPERATURE_GRID = either(
    choice(*posthoc.TEMPERATURE_GRIDS), list_of(number(low=0.0, low_inclusive=False), length=3)
)


# --- runs of the study -------------------------------------------------------------------


def _identity(results: StudyResults, method: str) -> dict[str, str]:
    return {
        "group": results.groups.get(method, method),
        "method": method,
        "label": results.labels.get(method, method),
    }


def _ordered_methods(results: StudyResults) -> list[str]:
    return method_order(results.methods, groups=results.groups)


def _runs(results: StudyResults, kind: str) -> Iterator[tuple[str, int, Any]]:
    """``(method, seed, artifact)`` of every run, grouped methods first.

    Raises:
        ValueError: a run of the study has no ``kind`` artifact.
    """
    store = getattr(results, kind)
    for method in _ordered_methods(results):
        for seed in results.seeds:
            if (method, seed) not in store:
                raise ValueError(
                    f"report needs the {kind!r} of {method!r} seed {seed}, which is missing; "
                    f"runs present: {sorted(store)}"
                )
            yield method, seed, store[(method, seed)]


def _with_method_legend(fig: plt.Figure, ax: plt.Axes, title: str) -> plt.Figure:
    """``fig`` titled, with the legend of ``ax`` right of it: a study has many methods, and
    a legend inside the panel would hide the curves."""
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def _percent_ece(scores: torch.Tensor, labels: torch.Tensor, inputs: str, n_bins: int) -> float:
    return 100.0 * float(metrics.ece(scores, labels, n_bins=n_bins, inputs=inputs))


# --- calibratability_table (Wang Table 2) ------------------------------------------------


def _check_calibrator_keys(results: StudyResults, keys: Sequence[str]) -> list[str]:
    """The requested calibrator keys, each fitted for every run of the study."""
    fitted = [set(cals) for cals in results.calibrators.values()]
    valid = sorted(set.intersection(*fitted)) if fitted else []
    unknown = [k for k in keys if k not in valid]
    if unknown or not keys:
        raise ValueError(
            f"unknown calibrator key(s) {unknown or list(keys)}; "
            "valid keys (fitted for every run) are: "
            + (", ".join(valid) or "none -- run the posthoc stage")
        )
    return list(keys)


def _check_table_options(
    results: StudyResults,
    calibrators: Sequence[str],
    baseline: str,
    select_by: str,
    exclude: Sequence[str] = (),
) -> list[str]:
    """The calibrator keys of the table, once the keys, the baseline, ``select_by`` and the
    excluded members are known to be in the study."""
    keys = _check_calibrator_keys(results, calibrators)
    for name, methods in (("baseline", [baseline]), ("exclude", list(exclude))):
        unknown = [m for m in methods if m not in results.methods]
        if unknown:
            raise ValueError(
                f"{name}: {unknown} are not methods of study {results.study!r}: {results.methods}"
            )
    check_choice("select_by", select_by, (UNCALIBRATED, *keys))
    return keys


def _fit_note(
    base: dict[str, Any], calibrator: str, converged: bool, warning: str
) -> dict[str, Any]:
    return {**base, "calibrator": calibrator, "converged": converged, "warnings": warning}


def calibratability_runs(
    results: StudyResults,
    keys: list[str],
    n_bins: int = 15,
    oracle_grid: str | Sequence[float] = "wang",
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-run test ECE (%) / temperature of every val-fitted calibrator and of the oracle.

    Args:
        results: the study; needs logits and fitted calibrators of every run.
        keys: the calibrator keys.
        n_bins: ECE bins.
        oracle_grid: ``TEMPERATURE_GRIDS`` preset or ``[start, stop, step]`` of the oracle.

    Returns:
        ``(runs, fit_notes)``: ``runs`` has columns group, method, label, seed, calibrator,
        quantity (``ece`` or ``temperature``), value; the oracle rows have calibrator
        ``"oracle"``. ``fit_notes`` lists every non-converged or warning fit.
    """
    check_int("n_bins", n_bins, low=1)
    rows: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    for method, seed, logits in _runs(results, "logits"):
        base = {**_identity(results, method), "seed": seed}
        z, y = logits["test"]["logits"], logits["test"]["labels"]
        values = {(UNCALIBRATED, "ece"): _percent_ece(z, y, "logits", n_bins)}
        for key in keys:
            calibrator = results.calibrators[(method, seed)][key]
            scores, inputs = posthoc.calibrated_scores(calibrator, z)
            values[(key, "ece")] = _percent_ece(scores, y, inputs, n_bins)
            temperature = calibrator.learned().get("temperature")
            if temperature is not None:
                values[(key, "temperature")] = float(temperature)
            if calibrator.warnings or not calibrator.converged:
                notes.append(
                    _fit_note(base, key, calibrator.converged, "; ".join(calibrator.warnings))
                )
        oracle = posthoc.oracle_temperature(z, y, grid=oracle_grid, n_bins=n_bins)
        values[(ORACLE, "ece")] = 100.0 * oracle["oracle_ece"]
        values[(ORACLE, "temperature")] = oracle["oracle_temperature"]
        if oracle["at_grid_bound"]:
            notes.append(
                _fit_note(
                    base,
                    ORACLE,
                    True,
                    f"oracle T = {oracle['oracle_temperature']:g} is at a grid bound",
                )
            )
        rows.extend(
            {**base, "calibrator": c, "quantity": q, "value": v} for (c, q), v in values.items()
        )
    columns = ["group", "method", "label", "seed", "calibrator", "converged", "warnings"]
    return pd.DataFrame(rows), pd.DataFrame(notes, columns=columns)


def compare_to_baseline(runs: pd.DataFrame, baseline: str, alpha: float) -> pd.DataFrame:
    """Two-sided two-sample Student t-test (pooled variance) of every method against ``baseline``.

    For each (calibrator, quantity) cell, ``stats.t_test(method, baseline, test="student")``
    on the per-seed values, ``t = (x̄_m - x̄_b) / (s_p √(1/n_m + 1/n_b))``, as in Wang et al.
    Table 2. The mark is ``▲`` when the method's mean is significantly higher than the
    baseline's (for ECE: worse) at ``alpha``, ``▼`` when significantly lower, and -- as the
    paper marks every cell's direction -- the hollow ``△`` / ``▽`` when higher / lower but
    not significantly; empty for equal means, the baseline itself and where either side
    has fewer than two seeds (p-value NaN).

    Args:
        runs: per-run rows with columns method, seed, calibrator, quantity, value.
        baseline: the reference method.
        alpha: significance level in (0, 1).

    Returns:
        One row per (method, calibrator, quantity): ``p_value`` and ``mark``.
    """
    rows = []
    for (method, calibrator, quantity), cell in runs.groupby(
        ["method", "calibrator", "quantity"], sort=False
    ):
        reference = runs.loc[
            (runs["method"] == baseline)
            & (runs["calibrator"] == calibrator)
            & (runs["quantity"] == quantity),
            "value",
        ].to_numpy()
        values = cell["value"].to_numpy()
        p_value, mark = np.nan, ""
        if method != baseline and values.size >= 2 and reference.size >= 2:
            result = t_test(values, reference, test="student")
            p_value = result.p_value
            mark = {1: HIGHER, -1: LOWER, 0: ""}[significance_direction(result, alpha)]
            if not mark and result.mean_difference != 0:  # a direction, not significant
                mark = HIGHER_NS if result.mean_difference > 0 else LOWER_NS
        rows.append(
            {
                "method": method,
                "calibrator": calibrator,
                "quantity": quantity,
                "p_value": p_value,
                "mark": mark,
            }
        )
    return pd.DataFrame(rows, columns=["method", "calibrator", "quantity", "p_value", "mark"])


def _wide(summary: pd.DataFrame, columns: list[tuple[str, str, str]]) -> pd.DataFrame:
    """Rows (group, method, label) x ``mean ± std[ mark]`` :class:`~.common.Cell` columns
    (ECE in %, T as fitted).

    ``columns`` holds ``(calibrator, quantity, header)``; the ECE cells carry the t-test mark.
    """
    index = ["group", "method", "label"]
    table = summary[index].drop_duplicates().reset_index(drop=True)
    for calibrator, quantity, header in columns:
        cell = summary[(summary["calibrator"] == calibrator) & (summary["quantity"] == quantity)]
        text = [
            value + (f" {mark}" if mark and quantity == "ece" else "")
            for value, mark in zip(
                stat_cells(cell, unit="%" if quantity == "ece" else ""), cell["mark"]
            )
        ]
        table = table.merge(
            pd.DataFrame({"method": cell["method"].to_numpy(), header: text}),
            on="method",
            how="left",
        )
    return table.fillna(MISSING_CELL)


def calibratability_tables(
    runs: pd.DataFrame, keys: list[str], baseline: str, alpha: float, selected: set[str]
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Wang et al. Table 2 and its oracle table from :func:`calibratability_runs`.

    Args:
        runs: the per-run values.
        keys: the val-fitted calibrator keys, in column order.
        baseline: the method the t-tests compare against.
        alpha: t-test significance level.
        selected: the methods marked ``test-selected``.

    Returns:
        ``(table, oracle, stats)``: the val-fitted table, the oracle table (both formatted,
        then their numbers: :func:`~.common.with_numbers`) and the mean / std / n / p-value /
        mark of every cell.
    """
    SIGNIFICANCE.validate("alpha", alpha)
    stats = seed_stats(runs, ["group", "method", "label", "calibrator", "quantity"])
    stats = stats.merge(
        compare_to_baseline(runs, baseline, alpha),
        on=["method", "calibrator", "quantity"],
        how="left",
    )
    stats.insert(3, "selection", np.where(stats["method"].isin(selected), SELECTED, ""))
    val_fitted = stats[stats["calibrator"] != ORACLE]
    columns = [(UNCALIBRATED, "ece", "ECE (%) uncalibrated")]
    for key in keys:
        columns.append((key, "ece", f"ECE (%) after {key}"))
        if ((val_fitted["calibrator"] == key) & (val_fitted["quantity"] == "temperature")).any():
            columns.append((key, "temperature", f"T of {key}"))
    table = _wide(val_fitted, columns)
    table.insert(3, "selection", np.where(table["method"].isin(selected), SELECTED, ""))
    table = with_numbers(table)
    oracle = _wide(
        stats[stats["calibrator"].isin([ORACLE, UNCALIBRATED])],
        [
            (UNCALIBRATED, "ece", "ECE (%) uncalibrated"),
            (ORACLE, "ece", "ORACLE ECE (%), T searched on test"),
            (ORACLE, "temperature", "ORACLE T (test-fitted)"),
        ],
    )
    return table, with_numbers(oracle), stats


def _calibratability_markdown(
    results: StudyResults,
    table: pd.DataFrame,
    oracle: pd.DataFrame,
    notes: pd.DataFrame,
    *,
    keys: list[str],
    baseline: str,
    alpha: float,
    n_bins: int,
    select_by: str,
    grid: Any,
) -> str:
    seeds = len(results.seeds)
    lines = [
        f"# Calibratability: {results.study} on {results.dataset_label}",
        "",
        (
            f"- Test ECE (%, {n_bins} equal-width bins), mean ± std over {seeds} seed(s), before "
            f"and after the post-hoc calibrators {', '.join(keys)} fitted on the validation split "
            "(Wang et al. Table 2); `T of …` is the fitted temperature."
        ),
        (
            f"- {HIGHER} / {LOWER}: mean ECE significantly higher (worse) / lower (better) than "
            f"`{baseline}` in a two-sided two-sample Student t-test over seeds at {alpha}; "
            f"{HIGHER_NS} / {LOWER_NS}: higher / lower, not significantly"
            + ("" if seeds >= 2 else " -- not computed: the t-test needs at least 2 seeds")
            + "."
        ),
        (
            f"- `{SELECTED}`: in each swept group, the member with the lowest mean test ECE "
            f"({'uncalibrated' if select_by == UNCALIBRATED else 'after ' + select_by}; the "
            "study's evaluation table, see table `selection`) -- Wang et al. pick coefficients "
            "this way, so the choice itself has seen the test set."
        ),
        "",
        paper_view(table).to_markdown(index=False),
        "",
        f"## Oracle bound (T grid {grid})",
        "",
        ORACLE_NOTE,
        "",
        paper_view(oracle).to_markdown(index=False),
        "",
        "## Fit warnings",
        "",
        "No calibrator warned and every fit converged."
        if notes.empty
        else notes.to_markdown(index=False),
    ]
    return "\n".join(lines) + "\n"


def _published(
    results: StudyResults, keys: list[str], runs: pd.DataFrame
) -> tuple[dict[str, Any], str]:
    """Wang et al.'s own numbers beside ours: their TS is the first shown temperature
    calibrator, their HB the first histogram binning."""
    fitted = next(iter(results.calibrators.values()), {})
    names = {key: getattr(fitted.get(key), "name", "") for key in keys}
    calibrators = {}
    for paper_name, prefix in (("ts", "temperature"), ("hb", "histogram_binning")):
        first = next((k for k in keys if names[k].startswith(prefix)), None)
        if first is not None:
            calibrators[paper_name] = first
    temperatures = runs.loc[
        (runs["calibrator"] == calibrators.get("ts")) & (runs["quantity"] == "temperature"),
        ["method", "seed", "value"],
    ].rename(columns={"value": "temperature"})
    return published_artifacts(results, "wang", calibrators, temperatures)


def _members_known(study: StudyOutline, options: Mapping[str, Any]) -> None:
    """Before any training: the ``baseline`` and ``exclude`` members are methods of the study
    (e.g. conf/cifar100's exclusion of L1 settings in a study without that sweep)."""
    baseline, exclude = options.get("baseline", "ce"), list(options.get("exclude") or [])
    for name, methods in (("baseline", [baseline]), ("exclude", exclude)):
        unknown = [m for m in methods if m not in study.methods]
        if unknown:
            raise ValueError(
                f"{name}: {unknown} are not methods of study {study.name!r}: {list(study.methods)}"
            )


CALIBRATABILITY_OPTIONS = {
    "calibrators": list_of(TEXT),
    "baseline": TEXT,
    "alpha": SIGNIFICANCE,
    "n_bins": POSITIVE,
    "oracle_grid": TEMPERATURE_GRID,
    "select_by": TEXT,
    "exclude": optional(list_of(TEXT)),
}


@report(
    "calibratability_table",
    needs=("logits", "calibrators"),
    calibrators=calibrators_in("calibrators"),
    study_check=_members_known,  # baseline and exclude, before any training
    options=CALIBRATABILITY_OPTIONS,
)
def calibratability_table(
    results: StudyResults,
    calibrators: Sequence[str] = DEFAULT_CALIBRATORS,
    baseline: str = "ce",
    alpha: float = 0.05,
    n_bins: int = 15,
    oracle_grid: str | Sequence[float] = "wang",
    select_by: str = UNCALIBRATED,
    exclude: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Wang et al. Table 2: test ECE (%) before / after val-fitted calibrators, fitted T,
    t-test vs CE.

    Every method is a row, sweep members under their group; in each swept group the member
    of lowest mean test ECE under ``select_by`` (``selection.select_sweep_members``, rule
    ``test_ece``) is marked ``test-selected`` (Wang's coefficient choice, made on test data).
    The ORACLE ECE (``posthoc.oracle_temperature``: T searched on the test logits on
    ``oracle_grid``) is a separate table, never a column of the val-fitted one.

    Args:
        results: the study; needs logits and fitted calibrators of every run.
        calibrators: calibrator keys (of ``calibrators`` in parameters.yml) shown after
            the uncalibrated column; a temperature calibrator also gets its T column.
        baseline, alpha, n_bins: the t-tests' reference (Wang: CE) and level; ECE bins (Wang: 15).
        oracle_grid: ``TEMPERATURE_GRIDS`` preset or ``[start, stop, step]`` of the oracle.
        select_by: ``"none"`` (uncalibrated, Wang Table 1) or a shown calibrator key
            whose test ECE decides the test-selected member.
        exclude: members shown but never test-selected (Wang §3 drops L1 α ≥ 0.05 on
            CIFAR-100, which fails to train: its near-uniform confidences would win on ECE).

    Returns:
        ``calibratability`` and ``oracle`` (formatted), ``calibratability_stats`` (numeric
        mean/std/n/p/mark per cell), ``calibratability_runs`` (per-seed values),
        ``selection`` (the selection record), ``fit_warnings`` (when any), the Markdown
        ``calibratability_table`` and, when the study's dataset and architecture are the
        paper's (ResNet-32 on SVHN, CIFAR-10 / 100), ``published`` (Tables 1-2 beside ours).

    Raises:
        ValueError: unknown calibrator key (lists the valid ones), baseline not in the
            study, ``select_by`` not among the shown calibrators.
    """
    keys = _check_table_options(results, calibrators, baseline, select_by, exclude or [])
    runs, notes = calibratability_runs(results, keys, n_bins, oracle_grid)
    record = _test_selected(results, select_by, exclude or [])
    settings = {"keys": keys, "baseline": baseline, "alpha": alpha, "n_bins": n_bins}
    return _calibratability_artifacts(
        results, runs, notes, record, **settings, select_by=select_by, grid=oracle_grid
    )


def _calibratability_artifacts(
    results: StudyResults,
    runs: pd.DataFrame,
    notes: pd.DataFrame,
    record: pd.DataFrame,
    **settings: Any,
) -> dict[str, Any]:
    """:func:`calibratability_table`'s artifacts from its per-run values, fit warnings and
    selection record; ``settings``: ``keys``, ``baseline``, ``alpha``, ``n_bins``,
    ``select_by`` and ``grid``."""
    keys = settings["keys"]
    chosen = set(record["method"])
    table, oracle, stats = calibratability_tables(
        runs, keys, settings["baseline"], settings["alpha"], chosen
    )
    markdown = _calibratability_markdown(results, table, oracle, notes, **settings)
    published, section = _published(results, keys, runs)
    return {
        "calibratability": table,
        "oracle": oracle,
        "calibratability_stats": stats,
        "calibratability_runs": runs,
        "selection": record,
        "calibratability_table": markdown + section,
        **published,
        **({} if notes.empty else {"fit_warnings": notes}),
    }


def _test_selected(results: StudyResults, select_by: str, exclude: Sequence[str]) -> pd.DataFrame:
    """The selection record of the test-selected member of each swept group: lowest mean
    test ECE under ``select_by``, the ``exclude`` d members never chosen."""
    candidates = results.metrics[~results.metrics["method"].isin(list(exclude))]
    _, record = select_sweep_members(
        candidates, results.groups, "test_ece", metric="ece", calibrator=select_by
    )
    return record


# --- validation_size_sweep (Wang Fig. 3) -------------------------------------------------


def _check_calibrator_specs(name: str, specs: Any) -> dict[str, tuple[str, dict[str, Any]]]:
    """``key -> (registry name, params)``, every one built once so bad specs fail before fitting."""
    if not isinstance(specs, dict) or not specs:
        raise ValueError(f"{name} must map keys to {{name, params}} specs, got {specs!r}")
    out = {}
    for key, spec in specs.items():
        if not isinstance(spec, dict) or "name" not in spec:
            raise ValueError(
                f"calibrator {key!r} needs a 'name' (a calibrator registry name), got {spec!r}"
            )
        params = dict(spec.get("params") or {})
        try:
            posthoc.build_calibrator(spec["name"], **params)
        except ValueError as error:
            raise ValueError(f"calibrator {key!r}: {error}") from None
        out[key] = (spec["name"], params)
    return out


CALIBRATOR_SPECS = Option("a mapping of calibrator keys to {name, params}", _check_calibrator_specs)
RUN_COLUMNS = [
    "group",
    "method",
    "label",
    "seed",
    "calibrator",
    "size_label",
    "size",
    "subsample_seed",
    "value",
    "temperature",
    "converged",
    "warnings",
]


def _size_label(size: int | str) -> str:
    return "all" if size == "all" else str(int(size))


def validation_size_runs(
    results: StudyResults,
    sizes: Sequence[int | str],
    subsample_seeds: Sequence[int],
    calibrators: dict[str, dict[str, Any]],
    stratified: bool = True,
) -> tuple[pd.DataFrame, dict[str, int]]:
    """Test ECE (%) of every calibrator fitted on every validation subsample of every run.

    Args:
        results: the study; needs logits of every run.
        sizes: subsample sizes, positive integers or ``"all"`` (the whole split, fitted once).
        subsample_seeds: seeds of the subsample draws.
        calibrators: key -> ``{"name": registry name, "params": {...}}``.
        stratified: stratify subsamples by class (else a uniform draw).

    Returns:
        ``(runs, skipped)``: one row per fit (``RUN_COLUMNS``), and size label -> the
        validation size of the runs it exceeded (those sizes are skipped).
    """
    specs = _check_calibrator_specs("calibrators", calibrators)
    rows: list[pd.DataFrame] = []
    skipped: dict[str, int] = {}
    for method, seed, logits in _runs(results, "logits"):
        val, test = logits["val"], logits["test"]
        n_val = int(val["labels"].numel())
        plan = [
            (n_val if s == "all" else int(s), _size_label(s))
            for s in sizes
            if s == "all" or int(s) <= n_val
        ]
        skipped.update({_size_label(s): n_val for s in sizes if s != "all" and int(s) > n_val})
        for (key, (name, params)), (size, label) in itertools.product(specs.items(), plan):
            fitted = posthoc.validation_size_sweep(
                name,
                val["logits"],
                val["labels"],
                test["logits"],
                test["labels"],
                sizes=[size],
                seeds=list(subsample_seeds)[:1] if size == n_val else list(subsample_seeds),
                stratified=stratified,
                **params,
            )
            frame = pd.DataFrame(fitted).rename(columns={"seed": "subsample_seed"})
            frame["value"] *= 100.0
            rows.append(
                frame.assign(
                    **_identity(results, method), seed=seed, calibrator=key, size_label=label
                )
            )
    if not rows:
        raise ValueError(
            f"every size in {list(sizes)} is larger than the validation split; largest usable: "
            f"{max(skipped.values())}"
        )
    return pd.concat(rows, ignore_index=True)[RUN_COLUMNS], skipped


def validation_size_table(
    runs: pd.DataFrame, sizes: Sequence[int | str]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Mean ± std over training seeds × subsample seeds per method, calibrator and size.

    Args:
        runs: :func:`validation_size_runs`.
        sizes: the requested sizes (column order; sizes without fits are left out).

    Returns:
        ``(table, stats)``: rows method × calibrator with a column per size (test ECE in %,
        then their numbers: :func:`~.common.with_numbers`), and the numeric mean / std / n
        / cell per (method, calibrator, size).
    """
    stats = seed_stats(runs, ["group", "method", "label", "calibrator", "size_label"])
    stats["cell"] = stat_cells(stats, unit="%")
    order = [label for label in map(_size_label, sizes) if label in set(stats["size_label"])]
    table = stats.pivot(
        index=["group", "method", "label", "calibrator"], columns="size_label", values="cell"
    )
    table = table.reindex(columns=order).reset_index()
    table["calibrator"] = pd.Categorical(
        table["calibrator"], categories=list(dict.fromkeys(runs["calibrator"])), ordered=True
    )
    table["method"] = pd.Categorical(
        table["method"], categories=list(dict.fromkeys(stats["method"])), ordered=True
    )
    table = table.sort_values(["method", "calibrator"]).astype({"method": str, "calibrator": str})
    table = table[["group", "method", "label", "calibrator", *order]].reset_index(drop=True)
    return with_numbers(table, count="n_fits"), stats


def size_figure(
    stats: pd.DataFrame,
    order: list[str],
    styles: dict[str, MethodStyle],
    labels: dict[str, str],
    title: str,
) -> plt.Figure:
    """One panel per calibrator: ECE vs validation size, a line (± std bar) per method.

    Args:
        stats: the statistics of :func:`validation_size_table`.
        order: the size labels along x.
        styles: method -> style (:func:`~calib_pipeline.reports.common.method_styles`).
        labels: method -> display label.
        title: the figure title.
    """
    keys = list(dict.fromkeys(stats["calibrator"]))
    fig, axes = plt.subplots(
        1, len(keys), figsize=(4.2 * len(keys) + 2.0, 3.6), squeeze=False, sharey=True
    )
    position = {label: i for i, label in enumerate(order)}
    for ax, key in zip(axes[0], keys):
        for method in dict.fromkeys(stats["method"]):
            cell = stats[(stats["calibrator"] == key) & (stats["method"] == method)]
            ax.errorbar(
                cell["size_label"].map(position),
                cell["mean"],
                yerr=cell["std"].fillna(0.0),
                markersize=3,
                capsize=2,
                linewidth=1,
                **styles[method].line(),
                label=labels.get(method, method),
            )
        ax.set_xticks(range(len(order)), order)
        ax.set_title(f"after {key}", fontsize=9)
        ax.set_xlabel("validation samples used for fitting", fontsize=8)
    axes[0, 0].set_ylabel("test ECE (%)", fontsize=8)
    return _with_method_legend(fig, axes[0, -1], title)


@report(
    "validation_size_sweep",
    needs=("logits",),
    options={
        "sizes": list_of(either(POSITIVE, choice("all"))),
        "subsample_seeds": list_of(integer(low=0)),
        "calibrators": optional(CALIBRATOR_SPECS),
        "stratified": BOOLEAN,
    },
)
def validation_size_sweep(
    results: StudyResults,
    sizes: Sequence[int | str] = (20, 50, 100, "all"),
    subsample_seeds: Sequence[int] = (0, 1, 2),
    calibrators: dict[str, dict[str, Any]] | None = None,
    stratified: bool = True,
) -> dict[str, Any]:
    """Wang et al. Fig. 3: test ECE (%) after calibrators fitted on val subsamples of each size.

    For every run, calibrator and size, ``posthoc.validation_size_sweep`` fits the
    calibrator on a class-stratified subsample of the validation logits (one per
    subsample seed) and scores the 15-bin ECE of its test output. ``"all"`` is the whole
    validation split, fitted once (every subsample would be the same set). Sizes larger
    than a run's validation split are skipped and listed.

    Args:
        results: the study; needs logits of every run.
        sizes: subsample sizes, positive integers or ``"all"``.
        subsample_seeds: seeds of the subsample draws.
        calibrators: key -> ``{"name": registry name, "params": {...}}`` (default: Wang's
            grid TS and 15-bin histogram binning, keys ``ts_grid_wang``, ``hist_binning``).
        stratified: stratify subsamples by class (else a uniform draw).

    Returns:
        ``validation_size`` (formatted: rows method × calibrator, columns sizes, mean ± std
        over training seeds × subsample seeds), ``validation_size_stats`` (numeric),
        ``validation_size_runs`` (every fit), the figure ``validation_size_sweep`` and
        its Markdown.
    """
    specs = WANG_CALIBRATORS if calibrators is None else calibrators
    runs, skipped = validation_size_runs(results, sizes, subsample_seeds, specs, stratified)
    table, stats = validation_size_table(runs, sizes)
    styles = method_styles(results.methods)
    title = f"{results.study}: ECE vs validation size (mean ± std over seeds and subsamples)"
    figure = size_figure(stats, list(paper_view(table).columns[4:]), styles, results.labels, title)
    markdown = _validation_size_markdown(results, table, runs, skipped, stratified, subsample_seeds)
    return {
        "validation_size": table,
        "validation_size_stats": stats.drop(columns="cell"),
        "validation_size_runs": runs,
        "validation_size_sweep": figure,
        "validation_size_sweep_md": markdown,
    }


def _validation_size_markdown(
    results: StudyResults,
    table: pd.DataFrame,
    runs: pd.DataFrame,
    skipped: dict[str, int],
    stratified: bool,
    subsample_seeds: Sequence[int],
) -> str:
    """The Markdown of :func:`validation_size_sweep`: what was fitted, skipped sizes, fits
    that warned, then the table."""
    warned = int((runs["warnings"] != "").sum() + (~runs["converged"]).sum())
    note = "".join(
        f"- size {label} skipped: larger than the validation split ({n} rows)\n"
        for label, n in skipped.items()
    ) + (
        f"- {warned} of {len(runs)} fits warned or did not converge (see `validation_size_runs`)\n"
        if warned
        else ""
    )
    return (
        f"# Validation-size sweep: {results.study} on {results.dataset_label}\n\n"
        "Test ECE (%, 15 equal-width bins) after each calibrator fitted on a "
        f"{'class-stratified' if stratified else 'uniform'} random subsample of the validation "
        f"split (Wang et al. Fig. 3); mean ± std over {len(results.seeds)} training seed(s) × "
        f"{len(subsample_seeds)} subsample seed(s) (`all`: the whole split, one fit per training "
        "seed).\n\n"
        + (note + "\n" if note else "")
        + paper_view(table).to_markdown(index=False)
        + "\n"
    )


# --- optimal_ece_per_epoch (Wang Fig. 4) -------------------------------------------------


def _epoch_test_logits(logits: dict[str, Any]) -> list[torch.Tensor]:
    return list((logits.get("epoch_logits") or {}).get("test") or [])


def optimal_ece_runs(
    results: StudyResults,
    grid: str | Sequence[float] = "wang",
    n_bins: int = 15,
    epoch_stride: int = 1,
) -> tuple[pd.DataFrame, dict[str, list[int]]]:
    """Per run and evaluated epoch: oracle-TS ECE, raw ECE (%) and the oracle T.

    Args:
        results: the study; needs logits of every run.
        grid: oracle T grid: a ``TEMPERATURE_GRIDS`` preset or ``[start, stop, step]``.
        n_bins: ECE bins.
        epoch_stride: evaluate epochs 1, 1 + stride, ... and always the last one.

    Returns:
        ``(runs, recorded)``: group, method, label, seed, epoch, oracle_ece, raw_ece,
        oracle_temperature, at_grid_bound per (run, epoch) (empty without per-epoch
        logits); and method -> the seeds that recorded per-epoch logits.
    """
    check_int("n_bins", n_bins, low=1)
    check_int("epoch_stride", epoch_stride, low=1)
    rows: list[dict[str, Any]] = []
    recorded: dict[str, list[int]] = {}
    for method, seed, logits in _runs(results, "logits"):
        per_epoch = _epoch_test_logits(logits)
        if not per_epoch:
            continue
        recorded.setdefault(method, []).append(seed)
        labels = logits["test"]["labels"]
        for epoch in sorted({*range(1, len(per_epoch) + 1, epoch_stride), len(per_epoch)}):
            found = posthoc.oracle_temperature(
                per_epoch[epoch - 1], labels, grid=grid, n_bins=n_bins
            )
            rows.append(
                {
                    **_identity(results, method),
                    "seed": seed,
                    "epoch": epoch,
                    "oracle_ece": 100.0 * found["oracle_ece"],
                    "raw_ece": 100.0 * found["uncalibrated_ece"],
                    "oracle_temperature": found["oracle_temperature"],
                    "at_grid_bound": found["at_grid_bound"],
                }
            )
    return pd.DataFrame(rows), recorded


def optimal_ece_summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per method and epoch: mean / min / max over seeds of the oracle and raw ECE, the
    mean oracle T and the seed count (of :func:`optimal_ece_runs`)."""
    return (
        runs.groupby(["group", "method", "label", "epoch"], sort=False)
        .agg(
            oracle_ece_mean=("oracle_ece", "mean"),
            oracle_ece_min=("oracle_ece", "min"),
            oracle_ece_max=("oracle_ece", "max"),
            raw_ece_mean=("raw_ece", "mean"),
            raw_ece_min=("raw_ece", "min"),
            raw_ece_max=("raw_ece", "max"),
            oracle_temperature_mean=("oracle_temperature", "mean"),
            n=("seed", "count"),
        )
        .reset_index()
    )


def epoch_figure(
    summary: pd.DataFrame, styles: dict[str, MethodStyle], labels: dict[str, str], title: str
) -> plt.Figure:
    """Oracle ECE, raw ECE and oracle T against epoch; mean line and min–max band per method.

    Args:
        summary: :func:`optimal_ece_summary`.
        styles: method -> style (:func:`~calib_pipeline.reports.common.method_styles`).
        labels: method -> display label.
        title: the figure title.
    """
    panels = [
        ("oracle_ece", "ORACLE ECE (%), T searched on test"),
        ("raw_ece", "raw ECE (%)"),
        ("oracle_temperature", "ORACLE T"),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(13.0, 3.6), squeeze=False)
    for method in dict.fromkeys(summary["method"]):
        cell = summary[summary["method"] == method]
        for ax, (quantity, _) in zip(axes[0], panels):
            ax.plot(
                cell["epoch"],
                cell[f"{quantity}_mean"],
                linewidth=1.2,
                markersize=3,
                **styles[method].line(),
                label=labels.get(method, method),
            )
            if f"{quantity}_min" in cell:
                ax.fill_between(
                    cell["epoch"],
                    cell[f"{quantity}_min"],
                    cell[f"{quantity}_max"],
                    color=styles[method].color,
                    alpha=0.2,
                    linewidth=0,
                )
    for ax, (_, panel_title) in zip(axes[0], panels):
        ax.set_title(panel_title, fontsize=9)
        ax.set_xlabel("epoch", fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return _with_method_legend(fig, axes[0, -1], title)


@report(
    "optimal_ece_per_epoch",
    needs=("logits",),
    options={"grid": TEMPERATURE_GRID, "n_bins": POSITIVE, "epoch_stride": POSITIVE},
)
def optimal_ece_per_epoch(
    results: StudyResults,
    grid: str | Sequence[float] = "wang",
    n_bins: int = 15,
    epoch_stride: int = 1,
) -> dict[str, Any]:
    """Wang et al. Fig. 4: per training epoch, the ORACLE-TS ECE and the raw test ECE (%).

    For every run that recorded per-epoch test logits (``record_epoch_logits: true``),
    each evaluated epoch's ``posthoc.oracle_temperature`` searches T on that epoch's test
    logits -- an oracle lower bound, never a calibration result. Methods without per-epoch
    logits are listed as skipped. Mean over seeds with the min–max band, as in the paper.

    Args:
        results: the study; needs logits of every run.
        grid: oracle T grid: a ``TEMPERATURE_GRIDS`` preset or ``[start, stop, step]``.
        n_bins: ECE bins.
        epoch_stride: evaluate epochs 1, 1 + stride, ... and always the last one (the
            Wang grid costs about 1000 ECE evaluations per epoch).

    Returns:
        ``optimal_ece`` (per method × epoch: mean/min/max of oracle and raw ECE, mean
        oracle T), ``optimal_ece_runs`` (per seed), the figure ``optimal_ece_per_epoch``
        and its Markdown ``optimal_ece_per_epoch_md``; only the Markdown when no method
        recorded per-epoch logits.
    """
    runs, recorded = optimal_ece_runs(results, grid, n_bins, epoch_stride)
    lines = _optimal_ece_header(results, recorded, grid, n_bins)
    if runs.empty:
        return {
            "optimal_ece_per_epoch_md": "\n".join(
                [*lines, "", "No method recorded per-epoch test logits."]
            )
            + "\n"
        }
    summary = optimal_ece_summary(runs)
    at_bound = int(runs["at_grid_bound"].sum())
    if at_bound:
        lines.append(
            f"- {at_bound} (run, epoch) oracle temperature(s) at a grid bound: "
            "the bound may be loose there"
        )
    lines += ["", summary.round(3).to_markdown(index=False)]
    title = f"{results.study}: optimal (oracle) ECE per epoch, {MEAN_OVER_SEEDS} (band: min–max)"
    return {
        "optimal_ece": summary,
        "optimal_ece_runs": runs,
        "optimal_ece_per_epoch": epoch_figure(
            summary, method_styles(results.methods), results.labels, title
        ),
        "optimal_ece_per_epoch_md": "\n".join(lines) + "\n",
    }


def _optimal_ece_header(
    results: StudyResults, recorded: dict[str, Any], grid: Any, n_bins: int
) -> list[str]:
    """The Markdown lines of :func:`optimal_ece_per_epoch` before its notes on grid bounds:
    title, what is plotted, methods skipped and methods recorded for some seeds only."""
    lines = [
        f"# Optimal ECE per epoch: {results.study} on {results.dataset_label}",
        "",
        (
            f"{ORACLE_NOTE} Per epoch, test ECE (%, {n_bins} bins) with T searched on that "
            f"epoch's test logits (grid {grid}), and the raw ECE (Wang et al. Fig. 4); line: "
            "mean over seeds, band: min–max."
        ),
        "",
    ]
    lines += [
        f"- skipped `{m}`: no per-epoch test logits (the method needs `record_epoch_logits: "
        "true`, and the run `training.track_test: true`, which records the test split)"
        for m in _ordered_methods(results)
        if m not in recorded
    ]
    lines += [
        f"- `{m}`: per-epoch logits only for seed(s) {s}"
        for m, s in recorded.items()
        if len(s) < len(results.seeds)
    ]
    return lines


# --- max_logit_histograms (Wang Fig. 5) --------------------------------------------------


def epoch_edges(epoch_bins: int | Sequence[int], last_epoch: int) -> np.ndarray:
    """Integer edges ``e_0 < … < e_B``; bin ``b`` holds learned epochs in ``[e_b, e_{b+1})``.

    Args:
        epoch_bins: a number of equal-width bins over ``1 … last_epoch``, or the edges.
        last_epoch: the latest learned epoch.
    """
    if isinstance(epoch_bins, (int, np.integer)) and not isinstance(epoch_bins, bool):
        count = check_int("epoch_bins", int(epoch_bins), low=1)
        return np.unique(np.round(np.linspace(1, last_epoch + 1, count + 1)).astype(int))
    edges = np.asarray(epoch_bins)
    if (
        edges.ndim != 1
        or edges.size < 2
        or edges.dtype.kind not in "iu"
        or edges[0] != 1
        or np.any(np.diff(edges) <= 0)
    ):
        raise ValueError(
            "epoch_bins must be a positive integer or increasing integer edges starting at 1, got "
            f"{epoch_bins!r}"
        )
    if edges[-1] <= last_epoch:
        raise ValueError(
            f"epoch_bins edges {edges.tolist()} must end above the last learned epoch {last_epoch}"
        )
    return edges


def _epoch_bin_labels(edges: np.ndarray) -> list[str]:
    return [f"{lo}" if hi - lo == 1 else f"{lo}–{hi - 1}" for lo, hi in itertools.pairwise(edges)]


def _spearman(learned: np.ndarray, max_logit: np.ndarray) -> float:
    """Spearman correlation of learned epoch and max logit among learned samples (NaN for
    fewer than 3, or for constant input)."""
    is_learned = learned > 0
    if is_learned.sum() <= 2:
        return np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # constant input: rho is NaN, reported as such
        return float(spearmanr(learned[is_learned], max_logit[is_learned]).statistic)


def learned_epoch_samples(results: StudyResults) -> tuple[dict[str, pd.DataFrame], pd.DataFrame]:
    """Maximum training logit and learned epoch of every training sample, seeds pooled.

    Args:
        results: the study; needs logits (train logits and ``learned_epoch``) of every run.

    Returns:
        ``(samples, per_run)``: method -> columns max_logit, learned_epoch; and per run
        (group, method, label, seed) the Spearman correlation and the max-logit std.
    """
    pooled: dict[str, list[pd.DataFrame]] = {}
    per_run = []
    for method, seed, logits in _runs(results, "logits"):
        max_logit = logits["train"]["logits"].max(dim=1).values.double().numpy()
        learned = torch.as_tensor(logits["learned_epoch"]).numpy()
        if learned.shape != max_logit.shape:
            raise ValueError(
                f"{method} seed {seed}: learned_epoch has {learned.shape[0]} entries but the train "
                f"split has {max_logit.shape[0]} rows"
            )
        if (learned < 0).all():  # engine.NOT_TRACKED: the steps never scored the train batch
            warnings.warn(
                f"{method} seed {seed}: left out of the learned-epoch analysis -- its training "
                "steps score no clean train batch (a meta-learner, or mixup's mixed inputs), so "
                "its learned epochs are unknown",
                stacklevel=2,
            )
            continue
        pooled.setdefault(method, []).append(
            pd.DataFrame({"max_logit": max_logit, "learned_epoch": learned})
        )
        per_run.append(
            {
                **_identity(results, method),
                "seed": seed,
                "spearman": float(_spearman(learned, max_logit)),
                "max_logit_std": float(max_logit.std(ddof=1)),
            }
        )
    if not pooled:
        raise ValueError(
            f"no run of study {results.study!r} tracked learned epochs (meta-learners and mixup "
            "do not): the learned-epoch analysis needs a plain objective"
        )
    return {m: pd.concat(frames, ignore_index=True) for m, frames in pooled.items()}, pd.DataFrame(
        per_run
    )


def bin_learned_epochs(
    samples: dict[str, pd.DataFrame], epoch_bins: int | Sequence[int]
) -> list[str]:
    """Adds each sample's learned-epoch bin (0: never learned) to ``samples``; returns the
    bin names."""
    last_epoch = int(max(int(f["learned_epoch"].max()) for f in samples.values()))
    edges = epoch_edges(epoch_bins, max(last_epoch, 1))
    for frame in samples.values():
        frame["bin"] = np.where(
            frame["learned_epoch"] == 0,
            0,
            np.searchsorted(edges, frame["learned_epoch"], side="right"),
        )
    return ["never learned", *_epoch_bin_labels(edges)]


def max_logit_table(
    results: StudyResults, samples: dict[str, pd.DataFrame], names: list[str]
) -> pd.DataFrame:
    """Count, fraction, mean, std and median of the max logit per method × learned-epoch bin."""
    frames = []
    for method, frame in samples.items():
        summary = (
            frame.groupby("bin")["max_logit"].agg(["count", "mean", "std", "median"]).reset_index()
        )
        summary["fraction"] = summary["count"] / len(frame)
        summary.insert(0, "learned_epochs", [names[b] for b in summary["bin"]])
        frames.append(summary.drop(columns="bin").assign(**_identity(results, method)))
    table = pd.concat(frames, ignore_index=True)
    return table[
        ["group", "method", "label", "learned_epochs", "count", "fraction", "mean", "std", "median"]
    ]


def hardness_correlation(per_run: pd.DataFrame) -> pd.DataFrame:
    """Per method, ``mean ± std`` over seeds of the Spearman correlation and of the
    max-logit std (of :func:`learned_epoch_samples`)."""
    long = per_run.melt(id_vars=["group", "method", "label", "seed"], var_name="statistic")
    stats = seed_stats(long, ["group", "method", "label", "statistic"])
    stats["cell"] = stat_cells(stats, digits=3, unit="")
    wide = stats.pivot(index="method", columns="statistic", values="cell").reset_index()
    wide.columns.name = None
    correlation = per_run[["group", "method", "label"]].drop_duplicates().merge(wide, on="method")
    return with_numbers(
        correlation.rename(
            columns={
                "spearman": "Spearman(learned epoch, max logit)",
                "max_logit_std": "std of max logit",
            }
        )
    )


def histogram_figure(
    samples: dict[str, pd.DataFrame],
    names: list[str],
    logit_bins: int,
    labels: dict[str, str],
    title: str,
) -> plt.Figure:
    """A stacked max-logit histogram per method, coloured by learned-epoch bin."""
    methods = list(samples)
    cols = min(4, len(methods))
    rows = -(-len(methods) // cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(3.4 * cols, 2.6 * rows), squeeze=False, sharex=True
    )
    values = np.concatenate([f["max_logit"].to_numpy() for f in samples.values()])
    bins = np.linspace(values.min(), values.max() + 1e-9, logit_bins + 1)
    colors = ["0.6", *plt.get_cmap("viridis")(np.linspace(0.0, 0.9, len(names) - 1))]
    for ax, method in zip(axes.flat, methods):
        frame = samples[method]
        groups = [frame.loc[frame["bin"] == b, "max_logit"].to_numpy() for b in range(len(names))]
        ax.hist(groups, bins=bins, stacked=True, color=colors, label=names)
        ax.set_title(labels.get(method, method), fontsize=9)
    for ax in axes.flat[len(methods) :]:
        ax.set_visible(False)
    for ax in axes[-1]:
        ax.set_xlabel("max logit (train)", fontsize=8)
    handles, legend_labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(
        handles,
        legend_labels,
        title="learned epoch",
        fontsize=7,
        title_fontsize=7,
        loc="upper right",
    )
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0, 0.88, 0.95))
    return fig


@report(
    "max_logit_histograms",
    needs=("logits",),
    options={"epoch_bins": either(POSITIVE, list_of(POSITIVE)), "logit_bins": POSITIVE},
)
def max_logit_histograms(
    results: StudyResults,
    epoch_bins: int | Sequence[int] = 5,
    logit_bins: int = 50,
) -> dict[str, Any]:
    """Wang et al. Fig. 5: histograms of the maximum training logit ``max_k z_k`` by learned epoch.

    A training sample's learned epoch is the epoch since which it stayed correctly
    classified until the end of training (0: never learned); samples are coloured by
    learned-epoch bin, seeds are pooled, and every panel shares the logit bins.

    Args:
        results: the study; needs logits (train logits and ``learned_epoch``) of every run.
        epoch_bins: number of equal-width learned-epoch bins over ``1…E`` (E: the latest
            learned epoch of the study), or explicit integer edges.
        logit_bins: histogram bins of the maximum logit.

    Returns:
        ``max_logit_by_learned_epoch`` (count, fraction, mean, std, median per method ×
        learned-epoch bin), ``hardness_correlation`` (per method, mean ± std over seeds of
        the Spearman correlation between learned epoch and max logit among learned
        samples, and of the max-logit std), the figure ``max_logit_histograms`` and its
        Markdown.
    """
    samples, per_run = learned_epoch_samples(results)
    names = bin_learned_epochs(samples, epoch_bins)
    by_bin = max_logit_table(results, samples, names)
    correlation = hardness_correlation(per_run)
    title = f"{results.study}: maximum training logit by learned epoch"
    figure = histogram_figure(samples, names, logit_bins, results.labels, title)
    markdown = (
        f"# Maximum training logit by learned epoch: {results.study} on {results.dataset_label}\n\n"
        "Wang et al. Fig. 5. Learned epoch: the epoch since which a training sample stayed "
        "correctly classified (0: never learned); seeds pooled. A wide, epoch-ordered spread "
        "(strongly negative Spearman correlation: later-learned, harder samples get smaller "
        "maximum logits) is the hardness information that post-hoc calibration can use.\n\n"
        + paper_view(correlation).to_markdown(index=False)
        + "\n\n"
        + by_bin.round(3).to_markdown(index=False)
        + "\n"
    )
    return {
        "max_logit_by_learned_epoch": by_bin,
        "hardness_correlation": correlation,
        "max_logit_histograms": figure,
        "max_logit_histograms_md": markdown,
    }
