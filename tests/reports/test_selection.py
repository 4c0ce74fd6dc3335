"""Sweep-member selection rules on a synthetic tidy table."""

import pytest

from calib_pipeline.reports.registry import build_report
from calib_pipeline.reports.selection import select_sweep_members
from tests.reports.synthetic import LS, LS_GROUPS, study


def test_karandikar_rule_excludes_lowest_ece_outside_accuracy_window(ls_table):
    filtered, record = select_sweep_members(ls_table, LS_GROUPS, "karandikar")
    assert set(filtered["method"]) == {"ce", "ls_epsilon_0p03"}
    assert record.to_dict("records") == [
        {
            "group": "ls",
            "method": "ls_epsilon_0p03",
            "label": "LS (epsilon=0.03)",
            "rule": "karandikar",
            "selected_on": "val",
            "metric": "ece_l2",
            "value": pytest.approx(0.04),
            "accuracy": pytest.approx(0.892),
            "members": "ls_epsilon_0p01, ls_epsilon_0p03, ls_epsilon_0p05",
        }
    ]
    assert set(filtered.groupby("method")["selected_on"].first().items()) == {
        ("ce", "fixed"),
        ("ls_epsilon_0p03", "val"),
    }
    # every calibrator, split and seed of the chosen member is kept
    assert len(filtered) == len(ls_table) // 2
    # a wider window admits the lowest-ECE member; a configurable metric changes the choice
    assert (
        select_sweep_members(ls_table, LS_GROUPS, "karandikar", tolerance=0.05)[1]["method"][0]
        == "ls_epsilon_0p05"
    )
    assert (
        select_sweep_members(ls_table, LS_GROUPS, "karandikar", metric="error")[1]["method"][0]
        == "ls_epsilon_0p01"
    )


def test_best_val_error_rule(ls_table):
    filtered, record = select_sweep_members(ls_table, LS_GROUPS, "best_val_error")
    assert record["method"].tolist() == ["ls_epsilon_0p01"] and record["metric"][0] == "error"
    assert "[test-selected]" not in " ".join(filtered["label"])


def test_test_ece_rule_labels_the_choice_everywhere(ls_table):
    filtered, record = select_sweep_members(ls_table, LS_GROUPS, "test_ece")
    assert record["method"].tolist() == ["ls_epsilon_0p05"]
    assert (
        record["selected_on"][0] == "test"
        and record["label"][0] == "LS (epsilon=0.05) [test-selected]"
    )
    chosen = filtered[filtered["method"] == "ls_epsilon_0p05"]
    assert set(chosen["label"]) == {"LS (epsilon=0.05) [test-selected]"}
    assert set(chosen["selected_on"]) == {"test"}
    assert set(filtered.loc[filtered["method"] == "ce", "label"]) == {"CE"}
    # a table built from it shows the mark
    summary = build_report("summary", study(LS, [0, 1], filtered), metrics=["ece"])
    assert "LS (epsilon=0.05) [test-selected]" in summary["summary"]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            {"rule": "lowest_ece"},
            "rule must be one of 'karandikar', 'best_val_error', 'test_ece', got 'lowest_ece'",
        ),
        ({"rule": "best_val_error", "metric": "ece"}, "minimises 'error'"),
        ({"rule": "karandikar", "tolerance": 1.5}, "tolerance"),
        ({"rule": "karandikar", "metric": "sece"}, "missing"),
    ],
)
def test_selection_failure_paths(ls_table, kwargs, match):
    with pytest.raises(ValueError, match=match):
        select_sweep_members(ls_table, LS_GROUPS, **kwargs)


def _accuracy_ece_table(members: dict[str, tuple[float, float]]):
    import pandas as pd

    from calib_pipeline.reports.common import UNCALIBRATED, UNSHIFTED

    rows = [
        {
            "method": name,
            "label": name,
            "seed": 0,
            "calibrator": UNCALIBRATED,
            "split": "val",
            "shift": UNSHIFTED,
            "metric": metric,
            "value": value,
        }
        for name, (accuracy, ece) in members.items()
        for metric, value in (("accuracy", accuracy), ("ece_l2", ece))
    ]
    return pd.DataFrame(rows)


def test_karandikar_rule_wants_less_than_one_point_given_up():
    """App. E: "lowest ECE whilst giving up less than 1% accuracy" -- a member exactly one
    point below the best is not eligible, one half a point below is."""
    table = _accuracy_ece_table({"ls_a": (0.90, 0.05), "ls_b": (0.89, 0.01), "ls_c": (0.895, 0.03)})
    groups = {"ls_a": "ls", "ls_b": "ls", "ls_c": "ls"}
    assert select_sweep_members(table, groups, "karandikar")[1]["method"][0] == "ls_c"
    assert (
        select_sweep_members(table, groups, "karandikar", tolerance=0.0101)[1]["method"][0]
        == "ls_b"
    )
    # a zero window keeps the most accurate member(s) only
    assert (
        select_sweep_members(table, groups, "karandikar", tolerance=0.0)[1]["method"][0] == "ls_a"
    )
