"""Shift reports on synthetic tidy tables: layouts, hand-computed cells, SEM modes, sources
never pooled, skipped corruptions, non-monotone accuracy, empty studies and bad options."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from calib_pipeline.reports.common import paper_view, write_artifacts
from calib_pipeline.reports.evaluation import TIDY_COLUMNS
from calib_pipeline.reports.registry import StudyResults, build_report, report_needs
from calib_pipeline.reports.shift import corruption_sem

METHODS = {"ce": "CE", "focal": "FL"}
GENERATED = ("gaussian_noise", "fog", "contrast")
METRICS = ("accuracy", "ece", "ece_em", "nll", "brier", "auroc", "ece_l2")


def value(
    metric: str, method: str, calibrator: str, corruption: int, severity: int, seed: int
) -> float:
    """Additive design: severity, corruption type, seed, method and calibrator effects."""
    if metric in ("accuracy", "auroc"):
        rises = {("focal", 2, 4): 0.15, ("ce", 1, 5): 0.105}  # contrast 4 > 3 by 5 pp, fog by 0.5
        rise = rises.get((method, corruption, severity), 0.0)
        return 0.9 - 0.1 * severity + rise
    offset = 0.005 * (method == "focal") - 0.003 * (calibrator == "ts")
    return 0.01 * severity + 0.001 * corruption + 0.002 * seed + offset


def tidy(with_corruptions: bool = True, with_natural: bool = True) -> pd.DataFrame:
    cells = [("val", "none", 0, -1), ("test", "none", 0, -1)]
    if with_corruptions:
        cells += [("test", c, s, i) for i, c in enumerate(GENERATED) for s in range(1, 6)]
        cells += [
            ("test", "cifar10_c:fog", s, 50) for s in (1, 2)
        ]  # official: never pooled with generated
    if with_natural:
        cells += [("test", "cifar10_1", 0, 7), ("test", "cifar10_2", 0, 8)]
    rows = [
        {
            "dataset": "cifar10",
            "study": "s",
            "method": m,
            "label": label,
            "seed": seed,
            "run_id": f"run-{m}-{seed}",
            "calibrator": cal,
            "split": split,
            "shift": shift,
            "severity": sev,
            "metric": metric,
            "value": value(metric, m, cal, index, sev, seed),
        }
        for m, label in METHODS.items()
        for seed in (0, 1)
        for cal in ("none", "ts")
        for split, shift, sev, index in cells
        for metric in METRICS
    ]
    return pd.DataFrame(rows, columns=TIDY_COLUMNS)


def results(table: pd.DataFrame, skipped: bool = True) -> StudyResults:
    entry = {
        "shift": "frost",
        "severity": 0,
        "source": "generated",
        "split": "test",
        "skipped": "no frost_dir",
    }
    shift = (
        {("ce", 0): {"skipped/frost": entry}, ("focal", 0): {"skipped/frost": entry}}
        if skipped
        else {}
    )
    return StudyResults(
        study="s",
        dataset="cifar10",
        methods=list(METHODS),
        seeds=[0, 1],
        labels=METHODS,
        groups={},
        metrics=table,
        bins=pd.DataFrame(),
        shift=shift,
    )


def cell(frame: pd.DataFrame, column: str, **where) -> str:
    mask = np.logical_and.reduce([frame[k] == v for k, v in where.items()])
    (found,) = frame.loc[mask, column].tolist()
    return found


@pytest.fixture(scope="module")
def tables() -> dict:
    return build_report("shift_tables", results(tidy()))


def test_shift_tables_layout(tables):
    assert set(tables) == {
        "per_corruption",
        "mean_over_corruptions",
        "accuracy_by_severity",
        "skipped",
        "shift_tables",
    }
    per = tables["per_corruption"]
    assert list(paper_view(per).columns) == [
        "source",
        "label",
        "calibrator",
        "corruption",
        "severity",
        "Accuracy",
        "ECE",
        "AdaECE",
        "NLL",
        "Brier",
        "AUROC",
    ]  # each metric by its one name (reports.common.metric_name)
    assert "adaece_pct_mean" in per.columns
    assert len(per) == 2 * 2 * (3 * 5 + 2)
    means = tables["mean_over_corruptions"]
    assert list(means.columns[:4]) == ["source", "label", "calibrator", "level"]
    # generated first (first seen), clean then severities, methods in study order
    first = means[
        (means["source"] == "generated")
        & (means["label"] == "CE")
        & (means["calibrator"] == "none")
    ]
    assert first["level"].tolist() == ["clean", "1", "2", "3", "4", "5"]
    assert means["source"].tolist()[0] == "generated" and means["label"].tolist()[0] == "CE"


def test_mean_over_corruptions_is_mean_and_sem_across_types_of_seed_means(tables):
    means = tables["mean_over_corruptions"]
    # seed means 0.031, 0.032, 0.033 -> mean 3.20 %, SEM 0.1 / sqrt(3) = 0.06 %
    assert (
        cell(means, "ECE", source="generated", label="CE", calibrator="none", level="3")
        == "3.20 ± 0.06"
    )
    assert (
        cell(means, "ECE", source="generated", label="FL", calibrator="ts", level="3")
        == "3.40 ± 0.06"
    )
    # one official corruption: its own rows, no SEM, the generated ones are not in it
    assert (
        cell(means, "ECE", source="cifar10_c", label="CE", calibrator="none", level="2") == "7.10"
    )
    clean = tidy()
    clean_ece = clean[
        (clean["shift"] == "none")
        & (clean["split"] == "test")
        & (clean["metric"] == "ece")
        & (clean["method"] == "ce")
        & (clean["calibrator"] == "none")
    ]["value"].mean()
    assert (
        cell(means, "ECE", source="generated", label="CE", calibrator="none", level="clean")
        == f"{clean_ece * 100:.2f}"
    )


def test_within_sem_removes_the_corruption_type_effect():
    tables = build_report("shift_tables", results(tidy()), sem="within")
    # the design is additive, so nothing is left once the type means are removed
    assert (
        cell(
            tables["mean_over_corruptions"],
            "ECE",
            source="generated",
            label="CE",
            calibrator="none",
            level="3",
        )
        == "3.20 ± 0.00"
    )
    grid = pd.DataFrame([[1.0, 2.0], [3.0, 5.0]])
    np.testing.assert_allclose(corruption_sem(grid, "plain"), [1.0, 1.5])
    # normalised columns (2.25, 1.75) and (3.25, 3.75): std 0.3536 * sqrt(2) / sqrt(2)
    np.testing.assert_allclose(corruption_sem(grid, "within"), [0.35355339, 0.35355339])
    np.testing.assert_allclose(corruption_sem(grid[[0]], "within"), [1.0])  # one condition: plain


def test_skipped_and_non_monotone_accuracy_are_reported(tables):
    assert tables["skipped"].to_dict("records") == [
        {"source": "generated", "corruption": "frost", "reason": "no frost_dir"}
    ]
    accuracy = tables["accuracy_by_severity"]
    falling = accuracy[~accuracy["monotone"]]
    assert falling[["label", "corruption"]].to_dict("records") == [
        {"label": "FL", "corruption": "contrast"}
    ]
    assert falling["largest rise"].tolist() == [5.0]
    # the 0.5-point rise of CE on fog is within the default 1-point tolerance, not with 0
    fog = accuracy[
        (accuracy["source"] == "generated")
        & (accuracy["label"] == "CE")
        & (accuracy["corruption"] == "fog")
    ]
    assert fog["largest rise"].tolist() == [0.5] and fog["monotone"].tolist() == [True]
    strict = build_report("shift_tables", results(tidy()), tolerance=0)["accuracy_by_severity"]
    assert len(strict[~strict["monotone"]]) == 2
    text = tables["shift_tables"]
    assert (
        "## Skipped corruptions" in text
        and "no frost_dir" in text
        and "## Accuracy not monotonically falling" in text
        and "contrast" in text
    )
    assert "not the official benchmark" in text


def test_sources_option_keeps_one_source():
    tables = build_report("shift_tables", results(tidy()), sources=["cifar10_c"])
    assert set(tables["per_corruption"]["source"]) == {"cifar10_c"}
    assert set(tables["per_corruption"]["corruption"]) == {"fog"}


def test_natural_shift_table_in_singh_layout():
    out = build_report("natural_shift_table", results(tidy()))
    table = out["table"]
    assert list(paper_view(table).columns) == ["label", "calibrator"] + [
        f"{s} {m}"
        for s in ("cifar10_1", "cifar10_2")
        for m in ("Accuracy", "Brier", "ECE", "AUROC")
    ]
    assert table[["label", "calibrator"]].values.tolist() == [
        ["CE", "none"],
        ["CE", "ts"],
        ["FL", "none"],
        ["FL", "ts"],
    ]
    # seeds 0.001 * 7 + {0, 0.002}: mean 0.8 %, std 0.14 %; Brier is x100 too (Singh)
    assert cell(table, "cifar10_1 ECE", label="CE", calibrator="none") == "0.80 ± 0.14"
    assert cell(table, "cifar10_1 Brier", label="FL", calibrator="ts") == "1.00 ± 0.14"
    assert (
        "| CE" in out["natural_shift_table"]
        and "`cifar10_1`, `cifar10_2`" in out["natural_shift_table"]
    )
    with_clean = build_report(
        "natural_shift_table", results(tidy()), include_clean=True, metrics=["ece"]
    )["table"]
    assert list(paper_view(with_clean).columns) == [
        "label",
        "calibrator",
        "test ECE",
        "cifar10_1 ECE",
        "cifar10_2 ECE",
    ]


def test_shift_figures_plot_the_severity_summary():
    figures = build_report("shift_figures", results(tidy()))
    figures["ece_vs_severity_generated"].canvas.draw()  # the constrained layout resolves
    assert set(figures) == {
        f"{name}_{source}"
        for source in ("generated", "cifar10_c")
        for name in (
            "ece_vs_severity",
            "ece_vs_severity_by_method",
            "ece_boxplots",
            "accuracy_vs_ece",
        )
    }
    lines = figures["ece_vs_severity_generated"]
    assert [ax.get_title() for ax in lines.axes] == ["calibrator none", "calibrator ts"]
    ce_none = lines.axes[0].containers[0]
    x, y = ce_none.lines[0].get_data()
    assert list(x) == [0, 1, 2, 3, 4, 5] and y[3] == pytest.approx(3.2)
    by_method = figures["ece_vs_severity_by_method_generated"]
    assert [ax.get_title() for ax in by_method.axes] == ["CE", "FL"]
    assert [t.get_text() for t in by_method.legends[0].get_texts()] == ["none", "ts"]
    boxes = figures["ece_boxplots_generated"]
    assert (
        len(boxes.axes) == 2 and len(boxes.axes[0].patches) == 2 * 5
    )  # a box per method x severity
    scatter = figures["accuracy_vs_ece_generated"]
    assert len(scatter.axes[0].collections[0].get_offsets()) == 3 * 5


def test_one_source_has_no_suffix_and_artifacts_save(tmp_path):
    table = tidy()
    table = table[~table["shift"].str.startswith("cifar10_c")]
    figures = build_report("shift_figures", results(table), metric="ece_l2", sem="within")
    assert set(figures) == {
        "ece_l2_vs_severity",
        "ece_l2_vs_severity_by_method",
        "ece_l2_boxplots",
        "accuracy_vs_ece_l2",
    }
    write_artifacts(
        tmp_path,
        {
            "ece_l2_vs_severity": figures["ece_l2_vs_severity"],
            **build_report("shift_tables", results(table)),
        },
    )
    assert {p.name for p in tmp_path.iterdir()} >= {
        "ece_l2_vs_severity.png",
        "mean_over_corruptions.csv",
        "skipped.md",
        "shift_tables.md",
    }


def test_studies_without_shift_rows_get_a_note_not_a_crash():
    clean = results(tidy(with_corruptions=False, with_natural=False), skipped=False)
    tables = build_report("shift_tables", clean)
    assert (
        list(tables) == ["shift_tables"] and "No corruption-shift results" in tables["shift_tables"]
    )
    natural = build_report("natural_shift_table", results(tidy(with_natural=False)))
    assert (
        list(natural) == ["natural_shift_table"]
        and "natural: [cifar10_1, cifar10_2]" in natural["natural_shift_table"]
    )
    assert list(build_report("shift_figures", clean)) == ["shift_figures"]


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        (
            "shift_tables",
            {"metrics": ["ecee"]},
            r"metrics\[0\] must be one of 'accuracy', 'error', .*got 'ecee'",
        ),
        ("shift_tables", {"sem": "masson"}, r"sem must be one of 'plain', 'within', got 'masson'"),
        (
            "shift_figures",
            {"metric": "brierr"},
            r"metric must be one of 'accuracy', .*got 'brierr'",
        ),
        (
            "natural_shift_table",
            {"sets": ["cifar10_1"]},
            r"unknown option\(s\) \['sets'\]; valid options: metrics, include_clean",
        ),
        ("shift_tables", {"tolerance": -1}, r"tolerance must be in \[0.0, inf\)"),
        (
            "shift_tables",
            {"metrics": ["sece"]},
            r"\['sece'\] were not computed on the shifted sets",
        ),
        ("shift_figures", {"metric": "smooth_ece"}, "not computed on the shifted sets"),
    ],
)
def test_bad_report_options_fail_clearly(name, options, message):
    with pytest.raises(ValueError, match=message):
        build_report(name, results(tidy()), **options)


def test_report_needs():
    assert report_needs("shift_tables") == ("shift",)
    assert report_needs("natural_shift_table") == () and report_needs("shift_figures") == ()
