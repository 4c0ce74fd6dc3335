"""Singh et al. (2021), *On the dark side of calibration for modern neural networks*.

- ``singh_table`` (Tables 1-3): Brier, ECE, refinement AUROC and the ECE decomposition
  α − β − γ before and after (fixed-T) temperature scaling, with t-tests against the
  uncalibrated baseline (:func:`table`, one per test set).
- ``singh_density`` (Fig. 1(d-e), 2): densities of the top-label confidence of correct and
  incorrect predictions (:func:`confidence_histograms`, drawn by :func:`density_figure`).
"""

from __future__ import annotations

import math
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from calib_pipeline.calibration.posthoc import calibrated_scores
from calib_pipeline.calibration.stats import T_TESTS, significance_direction, t_test
from calib_pipeline.registry import check_choice, check_int
from calib_pipeline.reports.common import (
    MEAN_OVER_SEEDS,
    POOLED_OVER_SEEDS,
    SPREADS,
    UNCALIBRATED,
    UNSHIFTED,
    calibrator_key,
    clean_rows,
    legend_outside,
    method_labels,
    method_order,
    metric_name,
    paper_header,
    paper_view,
    require_metrics,
    run_cells,
    units_note,
    with_numbers,
    with_selection,
)
from calib_pipeline.reports.registry import (
    SIGNIFICANCE,
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

SINGH_METRICS = ["brier", "ece", "auroc", "decomp_alpha", "decomp_beta", "decomp_gamma"]
LOWER_IS_BETTER = {"brier": True, "ece": True, "auroc": False}
DECOMPOSITION = ("decomp_alpha", "decomp_beta", "decomp_gamma")
CALIBRATED_ROWS = ("all", "baseline")
SPLITS = ("test", "val")
COMPARISON_COLUMNS = ["method", "metric", "mean_difference", "p_value", "worse"]
OUTCOME_COLOURS = {"correct": "#4C72B0", "incorrect": "#C44E52"}


# --- Tables 1-3 --------------------------------------------------------------------------


def with_decomposed_ece(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` plus ``decomp_ece = alpha - beta - gamma`` per run (Singh et al. eq. 9)
    where all three terms are present."""
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


def test_sets(tidy: pd.DataFrame, shifts: list[str] | None = None) -> list[tuple[str, int]]:
    """(shift, severity) of every test set of ``shifts`` (default the clean one) in the
    tidy table; ``ValueError`` naming the shifts it has for an unknown one."""
    available = tidy.loc[tidy["split"] == "test", ["shift", "severity"]].drop_duplicates()
    wanted = list(shifts or [UNSHIFTED])
    unknown = [s for s in wanted if s not in set(available["shift"])]
    if unknown:
        raise ValueError(
            f"unknown shift(s) {unknown}; the metrics table has: {sorted(set(available['shift']))}"
        )
    return list(available[available["shift"].isin(wanted)].itertuples(index=False, name=None))


def _compare(
    per_seed: pd.Series, row: tuple[str, str], base: str, metric: str, test: str, alpha: float
) -> dict[str, Any]:
    """The t-test of one (method, calibrator) row against the uncalibrated baseline on
    ``metric``: metric, mean_difference, p_value and ``worse`` (significantly worse).

    NaN seeds are left out, as in the table's means (AUROC is NaN for a run that makes no
    test error); fewer than two seeds on a side leave the row untested.
    """
    # one seed makes .loc return a scalar
    a = np.atleast_1d(per_seed.loc[(*row, metric)]).astype(float)
    b = np.atleast_1d(per_seed.loc[(base, UNCALIBRATED, metric)]).astype(float)
    a, b = a[~np.isnan(a)], b[~np.isnan(b)]
    result = t_test(a, b, test=test) if min(len(a), len(b)) >= 2 else None
    worse = result is not None and significance_direction(result, alpha) == (
        1 if LOWER_IS_BETTER[metric] else -1
    )
    return {
        "metric": metric,
        "mean_difference": result.mean_difference if result else math.nan,
        "p_value": result.p_value if result else math.nan,
        "worse": worse,
    }


def table(
    tidy: pd.DataFrame,
    calibrator: str | None = None,
    *,
    shift: str = UNSHIFTED,
    severity: int = 0,
    methods: list[str] | None = None,
    baseline: str | None = None,
    calibrated: str = "all",
    metrics: list[str] | None = None,
    test: str = "welch",
    alpha: float = 0.05,
    spread: str = "std",
    digits: int = 2,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One Singh et al. table (one test set) and its baseline tests; every metric in its
    unit (:func:`~.common.metric_unit`: all ×100 but NLL, as in the paper).

    Args:
        tidy: the tidy metrics table.
        calibrator: calibrator key of the TS rows (default: the first other than ``none``).
        shift, severity: the test set (default the clean test split).
        methods: the row order (default first seen in ``tidy``); the baseline comes first.
        baseline: the baseline method (default the first method).
        calibrated: ``"all"`` (a ``<method> + <calibrator>`` row after every method) or
            ``"baseline"`` (only the baseline's).
        metrics: metric keys (default Brier, ECE, AUROC, α, β, γ; ``α − β − γ`` is added
            when all three decomposition terms are present).
        test, alpha: a two-sample t-test of every row against the uncalibrated baseline
            at ``alpha`` (Brier / ECE higher or AUROC lower is worse; needs 2 seeds).
        spread, digits: ``"std"`` or ``"sem"``; decimals.

    Returns:
        ``(table, comparisons)``: columns Method and one per metric (formatted), then
        their numbers (:func:`~.common.with_numbers`); and the tests (method label,
        metric, mean_difference, p_value, worse).
    """
    _check_table_options(calibrated, test, spread, alpha)
    key = calibrator_key(tidy, calibrator)
    metrics = list(metrics or SINGH_METRICS)
    require_metrics(tidy, metrics)
    order = method_order(methods or list(dict.fromkeys(tidy["method"])), present=tidy["method"])
    base = baseline or order[0]
    if base not in order:
        raise ValueError(f"baseline {base!r} is not a method of the study: {order}")
    names, cell, per_seed = _test_set_values(tidy, metrics, shift, severity, spread, digits)
    labels = method_labels(tidy)
    plain, tests = [], []
    for method, cal in _table_rows(base, order, key, calibrated):
        label = labels[method] if cal == UNCALIBRATED else f"{labels[method]} + {cal}"
        plain.append({"Method": label, **{metric_name(m): cell[method, cal, m] for m in names}})
        if (method, cal) != (base, UNCALIBRATED):
            compared = [m for m in names if m in LOWER_IS_BETTER]
            tests += [
                {"method": label, **_compare(per_seed, (method, cal), base, m, test, alpha)}
                for m in compared
            ]
    return with_numbers(pd.DataFrame(plain)), pd.DataFrame(tests, columns=COMPARISON_COLUMNS)


def _test_set_values(
    tidy: pd.DataFrame, metrics: list[str], shift: str, severity: int, spread: str, digits: int
) -> tuple[list[str], pd.Series, pd.Series]:
    """The metrics of the test set that the rows have (``decomp_ece`` added where its terms
    are), their cells over seeds and the per-seed values, by (method, calibrator, metric)."""
    rows = clean_rows(tidy, "test", shift, severity)
    part = with_decomposed_ece(rows[rows["metric"].isin(metrics)])
    names = [m for m in [*metrics, "decomp_ece"] if m in set(part["metric"])]
    per_seed = part.set_index(["method", "calibrator", "metric"])["value"].sort_index()
    return names, run_cells(part, spread, digits), per_seed


def _check_table_options(calibrated: str, test: str, spread: str, alpha: float) -> None:
    """Refuse an unknown row choice, t-test or spread, or a significance level out of (0, 1)."""
    check_choice("calibrated", calibrated, CALIBRATED_ROWS)
    check_choice("test", test, T_TESTS)
    check_choice("spread", spread, SPREADS)
    SIGNIFICANCE.validate("alpha", alpha)


def _table_rows(
    base: str, order: list[str], calibrator: str, calibrated: str
) -> list[tuple[str, str]]:
    """(method, calibrator) of the table's rows: the baseline first, each method
    uncalibrated, then under ``calibrator`` where ``calibrated`` asks for it."""
    return [
        (m, c)
        for m in [base, *(m for m in order if m != base)]
        for c in [UNCALIBRATED, calibrator]
        if c == UNCALIBRATED or calibrated == "all" or m == base
    ]


def bold_worse(plain: pd.DataFrame, comparisons: pd.DataFrame) -> pd.DataFrame:
    """The layout of :func:`table` with the cells significantly worse than the baseline in
    Markdown bold."""
    marked = paper_view(plain).set_index("Method", drop=False)
    for method, metric in comparisons.loc[
        comparisons["worse"].astype(bool), ["method", "metric"]
    ].itertuples(index=False):
        column = metric_name(metric)
        marked.loc[method, column] = f"**{marked.loc[method, column]}**"
    return marked.reset_index(drop=True)


TABLE_OPTIONS = {
    "calibrator": optional(TEXT),
    "calibrated": choice(*CALIBRATED_ROWS),
    "baseline": optional(TEXT),
    "metrics": optional(list_of(TEXT)),
    "shifts": optional(list_of(TEXT)),
    "test": choice(*T_TESTS),
    "alpha": SIGNIFICANCE,
    "spread": choice(*SPREADS),
    "digits": integer(low=0),
    **SELECTION_OPTIONS,
}


def _legend(calibrator: str, baseline: str, test: str, alpha: float, metrics: list[str]) -> str:
    return (
        f"Test split. {units_note(metrics)} `{calibrator}` rows: the calibrator fitted on the "
        f"validation split. Bold: worse than the uncalibrated baseline ({baseline}) by a {test} "
        f"t-test at {alpha} (needs ≥ 2 seeds). α − β − γ is Singh et al.'s eq. 9, their "
        "reading of ECE under bin-wise overconfidence; it puts eq. 8's accuracy, an average "
        "over operating points, in place of the model's, so it need not equal the ECE column.\n"
    )


@report(
    "singh_table",
    options=TABLE_OPTIONS,
    calibrators=calibrators_in("calibrator"),
    study_check=study_needs_calibrator("calibrator"),
)
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
    α − β − γ (eq. 9), before and after (fixed-T) temperature scaling, all ×100 (the Brier
    score ×100, the rest in %; NLL, when asked for, as computed).

    Args:
        calibrator: calibrator key of the TS rows (default: the table's first calibrator
            other than ``none``, i.e. ``ts_fixed`` in the ``dark_side`` study).
        calibrated, baseline, metrics, test, alpha, spread, digits: as for :func:`table`
            (the paper: ``calibrated="baseline"``, the baseline CE, ``spread="std"``); a
            cell is **bold** in the Markdown (the paper's "clearly worse than the
            baseline") when the t-test finds it worse than the uncalibrated baseline.
        shifts: shift names (default ``["none"]``, the clean test split); every other
            shift gives one table per severity (Table 3 for natural shift sets).
        selection, selection_metric: sweep selection (module docstring).

    Returns:
        ``table`` (clean test) and ``table_<shift>_s<severity>`` per requested shift,
        ``comparisons`` (every test against the baseline), ``singh_table`` (Markdown)
        and ``selection`` when a rule was applied.
    """
    selected, record = apply_selection(results.metrics, results.groups, selection, selection_metric)
    key = calibrator_key(selected, calibrator)
    options = {
        "methods": results.methods,
        "baseline": baseline,
        "calibrated": calibrated,
        "metrics": metrics,
        "test": test,
        "alpha": alpha,
        "spread": spread,
        "digits": digits,
    }
    shown = metrics or SINGH_METRICS
    sets = test_sets(selected[selected["metric"].isin(shown)], shifts)
    base = baseline or method_order(results.methods, present=selected["method"])[0]
    text = paper_header(results, "Singh et al.: calibration and refinement", spread, record)
    text += _legend(key, method_labels(selected).get(base, base), test, alpha, shown)
    artifacts, sections = _set_tables(selected, key, sets, options)
    artifacts["singh_table"] = text + sections
    return with_selection(artifacts, record)


def _set_tables(
    selected: pd.DataFrame, key: str, sets: list[tuple[str, int]], options: dict[str, Any]
) -> tuple[dict[str, Any], str]:
    """One :func:`table` per test set (``table`` for the clean one, else
    ``table_<shift>_s<severity>``) and all their ``comparisons``; the sets' Markdown."""
    artifacts: dict[str, Any] = {}
    comparisons = []
    text = ""
    for shift, severity in sets:
        plain, tests = table(selected, key, shift=shift, severity=severity, **options)
        comparisons.append(tests.assign(shift=shift, severity=severity))
        artifacts["table" if shift == UNSHIFTED else f"table_{shift}_s{severity}"] = plain
        title = "clean test set" if shift == UNSHIFTED else f"shift `{shift}`, severity {severity}"
        text += f"\n## {title}\n\n" + bold_worse(plain, tests).to_markdown(index=False) + "\n"
    artifacts["comparisons"] = pd.concat(comparisons, ignore_index=True)[
        ["shift", "severity", *COMPARISON_COLUMNS]
    ]
    return artifacts, text


# --- Fig. 1-2 ----------------------------------------------------------------------------


def _confidence_correct(
    scores: torch.Tensor, kind: str, labels: torch.Tensor
) -> tuple[np.ndarray, np.ndarray]:
    """Top-label confidence and correctness of logits or probabilities."""
    probs = torch.softmax(scores.double(), dim=1) if kind == "logits" else scores.double()
    confidence, prediction = probs.max(dim=1)
    return confidence.cpu().numpy(), (prediction.cpu() == labels.cpu()).numpy()


def _pooled_confidences(
    results: StudyResults, method: str, seeds: list[int], calibrator: str, split: str
) -> tuple[np.ndarray, np.ndarray]:
    """Confidence and correctness of ``method``'s ``split`` predictions, seeds pooled,
    after ``calibrator`` (raw for ``none``)."""
    confidence, correct = [], []
    for seed in seeds:
        run = results.logits.get((method, int(seed)))
        if run is None:
            raise ValueError(f"no logits for run ({method!r}, {seed}); the report needs 'logits'")
        scores, kind = run[split]["logits"], "logits"
        if calibrator != UNCALIBRATED:
            fitted = results.calibrators.get((method, int(seed))) or {}
            if calibrator not in fitted:
                raise ValueError(
                    f"run ({method!r}, {seed}) has no calibrator {calibrator!r}; "
                    f"valid calibrator keys: {sorted(fitted)}"
                )
            scores, kind = calibrated_scores(fitted[calibrator], scores)
        c, ok = _confidence_correct(scores, kind, run[split]["labels"])
        confidence.append(c)
        correct.append(ok)
    return np.concatenate(confidence), np.concatenate(correct)


def confidence_histograms(
    results: StudyResults,
    seeds: dict[str, list[int]],
    labels: dict[str, str],
    calibrator: str,
    split: str = "test",
    bins: int = 20,
) -> pd.DataFrame:
    """Histograms of the top-label confidence of correct and incorrect predictions.

    Args:
        results: the study (its logits and fitted calibrators are read).
        seeds: method -> the seeds pooled, methods in the order drawn.
        labels: method -> display label.
        calibrator: the calibrator compared with the raw scores.
        split: ``"test"`` or ``"val"``.
        bins: equal-width bins on [0, 1].

    Returns:
        Columns method, label, calibrator, outcome, lower, upper, count, density; each
        outcome's density integrates to 1.
    """
    check_choice("split", split, SPLITS)
    check_int("bins", bins, low=2)
    edges = np.linspace(0.0, 1.0, bins + 1)
    frames = []
    for method, method_seeds in seeds.items():
        for cal in (UNCALIBRATED, calibrator):
            confidence, correct = _pooled_confidences(results, method, method_seeds, cal, split)
            for outcome, mask in (("correct", correct), ("incorrect", ~correct)):
                counts, _ = np.histogram(confidence[mask], bins=edges)
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
    return pd.concat(frames, ignore_index=True)


def density_figure(histograms: pd.DataFrame, auroc: pd.Series, title: str) -> plt.Figure:
    """A row per method, a column per calibrator (raw first): the two outcome densities.

    Args:
        histograms: :func:`confidence_histograms`.
        auroc: mean AUROC per (method, calibrator), shown in the panel titles.
        title: the figure title.
    """
    methods = list(dict.fromkeys(histograms["method"]))
    calibrators = list(dict.fromkeys(histograms["calibrator"]))
    fig, axes = plt.subplots(
        len(methods),
        2,
        figsize=(8.0, 2.3 * len(methods)),
        squeeze=False,
        sharex=True,
        layout="constrained",
    )
    for i, method in enumerate(methods):
        for j, cal in enumerate(calibrators):
            ax = axes[i, j]
            cell = histograms[(histograms["method"] == method) & (histograms["calibrator"] == cal)]
            for outcome, colour in OUTCOME_COLOURS.items():
                part = cell[cell["outcome"] == outcome]
                edges = np.append(part["lower"].to_numpy(), part["upper"].to_numpy()[-1])
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
            ax.set_title(
                f"{cell['label'].iloc[0]}, {name}: {metric_name('auroc')} {100 * value:.1f}%",
                fontsize=8,
            )
            if i == len(methods) - 1:
                ax.set_xlabel("top-label confidence", fontsize=8)
            if j == 0:
                ax.set_ylabel("density", fontsize=8)
    legend_outside(fig, axes[0, 0])
    fig.suptitle(title, fontsize=10)
    return fig


@report(
    "singh_density",
    needs=("logits", "calibrators"),
    calibrators=calibrators_in("calibrator"),
    study_check=study_needs_calibrator("calibrator"),
    options={
        "calibrator": optional(TEXT),
        "bins": integer(low=2),
        "split": choice(*SPLITS),
        **SELECTION_OPTIONS,
    },
)
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
    selected, record = apply_selection(results.metrics, results.groups, selection, selection_metric)
    key = calibrator_key(selected, calibrator)
    runs = selected[["method", "seed"]].drop_duplicates()
    seeds = {
        m: runs.loc[runs["method"] == m, "seed"].tolist()
        for m in method_order(results.methods, runs["method"])
    }
    histograms = confidence_histograms(results, seeds, method_labels(selected), key, split, bins)
    auroc = clean_rows(selected, split)
    auroc = auroc[auroc["metric"] == "auroc"].groupby(["method", "calibrator"])["value"].mean()
    title = (
        f"{results.study}: confidence of correct vs incorrect {split} predictions\n"
        f"densities: {POOLED_OVER_SEEDS}; {metric_name('auroc')}: {MEAN_OVER_SEEDS}"
    )
    return with_selection(
        {"histograms": histograms, "confidence_density": density_figure(histograms, auroc, title)},
        record,
    )
