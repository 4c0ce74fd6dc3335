"""Does it reproduce the paper? Every claim of a study's papers, measured and judged.

The ``claims`` report reads a study's claims (:mod:`.claim_specs`: the papers' YAML files
plus the study's own), measures each claim's effect per seed, and judges it:

- the **effect** of a seed is ``A - B`` (two methods, or one method under two settings,
  paired by seed: seeds missing on either side are dropped), ``A - threshold``, or, for
  a trend, the least-squares slope of A (or of ``A - B``) over the ordered levels --
  the members of a sweep (per step) or the corruption severities (per severity unit);
- its **mean** over seeds, a Student-t **confidence interval** and a one-sample t-test
  (:func:`calibration.stats.t_test` on the paired differences): two-sided at ``alpha`` by
  default, or one-sided in the claimed direction (then the interval is the ``1 - 2
  alpha`` one, so that it excludes 0 exactly when the test is significant);
- a **verdict**: ``holds`` (significant in the claimed direction), ``contradicted``
  (significant in the opposite one) or ``inconclusive`` -- with the number of seeds a
  test would need for ``power`` (default 80 %) if the observed mean and spread were the
  truth (:func:`calibration.stats.seeds_needed`). ``within`` claims use two one-sided
  tests (TOST) against ``±tolerance``. A claim whose data the run lacks (no shifted sets,
  no learning-rate drop, a NaN metric) is ``not measured``; one restricted to other
  datasets is ``not applicable``.

With one seed there is no spread: the verdict is ``inconclusive`` and the report says so.
An ensemble (:mod:`.ensembles`, seed ``ENSEMBLE_SEED``) is one run: against a method, its
value is held fixed and the method's seeds give the effects (as against a threshold; the
ensemble's own variability is not measured); two ensembles give one effect, never a test.
When every seed has the same effect (zero spread -- common for discrete metrics on small
test sets, e.g. an error one test image apart on every seed), the t statistic is undefined;
its limit as the spread goes to 0 decides (p = 0: significant in the effect's direction),
so that agreeing seeds never get a weaker verdict than slightly disagreeing ones would; the
same zero effect on every seed is inconclusive. Claims are judged one by one, without a
multiple-comparison correction: among many true-null claims, about ``alpha`` of them "hold" by
chance. See ``docs/claims.md``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from calib_pipeline.calibration.stats import (
    holm_adjusted,
    mean_interval,
    seeds_needed,
    summarize,
    t_test,
)
from calib_pipeline.reports.claim_specs import (
    ALL_SEVERITIES,
    CORRUPTED,
    Claim,
    Quantity,
    Side,
    check_study_claims,
    claim_calibrators,
    option_sides,
    paper_names,
    paper_protocol,
    parse_claim,
    study_claims,
)
from calib_pipeline.reports.common import UNCALIBRATED, UNSHIFTED, metric_name
from calib_pipeline.reports.ensembles import ENSEMBLE_SEED
from calib_pipeline.reports.registry import (
    SIGNIFICANCE,
    TEXT,
    Option,
    StudyOutline,
    StudyResults,
    choice,
    list_of,
    mapping,
    number,
    optional,
    report,
)

logger = logging.getLogger(__name__)

HOLDS, CONTRADICTED, INCONCLUSIVE = "holds", "contradicted", "inconclusive"
NOT_MEASURED, NOT_APPLICABLE = "not measured", "not applicable"
VERDICTS = (HOLDS, CONTRADICTED, INCONCLUSIVE, NOT_MEASURED, NOT_APPLICABLE)
COLUMNS = [
    "paper",
    "id",
    "source",
    "claim",
    "effect_is",
    "n_seeds",
    "effect",
    "effect_std",
    "ci_low",
    "ci_high",
    "p_value",
    "p_holm",
    "verdict",
    "seeds_needed",
    "note",
]


class NotMeasured(Exception):
    """The run lacks what a claim reads (the message says what)."""


# --- measuring one quantity --------------------------------------------------------------


def _shift_rows(rows: pd.DataFrame, quantity: Quantity) -> pd.DataFrame:
    if quantity.shift == UNSHIFTED:
        return rows[(rows["shift"] == UNSHIFTED) & (rows["severity"] == 0)]
    if quantity.shift == CORRUPTED:
        return rows[(rows["shift"] != UNSHIFTED) & (rows["severity"] >= 1)]
    return rows[rows["shift"] == quantity.shift]


def metric_values(
    table: pd.DataFrame, method: str, quantity: Quantity, by_severity: bool = False
) -> pd.Series:
    """Per seed (and severity), the quantity's metric -- or weighted sum of metrics -- of
    ``method`` in the tidy ``table``, averaged over the shifted sets it spans.

    Raises:
        NotMeasured: no rows (e.g. no shifted sets in the run) or NaN values only.
    """
    names = [name for name, _ in quantity.metric]
    rows = table[
        (table["method"] == method)
        & (table["split"] == quantity.split)
        & (table["calibrator"] == quantity.calibrator)
        & table["metric"].isin(names)
    ]
    rows = _shift_rows(rows, quantity)
    if quantity.severity != ALL_SEVERITIES and not by_severity:
        rows = rows[rows["severity"] == quantity.severity]
    keys = ["seed", "severity"] if by_severity else ["seed"]
    per_metric = rows.dropna(subset=["value"]).groupby([*keys, "metric"])["value"].mean()
    wide = per_metric.unstack("metric") if not per_metric.empty else pd.DataFrame()
    if wide.empty or any(n not in wide.columns for n in names):
        why = ""
        if quantity.shift != UNSHIFTED:
            shifted = (table["shift"] != UNSHIFTED).any()
            why = (
                " (the run has no such shifted set)"
                if shifted
                else " (the study evaluates no shifted sets)"
            )
        raise NotMeasured(
            f"no {'/'.join(names)} of {method} on split {quantity.split}, calibrator "
            f"{quantity.calibrator}, shift {quantity.shift}{why}"
        )
    wide = wide[names].dropna()
    return sum(wide[name] * weight for name, weight in quantity.metric)


def temperature_values(results: StudyResults, method: str, key: str) -> pd.Series:
    """Per seed, the temperature calibrator ``key`` fitted for ``method``.

    Raises:
        NotMeasured: the calibrators were not loaded, or ``key`` has no temperature.
    """
    values = {}
    for seed in results.seeds:
        fitted = results.calibrators.get((method, int(seed)))
        if fitted is None or key not in fitted:
            raise NotMeasured(f"no fitted calibrator {key!r} for {method} seed {seed}")
        temperature = fitted[key].learned().get("temperature")
        if temperature is None:
            raise NotMeasured(f"calibrator {key!r} has no temperature")
        values[int(seed)] = float(temperature)
    return pd.Series(values, dtype=float)


def first_lr_drop(history: pd.DataFrame) -> int:
    """The first epoch trained at a lowered learning rate.

    The history's ``lr`` holds the rate after the epoch's scheduler step (the rate of the
    next epoch), so this is the epoch after the first row whose ``lr`` fell.

    Raises:
        NotMeasured: no ``lr`` column, or the rate never falls.
    """
    if "lr" not in history.columns:
        raise NotMeasured("the history has no lr column")
    lr = history["lr"].to_numpy()
    fallen = np.flatnonzero(lr < lr[0])
    if not fallen.size or fallen[0] + 1 >= len(history):
        raise NotMeasured("the learning rate never drops during training (no milestones)")
    return int(history["epoch"].iloc[fallen[0] + 1])


def _epoch_value(history: pd.DataFrame, column: str, anchor: int | str) -> float:
    if anchor == "first_lr_drop":
        anchor = first_lr_drop(history)
    if anchor == "first":
        return float(history[column].iloc[0])
    if anchor == "last":
        return float(history[column].iloc[-1])
    at = history.loc[history["epoch"] == anchor, column]
    if at.empty:
        raise NotMeasured(f"the history has no epoch {anchor}")
    return float(at.iloc[0])


def history_values(results: StudyResults, method: str, quantity: Quantity) -> pd.Series:
    """Per seed, a history column at one epoch, or its change ``value(to) - value(from)``.

    Raises:
        NotMeasured: no history, no such column (lists the columns), or a missing epoch.
    """
    values = {}
    for seed in results.seeds:
        history = results.histories.get((method, int(seed)))
        if history is None or history.empty:
            raise NotMeasured(f"no training history for {method} seed {seed}")
        if quantity.history not in history.columns:
            raise NotMeasured(
                f"the history of {method} has no column {quantity.history!r}; it has: "
                + ", ".join(c for c in history.columns if c != "epoch")
            )
        history = history.sort_values("epoch")
        points = [_epoch_value(history, quantity.history, e) for e in quantity.epochs]
        values[int(seed)] = points[-1] - points[0] if len(points) == 2 else points[0]
    return pd.Series(values, dtype=float)


def measure(
    results: StudyResults, method: str, quantity: Quantity, by_severity: bool = False
) -> pd.Series:
    """Per seed (per seed and severity with ``by_severity``), the quantity of ``method``,
    NaN seeds dropped; ``distance_from`` applied."""
    if quantity.kind != "metric" and method in {e["key"] for e in results.ensembles}:
        raise NotMeasured(
            f"{method} is an ensemble: it has metrics only (no training history, no stored "
            "calibrator of its own)"
        )
    if quantity.kind == "temperature":
        values = temperature_values(results, method, quantity.temperature)
    elif quantity.kind == "history":
        values = history_values(results, method, quantity)
    else:
        values = metric_values(results.metrics, method, quantity, by_severity)
    if quantity.distance_from is not None:
        values = (values - quantity.distance_from).abs()
    values = values.dropna()
    if values.empty:
        raise NotMeasured(f"every seed of {method} has a NaN value")
    infinite = values[np.isinf(values)]
    if not infinite.empty:  # e.g. NLL after histogram binning: a zero probability on a label
        raise NotMeasured(
            f"{method} has an infinite value at seed(s) {list(infinite.index)}: no mean or "
            "t-test exists"
        )
    return values


# --- the effect of one claim per seed ----------------------------------------------------


def _slopes(levels: pd.DataFrame, positions: Sequence[float]) -> pd.Series:
    """Per row (seed), the least-squares slope of the row's values over ``positions``."""
    x = np.asarray(positions, dtype=float)
    x = x - x.mean()
    return pd.Series((levels.to_numpy() @ x) / (x @ x), index=levels.index)


def _trend_effects(claim: Claim, results: StudyResults) -> pd.Series:
    if claim.over == "members":
        columns = {m: measure(results, m, claim.a.quantity) for m in claim.a.method}
        levels = pd.DataFrame(columns)
        if claim.b is not None:
            levels = levels.sub(measure(results, claim.b.method, claim.b.quantity), axis=0)
        return _slopes(levels.dropna(), range(len(columns)))
    levels = measure(results, claim.a.method, claim.a.quantity, by_severity=True).unstack()
    if claim.b is not None:
        levels = levels - measure(results, claim.b.method, claim.b.quantity, True).unstack()
    levels = levels.drop(columns=[s for s in levels.columns if s < 1]).dropna()
    if levels.shape[1] < 2:
        raise NotMeasured("a trend over severity needs at least two corruption severities")
    return _slopes(levels, list(levels.columns))


def _fixed_if_one_run(side: pd.Series, other: pd.Series) -> pd.Series:
    """``side`` per seed; when it is one run (an ensemble: its only seed is
    ``ENSEMBLE_SEED``) and ``other`` is not, its value repeated at each of ``other``'s seeds:
    the claim then tests ``other``'s seeds about that fixed value, as against a threshold
    (module docstring)."""
    if list(side.index) == [ENSEMBLE_SEED] and list(other.index) != [ENSEMBLE_SEED]:
        return pd.Series(side.iloc[0], index=other.index)
    return side


def _one_run_note(claim: Claim, results: StudyResults) -> str:
    """What a claim on an ensemble tests: it is one run, never a sample of seeds."""
    ensembles = {record["key"] for record in results.ensembles}
    methods = [
        m
        for side in filter(None, (claim.a, claim.b))
        for m in (side.method if isinstance(side.method, tuple) else (side.method,))
    ]
    named = [results.row_labels.get(m, m) for m in methods if m in ensembles]
    if not named:
        return ""
    if len(named) == len(methods):
        return "ensembles only: one run each, no spread, so no test"
    return (
        f"{', '.join(named)} is one run (an ensemble): its value is held fixed and the other "
        "side's seeds are tested about it; the ensemble's own variability is not measured"
    )


def claim_effects(claim: Claim, results: StudyResults) -> pd.Series:
    """Per seed, the claim's effect (module docstring), seeds without one dropped.

    Raises:
        NotMeasured: the run lacks something the claim reads, or no seed has both sides.
    """
    if claim.over is not None:
        effects = _trend_effects(claim, results)
    else:
        a = measure(results, claim.a.method, claim.a.quantity)
        b = (
            measure(results, claim.b.method, claim.b.quantity)
            if claim.b is not None
            else pd.Series(claim.threshold, index=a.index)
        )
        effects = (_fixed_if_one_run(a, b) - _fixed_if_one_run(b, a)).dropna()
    if effects.empty:
        raise NotMeasured("no seed has a value on both sides")
    return effects.sort_index()


# --- judging -----------------------------------------------------------------------------


def _within(
    effects: np.ndarray, tolerance: float, alpha: float, power: float, stats: dict[str, Any]
) -> dict[str, Any]:
    """Two one-sided tests of ``-tolerance < mean effect < tolerance``."""
    zeros = np.zeros_like(effects)
    inside = max(
        t_test(effects + tolerance, zeros, paired=True, alternative="greater").p_value,
        t_test(effects - tolerance, zeros, paired=True, alternative="less").p_value,
    )
    outside = min(
        t_test(effects - tolerance, zeros, paired=True, alternative="greater").p_value,
        t_test(effects + tolerance, zeros, paired=True, alternative="less").p_value,
    )
    margin = tolerance - abs(stats["effect"])
    out = {**stats, "p_value": inside}
    if inside < alpha:
        return {**out, "verdict": HOLDS}
    if outside < alpha:
        return {**out, "verdict": CONTRADICTED, "note": f"significantly outside ±{tolerance:g}"}
    if margin <= 0:
        return {**out, "verdict": INCONCLUSIVE, "note": f"the mean lies outside ±{tolerance:g}"}
    needed = seeds_needed(
        margin, stats["effect_std"], alpha=alpha, power=power, alternative="greater"
    )
    return {**out, "verdict": INCONCLUSIVE, "seeds_needed": needed}


def _directional(
    effects: np.ndarray, sign: int, test: str, alpha: float, power: float, stats: dict[str, Any]
) -> dict[str, Any]:
    """A t-test of the mean effect, two-sided or one-sided in the claimed direction."""
    zeros = np.zeros_like(effects)
    mean = stats["effect"]
    if test == "one-sided":
        claimed, opposite = ("greater", "less") if sign > 0 else ("less", "greater")
        p_value = t_test(effects, zeros, paired=True, alternative=claimed).p_value
        holds = p_value < alpha
        contradicted = t_test(effects, zeros, paired=True, alternative=opposite).p_value < alpha
    else:
        p_value = t_test(effects, zeros, paired=True).p_value
        holds = p_value < alpha and sign * mean > 0
        contradicted = p_value < alpha and sign * mean < 0
    out = {**stats, "p_value": p_value}
    if holds or contradicted:
        return {**out, "verdict": HOLDS if holds else CONTRADICTED}
    if mean == 0.0:  # the seeds' effects cancel: no direction to size a sample for
        return {**out, "verdict": INCONCLUSIVE, "note": "the mean effect is exactly zero"}
    if sign * mean < 0:
        return {
            **out,
            "verdict": INCONCLUSIVE,
            "note": "the observed effect points against the claim",
        }
    alternative = "two-sided" if test == "two-sided" else ("greater" if sign > 0 else "less")
    needed = seeds_needed(
        mean, stats["effect_std"], alpha=alpha, power=power, alternative=alternative
    )
    return {**out, "verdict": INCONCLUSIVE, "seeds_needed": needed}


_SAME_UP_TO_ROUNDING = 1e-12  # effects this close are equal; a mean this small is no effect


def _identical(
    expect: str, test: str, tolerance: float | None, stats: dict[str, Any]
) -> dict[str, Any]:
    """Every seed gave the same effect: the t-test's limit as the spread goes to 0.

    A non-zero effect is then significant in its direction (p = 0), exactly as the t-test
    judges any spread small enough beside the effect, so the verdict never weakens as the
    seeds agree more; the same zero effect on every seed has no direction (inconclusive).
    """
    mean = stats["effect"]
    note = (
        "every seed gave the same effect (zero spread): the t-test's limit, p = 0; a discrete "
        "quantity (a grid temperature, an error count) can tie by chance -- more seeds confirm"
    )
    if expect == "within":
        if abs(mean) == float(tolerance):
            return {**stats, "verdict": INCONCLUSIVE, "note": "every seed lies on the margin"}
        claimed = abs(mean) < float(tolerance)
    elif abs(mean) <= _SAME_UP_TO_ROUNDING:  # e.g. 1e-13, -2e-13, 4e-13: no direction
        return {**stats, "verdict": INCONCLUSIVE, "note": "every seed shows exactly no effect"}
    else:
        claimed = (mean < 0) == (expect in ("lower", "decreasing"))
    one_sided = test == "one-sided" or expect == "within"
    p_value = 0.0 if claimed or not one_sided else 1.0  # p of the claimed direction
    return {
        **stats,
        "p_value": p_value,
        "verdict": HOLDS if claimed else CONTRADICTED,
        "note": note,
    }


def judge(
    effects: Sequence[float],
    *,
    expect: str,
    test: str = "two-sided",
    alpha: float = 0.05,
    power: float = 0.8,
    tolerance: float | None = None,
) -> dict[str, Any]:
    """The verdict on per-seed ``effects`` (module docstring for the rules).

    Args:
        effects: one effect per seed (>= 1 finite values).
        expect: ``lower`` / ``decreasing`` (a negative effect), ``higher`` / ``increasing``
            (a positive one) or ``within`` (``|effect| < tolerance``).
        test: ``"two-sided"`` or ``"one-sided"`` (ignored by ``within``).
        alpha: significance level.
        power: the power ``seeds_needed`` aims at.
        tolerance: the equivalence margin of ``within``.

    Returns:
        n_seeds, effect (mean), effect_std, ci_low, ci_high, p_value, verdict,
        seeds_needed (``None`` unless inconclusive with a computable number) and note.
    """
    values = np.asarray(effects, dtype=float)
    summary = summarize(values)
    stats: dict[str, Any] = {
        "n_seeds": summary.n,
        "effect": summary.mean,
        "effect_std": summary.std,
        "ci_low": math.nan,
        "ci_high": math.nan,
        "p_value": math.nan,
        "seeds_needed": None,
        "note": "",
    }
    if summary.n < 2:
        note = (
            "one seed: no spread over seeds, so no test -- run >= 2 seeds "
            "(>= 3 to estimate the spread)"
        )
        return {**stats, "verdict": INCONCLUSIVE, "note": note}
    one_sided = tolerance is not None or test == "one-sided"
    stats["ci_low"], stats["ci_high"] = mean_interval(
        values, 1 - 2 * alpha if one_sided else 1 - alpha
    )
    if np.allclose(
        values, values[0], rtol=1e-9, atol=_SAME_UP_TO_ROUNDING
    ):  # the same up to rounding
        return _identical(expect, test, tolerance, stats)
    if expect == "within":
        return _within(values, float(tolerance), alpha, power, stats)
    sign = -1 if expect in ("lower", "decreasing") else 1
    return _directional(values, sign, test, alpha, power, stats)


# --- describing a claim ------------------------------------------------------------------


def _metric_text(terms: tuple[tuple[str, float], ...]) -> str:
    parts = []
    for index, (name, weight) in enumerate(terms):
        label = metric_name(name)
        factor = "" if abs(weight) == 1 else f"{abs(weight):g}·"
        sign = ("−" if weight < 0 else "") if index == 0 else (" − " if weight < 0 else " + ")
        parts.append(f"{sign}{factor}{label}")
    return "".join(parts)


def describe_quantity(quantity: Quantity) -> str:
    """A short reading of a quantity, e.g. ``ECE (test, uncalibrated)``."""
    if quantity.kind == "temperature":
        text = f"fitted T of {quantity.temperature}"
    elif quantity.kind == "history":
        epochs = quantity.epochs
        text = (
            f"{quantity.history} at epoch {epochs[0]}"
            if len(epochs) == 1
            else f"{quantity.history} change (epoch {epochs[0]} → {epochs[1]})"
        )
    else:
        where = [
            quantity.split,
            "uncalibrated"
            if quantity.calibrator == UNCALIBRATED
            else f"after {quantity.calibrator}",
        ]
        if quantity.shift != UNSHIFTED:
            severity = (
                "" if quantity.severity == ALL_SEVERITIES else f" severity {quantity.severity}"
            )
            where.append(f"shift {quantity.shift}{severity}")
        text = f"{_metric_text(quantity.metric)} ({', '.join(where)})"
    return text if quantity.distance_from is None else f"|{text} − {quantity.distance_from:g}|"


def _side_text(side: Side, labels: Mapping[str, str], shared: str | None = None) -> str:
    methods = side.method if isinstance(side.method, tuple) else (side.method,)
    names = " → ".join(labels.get(m, m) for m in methods)
    quantity = describe_quantity(side.quantity)
    return names if quantity == shared else f"{quantity} of {names}"


def describe_claim(claim: Claim, labels: Mapping[str, str]) -> tuple[str, str]:
    """The claim as one sentence, and what its per-seed effect is."""
    qa = describe_quantity(claim.a.quantity)
    a_text = _side_text(claim.a, labels)
    if claim.b is not None:
        b_text = _side_text(claim.b, labels, qa)
    else:
        b_text = "" if claim.threshold is None else f"{claim.threshold:g}"
    if claim.over == "members":
        minus = f" minus that of {b_text}" if claim.b is not None else ""
        return (
            f"{qa}{minus} {claim.expect} along {_side_text(claim.a, labels, qa)}",
            "slope per member step",
        )
    if claim.over == "severity":
        minus = f" minus {b_text}" if claim.b is not None else ""
        return f"{a_text}{minus} {claim.expect} with severity", "slope per severity step"
    difference = "A − B" if claim.b is not None else "A − threshold"
    if claim.expect == "within":
        return f"{a_text} within ±{claim.tolerance:g} of {b_text}", difference
    return f"{a_text} {claim.expect} than {b_text}", difference


# --- the report --------------------------------------------------------------------------


def evaluate_claim(
    claim: Claim, results: StudyResults, alpha: float, power: float
) -> tuple[dict[str, Any], pd.Series]:
    """One row of the claims table and the claim's per-seed effects."""
    statement, effect_is = describe_claim(claim, results.row_labels)
    row = {
        "paper": claim.paper,
        "id": claim.id,
        "source": claim.source,
        "claim": statement,
        "effect_is": effect_is,
    }
    empty = pd.Series(dtype=float)
    blank = {"n_seeds": 0, "seeds_needed": None}
    if claim.datasets and results.dataset not in claim.datasets:
        note = f"the paper states it for {', '.join(claim.datasets)}"
        return {**row, **blank, "verdict": NOT_APPLICABLE, "note": note}, empty
    try:
        effects = claim_effects(claim, results)
    except NotMeasured as reason:
        return {**row, **blank, "verdict": NOT_MEASURED, "note": str(reason)}, empty
    verdict = judge(
        effects.to_numpy(),
        expect=claim.expect,
        test=claim.test,
        alpha=alpha,
        power=power,
        tolerance=claim.tolerance,
    )
    note = "; ".join(filter(None, [_one_run_note(claim, results), verdict.pop("note"), claim.note]))
    return {**row, **verdict, "note": note}, effects


def evaluate_claims(
    claims: Sequence[Claim], results: StudyResults, alpha: float, power: float
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The claims table (``COLUMNS``, one row per claim) and the per-seed effects (paper,
    id, seed, effect) of ``claims`` in ``results``."""
    rows, effects = [], []
    for claim in claims:
        row, per_seed = evaluate_claim(claim, results, alpha, power)
        rows.append(row)
        effects.extend(
            {"paper": claim.paper, "id": claim.id, "seed": s, "effect": e}
            for s, e in per_seed.items()
        )
    table = pd.DataFrame(rows).reindex(columns=COLUMNS)
    # Each verdict answers its own claim at α; across a study's ~20 claims, Holm's adjusted
    # p says which of those that hold survive family-wise error control.
    table["p_holm"] = holm_adjusted(table["p_value"].to_numpy(dtype=float))
    table["seeds_needed"] = table["seeds_needed"].astype("Int64")
    return table, pd.DataFrame(effects, columns=["paper", "id", "seed", "effect"])


def verdict_counts(table: pd.DataFrame) -> dict[str, int]:
    """How many claims of a claims table got each verdict (every verdict present, 0 if none)."""
    counts = table["verdict"].value_counts()
    return {verdict: int(counts.get(verdict, 0)) for verdict in VERDICTS}


def summary_line(study: str, dataset: str, table: pd.DataFrame, what: str = "paper claims") -> str:
    """``focal_meta on digits: 5 of 9 paper claims hold, 1 contradicted, 3 inconclusive``
    (plus the claims not measured, and those stated for other datasets only)."""
    counts = verdict_counts(table)
    total = sum(counts[v] for v in VERDICTS if v != NOT_APPLICABLE)
    line = (
        f"{study} on {dataset}: {counts[HOLDS]} of {total} {what} hold, "
        f"{counts[CONTRADICTED]} contradicted, {counts[INCONCLUSIVE]} inconclusive"
    )
    if counts[NOT_MEASURED]:
        line += f", {counts[NOT_MEASURED]} not measured"
    if counts[NOT_APPLICABLE]:
        line += f" ({counts[NOT_APPLICABLE]} more apply to other datasets)"
    return line


def holds_after_holm(table: pd.DataFrame, alpha: float) -> int:
    """How many claims that hold still hold with Holm's adjusted p-value at ``alpha``."""
    return int(((table["verdict"] == HOLDS) & (table["p_holm"] < alpha)).sum())


def claims_metrics(table: pd.DataFrame, prefix: str = "claims") -> dict[str, float]:
    """The verdict counts of a claims table as MLflow metrics, e.g. ``{"claims.holds": 5.0,
    "claims.contradicted": 1.0, ..., "claims.total": 9.0}`` (``total`` counts every claim
    that applies to the dataset; spaces in verdicts become underscores)."""
    counts = verdict_counts(table)
    metrics = {f"{prefix}.{v.replace(' ', '_')}": float(n) for v, n in counts.items()}
    metrics[f"{prefix}.total"] = float(sum(n for v, n in counts.items() if v != NOT_APPLICABLE))
    return metrics


def _cell(value: Any, digits: int = 4) -> str:
    if value is None or pd.isna(value):
        return "–"
    return f"{value:.{digits}g}" if isinstance(value, float) else str(value)


def protocol_notes(
    results: StudyResults, claims: Sequence[Claim], rename: Mapping[str, str] | None = None
) -> str:
    """One paragraph per paper of ``claims``: the networks and schedule it trained, beside
    the networks of these runs; a bold warning naming the runs' networks the paper did not
    train on this dataset (a verdict then tests the paper's finding on another network -- it
    does not reproduce the paper's numbers), and one naming the training settings that
    differ from those the paper states for the dataset (:func:`schedule_note`). Empty when
    nothing is known. ``rename``: the claims' paper method names -> the study's.
    """
    ours = sorted(set(results.models.values()))
    notes = []
    for paper in dict.fromkeys(c.paper for c in claims):
        protocol = paper_protocol(paper)
        if protocol is None:
            continue
        theirs = _networks(protocol, results.dataset)
        networks = ", ".join(f"`{a}`" for a in protocol["architectures"])
        note = f"Protocol of `{paper}`: trained {networks}; {protocol['training']}."
        if ours:
            note += f" These runs trained {', '.join(f'`{a}`' for a in ours)}."
            foreign = [a for a in ours if a not in theirs]
            where = f" on `{results.dataset}`" if results.dataset in protocol["datasets"] else ""
            if foreign == ours:
                note += (
                    f" **None of them is a network of the paper{where}**: a verdict says "
                    "whether the paper's finding holds on this network, not that its numbers "
                    "are reproduced."
                )
            elif foreign:
                note += (
                    f" **{', '.join(f'`{a}`' for a in foreign)} "
                    f"{'is not a network' if len(foreign) == 1 else 'are not networks'} of the "
                    f"paper{where}**: verdicts involving those runs test the finding on another "
                    "network."
                )
        schedule, differs = schedule_note(results, protocol, rename)
        note += schedule
        if differs or any(a not in theirs for a in ours):
            note += (
                " The paper's own networks and schedules are run files under `paper_runs/` "
                "(docs/models.md)."
            )
        notes.append(note + "\n\n")
    return "".join(notes)


def _networks(protocol: Mapping[str, Any], dataset: str) -> list[str]:
    """The networks the paper trained on ``dataset`` (all its networks when it names no
    networks per dataset or never trained on this one)."""
    entry = protocol["datasets"].get(dataset)
    return entry["architectures"] if entry else protocol["architectures"]


def protocol_gaps(
    results: StudyResults, claims: Sequence[Claim], rename: Mapping[str, str] | None = None
) -> tuple[list[str], bool] | None:
    """How these runs depart from their papers' protocols -- ``"network"`` (a run's network
    is not one the paper trained on this dataset), ``"dataset"`` (the paper never trained on
    it), ``"schedule"`` (a setting it states for the dataset differs) -- and whether the
    papers state any training setting for the dataset; None when it cannot be told (no
    paper protocol, or results assembled by hand without their networks and settings)."""
    protocols = [p for p in map(paper_protocol, dict.fromkeys(c.paper for c in claims)) if p]
    if not protocols or not results.models or not results.schedules:
        return None
    gaps, stated_any = set(), False
    for protocol in protocols:
        if any(a not in _networks(protocol, results.dataset) for a in results.models.values()):
            gaps.add("network")
        entry = protocol["datasets"].get(results.dataset)
        if entry is None:
            gaps.add("dataset")
            continue
        stated_any = stated_any or bool(entry["settings"] or entry["methods"])
        if schedule_differences(results.schedules, entry, rename):
            gaps.add("schedule")
    return [g for g in ("network", "dataset", "schedule") if g in gaps], stated_any


def protocol_suffix(gaps: tuple[list[str], bool] | None, dataset: str) -> str:
    """The end of the claims line: whether a count of holding claims is a reproduction."""
    if gaps is None:
        return ""
    departures, stated = gaps
    if departures:
        return f"; not the paper's protocol ({', '.join(departures)})"
    if not stated:
        return f"; the paper's network (it states no training settings for {dataset})"
    return "; the paper's network and stated settings"


def _stated_for(
    entry: Mapping[str, Any], method: str, rename: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The settings a paper states for ``method`` (a method of the study): its own entry,
    under the paper's name for it (``rename`` maps the paper's names to the study's), over
    the dataset's."""
    own = {(rename or {}).get(name, name): values for name, values in entry["methods"].items()}
    return {**entry["settings"], **own.get(method, {})}


def schedule_differences(
    schedules: Mapping[str, Mapping[str, Any]],
    entry: Mapping[str, Any],
    rename: Mapping[str, str] | None = None,
) -> dict[str, list[str]]:
    """Setting -> the methods whose effective value differs from what the paper states for
    the dataset of ``entry`` (a ``paper_protocol(...)["datasets"]`` value)."""
    differences: dict[str, list[str]] = {}
    for method, settings in schedules.items():
        for key, value in _stated_for(entry, method, rename).items():
            ours = _setting(settings.get(key))
            same = (
                math.isclose(ours, value, rel_tol=1e-9)
                if isinstance(ours, (int, float)) and isinstance(value, (int, float))
                else ours == value
            )
            if not same:
                differences.setdefault(key, []).append(method)
    return differences


def _setting(value: Any) -> Any:
    """A training setting in comparable form (milestones, a tuple in ``TrainConfig``, as a list)."""
    return [int(v) for v in value] if isinstance(value, (list, tuple)) else value


def schedule_note(
    results: StudyResults, protocol: Mapping[str, Any], rename: Mapping[str, str] | None = None
) -> tuple[str, bool]:
    """A sentence on whether the runs trained with the settings the paper states for this
    dataset ("" when the runs' settings are unknown, e.g. results assembled by hand), and
    whether any differs."""
    datasets = protocol["datasets"]
    if not results.schedules or not datasets:
        return "", False
    entry = datasets.get(results.dataset)
    if entry is None:
        trained = ", ".join(f"`{d}`" for d in datasets)
        return f" The paper did not train on `{results.dataset}` (it trained on {trained}).", False
    if not entry["settings"] and not entry["methods"]:
        return f" The paper states no training settings for `{results.dataset}`.", False
    differences = schedule_differences(results.schedules, entry, rename)
    compared = ", ".join(
        dict.fromkeys([*entry["settings"], *(k for own in entry["methods"].values() for k in own)])
    )
    if not differences:
        return (
            f" These runs trained with every setting the paper states for `{results.dataset}` "
            f"(compared: {compared}).",
            False,
        )
    parts = []
    for key, methods in differences.items():
        values = sorted({str(_setting(results.schedules[m].get(key))) for m in methods})
        wanted = {str(_stated_for(entry, m, rename)[key]) for m in methods}
        who = "" if len(methods) == len(results.schedules) else f" ({', '.join(methods)})"
        parts.append(f"{key} {' / '.join(values)}{who}, the paper's {' / '.join(sorted(wanted))}")
    return (
        f" **The runs' schedule differs from the paper's for `{results.dataset}`**: "
        + "; ".join(parts)
        + ". Verdicts then test the finding under another schedule.",
        True,
    )


def _markdown(
    results: StudyResults, table: pd.DataFrame, claims: list[Claim], line: str, settings: str
) -> str:
    shown = pd.DataFrame(
        {
            "claim": [f"`{i}`: {c}" for i, c in zip(table["id"], table["claim"])],
            "effect": [_cell(v) for v in table["effect"]],
            "CI": [
                f"[{_cell(lo)}, {_cell(hi)}]" for lo, hi in zip(table["ci_low"], table["ci_high"])
            ],
            "p": [_cell(v, 3) for v in table["p_value"]],
            "p (Holm)": [_cell(v, 3) for v in table["p_holm"]],
            "seeds": table["n_seeds"],
            "verdict": table["verdict"],
            "seeds needed": [_cell(v) for v in table["seeds_needed"]],
            "note": table["note"],
        }
    )
    quotes = dict.fromkeys(
        f"- `{c.paper}:{c.id.split('[')[0]}` ({c.source}): “{c.quote.strip()}”" for c in claims
    )
    return "\n".join(
        [
            f"# Does it reproduce the papers? Study `{results.study}` on `{results.dataset}`",
            "",
            f"**{line}**",
            "",
            settings,
            "",
            shown.to_markdown(index=False),
            "",
            "## What the papers say",
            "",
            *quotes,
            "",
        ]
    )


def _reads_shift(options: Mapping[str, Any]) -> bool:
    """Whether any claim these options keep (after ``only``) reads shifted sets (the study
    then gets the shift stage)."""
    return any(
        side["quantity"].shift != UNSHIFTED
        for side in option_sides(options)
        if side["quantity"].kind == "metric"
    )


def _check_claim(name: str, value: Any) -> Any:
    parse_claim(value, "study")
    return value


CLAIM = Option("a claim mapping in the format of docs/claims.md", _check_claim)
POWER = number(low=0.0, high=1.0, low_inclusive=False, high_inclusive=False)


def _method_note(results: StudyResults, table: pd.DataFrame, alpha: float, power: float) -> str:
    """How the report measures and judges a claim, and in which units."""
    return (
        f"Per claim: the effect per seed, its mean over {len(results.seeds)} seed(s) with a t "
        f"interval, a t-test at α = {alpha:g} (two-sided unless the claim says one-sided) and "
        "the verdict; "
        "`p (Holm)`: the p-value adjusted across the study's "
        f"{int(table['p_value'].notna().sum())} tested claims by Holm's step-down method "
        f"(family-wise error at α): {holds_after_holm(table, alpha)} of the "
        f"{verdict_counts(table)[HOLDS]} claims that hold still hold after it (the verdicts "
        f"themselves test each claim on its own); `seeds needed`: seeds for {power:.0%} power if "
        "the observed mean and spread were true. Effects are in the metrics table's units, as the "
        "claims' thresholds are: fractions (an ECE of 2% is 0.02), not the ×100 of the paper "
        "tables. See docs/claims.md."
    )


CLAIMS_OPTIONS = {
    "papers": optional(list_of(choice(*paper_names()))),
    "claims": optional(list_of(CLAIM)),
    "only": optional(list_of(TEXT)),
    "rename": optional(mapping(TEXT, TEXT)),
    "alpha": SIGNIFICANCE,
    "power": POWER,
}


@report(
    "claims",
    needs=("histories", "calibrators"),
    shifted=_reads_shift,
    study_check=check_study_claims,
    calibrators=claim_calibrators,
    options=CLAIMS_OPTIONS,
    ensembles=True,
)
def claims_report(
    results: StudyResults,
    papers: list[str] | None = None,
    claims: list[dict[str, Any]] | None = None,
    only: list[str] | None = None,
    rename: dict[str, str] | None = None,
    alpha: float = 0.05,
    power: float = 0.8,
) -> dict[str, Any]:
    """Every claim of ``papers`` (files in ``reports/claims/``) and the study's own
    ``claims``, measured per seed and judged (module docstring).

    Args:
        papers: papers whose claims the study checks, e.g. ``[mukhoti]``.
        claims: the study's own claims, in the same format (``docs/claims.md``).
        only: keep only these claims of the papers (``id`` or an expanded ``id[member]``).
        rename: the papers' names -> the study's (methods or calibrator keys).
        alpha: significance level of every test.
        power: the power the "seeds needed" of an inconclusive claim aims at.

    Returns:
        ``claims`` (one row per claim: effect, interval, p-value, verdict, seeds needed),
        ``effects`` (per claim and seed), ``summary`` (Markdown, its first line the
        verdict count, which is also logged) and ``verdicts`` (JSON: study, dataset, that
        line, the counts and :func:`claims_metrics`, for a run summary or MLflow).
    """
    view = StudyOutline(
        results.study,
        tuple(results.methods),
        results.groups,
        tuple(c for c in dict.fromkeys(results.metrics["calibrator"]) if c != UNCALIBRATED),
        tuple(record["key"] for record in results.ensembles),
    )
    options = {"papers": papers, "claims": claims, "only": only, "rename": rename}
    resolved = study_claims(view, options)
    table, effects = evaluate_claims(resolved, results, alpha, power)
    line = summary_line(
        results.study, results.dataset, table, "claims" if claims else "paper claims"
    )
    gaps = protocol_gaps(results, resolved, rename)
    line += protocol_suffix(gaps, results.dataset)  # holding claims alone are no reproduction
    logger.info(line)
    settings = protocol_notes(results, resolved, rename) + _method_note(
        results, table, alpha, power
    )
    return {
        "claims": table,
        "effects": effects,
        "summary": _markdown(results, table, resolved, line, settings),
        "verdicts": _verdicts(results, table, line, gaps, alpha),
    }


def _verdicts(
    results: StudyResults,
    table: pd.DataFrame,
    line: str,
    gaps: tuple[list[str], bool] | None,
    alpha: float,
) -> dict[str, Any]:
    """:func:`claims_report`'s ``verdicts``: the verdict line, the protocol gaps, the counts
    (and how many holding claims survive Holm's correction) and :func:`claims_metrics`."""
    return {
        "study": results.study,
        "dataset": results.dataset,
        "line": line,
        "protocol_gaps": None if gaps is None else gaps[0],
        "settings_stated": None if gaps is None else gaps[1],
        "counts": verdict_counts(table),
        "holds_after_holm": holds_after_holm(table, alpha),
        "metrics": claims_metrics(table),
    }
