"""Pick one member of every sweep group from a study's tidy metrics table.

A method with ``sweep`` in ``parameters_methods.yml`` expands into members
(``ls_epsilon_0p01``, ``ls_epsilon_0p03``, ...) sharing a group key (``ls``). The papers
report one member per group, chosen by their own rule:

- ``"karandikar"`` (Karandikar et al., App. E, "lowest ECE whilst giving up less than 1%
  accuracy"): among the members whose mean validation accuracy is less than
  ``tolerance`` (absolute, default 0.01 = 1 percentage point) below the best member's,
  the lowest mean validation ``metric`` (default ``ece_l2``).
- ``"best_val_error"`` (meta-regularisation paper): the lowest mean validation error.
- ``"test_ece"`` (Wang et al. §3): the lowest mean **test** ``metric`` (default
  ``ece``). The choice has seen the test set: its rows get ``selected_on = "test"`` and
  a ``[test-selected]`` label suffix, so every table built from the filtered table says
  so.

Means are over seeds, on the clean split of the uncalibrated model (``calibrator`` and
``shift`` ``"none"``) unless told otherwise. Ties go to the first member in table order.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from calib_pipeline.registry import check_choice, check_range
from calib_pipeline.reports.common import UNCALIBRATED, UNSHIFTED
from calib_pipeline.reports.registry import TEXT, choice, optional

SELECTION_RULES = ("karandikar", "best_val_error", "test_ece")
DEFAULT_METRIC = {"karandikar": "ece_l2", "best_val_error": "error", "test_ece": "ece"}
SELECTED_ON = {"karandikar": "val", "best_val_error": "val", "test_ece": "test"}
TEST_SELECTED = " [test-selected]"
# The options of every report that can reduce a sweep to one member (see apply_selection).
SELECTION_OPTIONS = {
    "selection": optional(choice(*SELECTION_RULES)),
    "selection_metric": optional(TEXT),
}
RECORD_COLUMNS = [
    "group",
    "method",
    "label",
    "rule",
    "selected_on",
    "metric",
    "value",
    "accuracy",
    "members",
]


def _check_rule(rule: str, metric: str | None, tolerance: float) -> str:
    """The criterion metric of ``rule``; raises ValueError for a bad rule or option."""
    check_choice("rule", rule, SELECTION_RULES)
    if rule == "best_val_error" and metric not in (None, "error"):
        raise ValueError(
            f"selection rule 'best_val_error' minimises 'error'; got metric={metric!r}"
        )
    check_range("tolerance", tolerance, low=0.0, high=1.0, high_inclusive=False)
    return metric or DEFAULT_METRIC[rule]


def _member_means(
    table: pd.DataFrame, members: list[str], split: str, metrics: list[str], calibrator: str
) -> pd.DataFrame:
    """Members x metrics table of seed means on ``split`` (clean, one calibrator)."""
    rows = table[
        table["method"].isin(members)
        & (table["split"] == split)
        & (table["shift"] == UNSHIFTED)
        & (table["calibrator"] == calibrator)
        & table["metric"].isin(metrics)
    ]
    means = rows.groupby(["method", "metric"])["value"].mean().unstack("metric")
    missing = [
        (m, k)
        for m in members
        for k in metrics
        if m not in means.index or k not in means.columns or pd.isna(means.at[m, k])
    ]
    if missing:
        raise ValueError(
            f"selection needs {split!r} values of {metrics} (calibrator {calibrator!r}) for every "
            f"member; missing (method, metric): {missing}"
        )
    return means.reindex(index=members, columns=metrics)


def _choose(means: pd.DataFrame, rule: str, metric: str, tolerance: float) -> str:
    """The chosen member given its seed means (see the module docstring)."""
    if rule == "karandikar":
        # "giving up less than 1% accuracy" (App. E): a drop of exactly `tolerance` is not
        # less than it, whatever the rounding of the subtraction (hence the 1e-12)
        drop = means["accuracy"].max() - means["accuracy"]
        eligible = means[(drop <= 0) | (drop < tolerance - 1e-12)]
        return str(eligible[metric].idxmin())
    return str(means[metric].idxmin())


def select_sweep_members(
    table: pd.DataFrame,
    groups: dict[str, str],
    rule: str = "karandikar",
    *,
    metric: str | None = None,
    tolerance: float = 0.01,
    calibrator: str = UNCALIBRATED,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Keep one member per sweep group of a tidy metrics table.

    Args:
        table: the tidy table (``evaluate_runs``): method, label, seed, calibrator, split,
            shift, metric, value, ...
        groups: method key -> sweep group key (``StudyResults.groups``); methods missing
            from it are their own group. Groups with one member are kept as they are.
        rule: ``"karandikar"``, ``"best_val_error"`` or ``"test_ece"``.
        metric: the criterion minimised (default ``ece_l2`` for ``karandikar``, ``ece``
            for ``test_ece``; ``best_val_error`` always uses ``error``).
        tolerance: the accuracy window of ``karandikar`` (absolute; 0.01 = 1 point; a drop
            of exactly ``tolerance`` is outside it).
        calibrator: whose scores the rule looks at (default uncalibrated).

    Returns:
        ``(filtered, record)``: the table without the members not chosen, with a
        ``selected_on`` column (``"val"``, ``"test"`` or ``"fixed"`` for methods that
        are not swept) and ``[test-selected]`` appended to the label of test-selected
        members; and one record row per swept group: group, method, label, rule,
        selected_on, metric, value (the chosen member's mean), accuracy (its mean on the
        same split) and members (all candidates, comma-separated).

    Raises:
        ValueError: unknown rule, a metric that contradicts the rule, a tolerance outside
            [0, 1), or a member without the values the rule needs.
    """
    criterion = _check_rule(rule, metric, tolerance)
    split = SELECTED_ON[rule]
    labels = table.drop_duplicates("method").set_index("method")["label"]
    records = []
    dropped: list[str] = []
    for group, members in _sweep_groups(table, groups).items():
        if len(members) < 2:
            continue
        means = _member_means(table, members, split, sorted({"accuracy", criterion}), calibrator)
        chosen = _choose(means, rule, criterion, tolerance)
        dropped.extend(m for m in members if m != chosen)
        records.append(
            {
                "group": group,
                "method": chosen,
                "label": labels[chosen],
                "rule": rule,
                "selected_on": split,
                "metric": criterion,
                "value": float(means.at[chosen, criterion]),
                "accuracy": float(means.at[chosen, "accuracy"]),
                "members": ", ".join(members),
            }
        )
    return _marked(table, dropped, records)


def _sweep_groups(table: pd.DataFrame, groups: dict[str, str]) -> dict[str, list[str]]:
    """Sweep group -> its methods in ``table``, both in first-seen order (a method missing
    from ``groups`` is its own group)."""
    by_group: dict[str, list[str]] = {}
    for method in dict.fromkeys(table["method"]):
        by_group.setdefault(groups.get(method, method), []).append(method)
    return by_group


def _marked(
    table: pd.DataFrame, dropped: list[str], records: list[dict[str, Any]]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``table`` without the ``dropped`` members, with its ``selected_on`` column and test
    selections marked in the labels; and the record of the ``records``, marked alike."""
    chosen_on = {r["method"]: r["selected_on"] for r in records}
    filtered = table[~table["method"].isin(dropped)].copy()
    filtered["selected_on"] = filtered["method"].map(chosen_on).fillna("fixed")
    test_chosen = filtered["selected_on"] == "test"
    filtered.loc[test_chosen, "label"] = filtered.loc[test_chosen, "label"] + TEST_SELECTED
    record = pd.DataFrame(records, columns=RECORD_COLUMNS)
    record.loc[record["selected_on"] == "test", "label"] += TEST_SELECTED
    return filtered.reset_index(drop=True), record


def apply_selection(
    table: pd.DataFrame, groups: dict[str, str], rule: str | None, metric: str | None = None
) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """``table`` reduced to one member per sweep group by ``rule``, or all of it for ``None``.

    Args:
        table: the tidy metrics table.
        groups: method key -> sweep group key.
        rule: a rule of ``SELECTION_RULES``, or ``None`` to keep every member.
        metric: the rule's criterion (see :func:`select_sweep_members`); needs a rule.

    Returns:
        ``(table, record)``; ``record`` is ``None`` without a rule.
    """
    if rule is None:
        if metric is not None:
            raise ValueError("selection_metric needs a selection rule (selection=...)")
        return table, None
    return select_sweep_members(table, groups, rule, metric=metric)
