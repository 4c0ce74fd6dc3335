"""Shared report helpers: cells, method order and colours, writing artifacts."""

import matplotlib
import numpy as np
import pandas as pd
import pytest

from calib_pipeline.reports.common import (
    MARKDOWN_MAX_ROWS,
    as_cells,
    mean_std_cell,
    method_colors,
    method_order,
    method_styles,
    metric_unit,
    seed_stats,
    stat_cells,
    with_numbers,
    write_artifacts,
)
from calib_pipeline.reports.registry import build_report


@pytest.mark.parametrize(
    "name, fixture, options",
    [
        ("mukhoti_table", "focal_results", {"selection": "karandikar"}),
        ("mukhoti_curves", "focal_results", {}),
        ("karandikar_table", "soft_results", {}),
        ("karandikar_effects", "soft_results", {}),
        ("singh_table", "dark_results", {}),
        ("singh_density", "dark_results", {}),
    ],
)
def test_every_artifact_is_written(name, fixture, options, request, tmp_path):
    out = build_report(name, request.getfixturevalue(fixture), **options)
    write_artifacts(tmp_path, out)
    # a table: csv, md, tex; a figure: pdf, png; text or JSON: one file
    expected = sum(
        3 if isinstance(v, pd.DataFrame) else 2 if hasattr(v, "savefig") else 1
        for v in out.values()
    )
    assert len(list(tmp_path.iterdir())) == expected  # no two artifacts share a file


def test_long_tables_are_written_as_csv_only(tmp_path):
    short = pd.DataFrame({"value": range(MARKDOWN_MAX_ROWS)})
    long = pd.DataFrame({"value": range(MARKDOWN_MAX_ROWS + 1)})
    write_artifacts(tmp_path, {"short": short, "long": long})
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "long.csv",
        "short.csv",
        "short.md",
        "short.tex",
    ]
    assert len(pd.read_csv(tmp_path / "long.csv")) == MARKDOWN_MAX_ROWS + 1


def test_each_table_gets_a_latex_tabular_with_special_characters_escaped(tmp_path):
    table = pd.DataFrame({"label": ["LS_0.1", "FL-53 %"], "ece": ["2.08 ± 0.59", "1.10"]})
    write_artifacts(tmp_path, {"table": table})
    tex = (tmp_path / "table.tex").read_text(encoding="utf-8")
    assert "\\begin{tabular}{ll}" in tex and tex.rstrip().endswith("\\end{tabular}")
    assert "label & ece \\\\" in tex
    assert "LS\\_0.1 & 2.08 $\\pm$ 0.59 \\\\" in tex and "FL-53 \\% & 1.10 \\\\" in tex
    assert tex.isascii()


def test_an_unsupported_artifact_type_is_refused_with_its_name(tmp_path):
    with pytest.raises(TypeError, match="report artifact 'weights' has unsupported type int"):
        write_artifacts(tmp_path, {"weights": 3})


@pytest.mark.parametrize(
    ("mean", "spread", "n", "digits", "expected"),
    [
        (12.0, 2.0, 3, 2, "12.00 ± 2.00"),
        (12.0, 2.0, None, 1, "12.0 ± 2.0"),  # the spread alone decides without a count
        (12.0, float("nan"), 1, 2, "12.00"),  # one seed: no spread
        (12.0, 0.5, 1, 2, "12.00"),
        (12.0, float("inf"), None, 2, "12.00"),
        (float("nan"), float("nan"), 0, 2, "–"),  # no value at all
        (0.12345, 0.001, 2, 3, "0.123 ± 0.001"),
    ],
)
def test_mean_std_cell(mean, spread, n, digits, expected):
    assert mean_std_cell(mean, spread, n, digits) == expected


def test_seed_stats_skips_nan_and_keeps_first_seen_order():
    rows = pd.DataFrame(
        {"method": ["b", "b", "a", "a", "a"], "value": [1.0, 3.0, 2.0, np.nan, 4.0]}
    )
    stats = seed_stats(rows, ["method"], sem=True)
    assert stats["method"].tolist() == ["b", "a"]
    assert stats["n"].tolist() == [2, 2] and stats["mean"].tolist() == [2.0, 3.0]
    assert stats["sem"].tolist() == pytest.approx([np.sqrt(2) / np.sqrt(2)] * 2)
    assert list(seed_stats(rows, ["method"]).columns) == ["method", "mean", "std", "n"]


def test_method_order_keeps_the_study_order_and_groups_sweeps():
    study = ["ce", "ls_0p1", "focal_1", "ls_0p3", "focal_3"]
    groups = {"ls_0p1": "ls", "ls_0p3": "ls", "focal_1": "focal", "focal_3": "focal"}
    assert method_order(study) == study
    assert method_order(study, groups=groups) == ["ce", "ls_0p1", "ls_0p3", "focal_1", "focal_3"]
    # only the methods present; those the study does not list come last, sorted
    assert method_order(study, present=["focal_3", "zeta", "ce", "alpha"]) == [
        "ce",
        "focal_3",
        "alpha",
        "zeta",
    ]


def test_method_colors_are_one_per_method_and_stable_across_figures():
    study = ["ce", "focal", "ls"]
    colors = method_colors(study)
    assert len(set(colors.values())) == 3
    assert matplotlib.colors.to_rgba(colors["focal"]) == matplotlib.colormaps["tab10"](1)
    assert method_colors(study, {"ce": "CE", "focal": "FL", "ls": "LS"})["FL"] == colors["focal"]
    styles = method_styles([f"m{i}" for i in range(25)])
    assert len({s.color for s in list(styles.values())[:20]}) == 20  # 20 colours, then repeats
    assert styles["m0"].linestyle == "-" and styles["m10"].linestyle == "--"
    assert len({(s.color, s.marker, s.linestyle) for s in styles.values()}) == 25


def test_titles_name_the_dataset_and_its_protocol(focal_results):
    import dataclasses

    from calib_pipeline.reports.common import paper_header

    assert focal_results.dataset_label == "toy", "the dataset alone when the protocol is unknown"
    results = dataclasses.replace(focal_results, protocol="toy_long")
    assert paper_header(results, "Table 1", "std", None).startswith(
        "# Table 1\n\nStudy `study` on toy (protocol toy_long), mean ± std"
    )
    summary = build_report("summary", results, metrics=["ece"])["summary"]
    assert summary.startswith("# study on toy (protocol toy_long)")


def test_a_table_of_cells_carries_its_numbers_in_csv_and_only_its_layout_in_markdown_and_latex(
    tmp_path,
):
    stats = pd.DataFrame(
        {
            "metric": ["ece", "brier", "nll"],
            "mean": [2.08, 12.5, 0.61],
            "std": [0.59, 1.0, float("nan")],
            "n": [3, 3, 1],
        }
    )
    ece, brier, nll = stat_cells(stats, digits=2)
    frame = with_numbers(
        pd.DataFrame({"Method": ["CE"], "ECE": [ece], "Brier": [brier], "NLL": [nll + " *"]})
    )
    assert list(frame.columns) == [
        "Method",
        "ECE",
        "Brier",
        "NLL",
        "ece_pct_mean",
        "ece_pct_std",
        "brier_x100_mean",
        "brier_x100_std",
        "nll_mean",
        "nll_std",
        "n_seeds",
    ]
    assert frame.loc[0, "ECE"] == "2.08 ± 0.59" and frame.loc[0, "NLL"] == "0.61 *"
    assert (frame.loc[0, "ece_pct_mean"], frame.loc[0, "n_seeds"]) == (2.08, 3)
    write_artifacts(tmp_path, {"table": frame})
    csv = pd.read_csv(tmp_path / "table.csv")
    assert csv.loc[0, "brier_x100_std"] == 1.0 and csv.loc[0, "ECE"] == "2.08 ± 0.59"
    markdown, latex = (tmp_path / "table.md").read_text(), (tmp_path / "table.tex").read_text()
    assert "2.08 ± 0.59" in markdown and "_mean" not in markdown and "n_seeds" not in markdown
    assert "2.08 & $\\pm$ 0.59" in latex and "mean" not in latex
    # the cells come back for a re-arranged table (a paper's orientation), numbers and all
    assert as_cells(frame).loc[0, "ECE"].mean == 2.08


def test_every_metric_has_one_unit_in_every_report(focal_results):
    assert [
        metric_unit(m) for m in ("accuracy", "ece", "auroc", "brier", "nll", "mean_entropy")
    ] == ["%", "%", "%", "×100", "", ""]
    summary = build_report("summary", focal_results, metrics=["accuracy", "brier", "auroc", "nll"])
    # the synthetic table has no NLL: no column, so the units line does not name one
    assert "Units: Accuracy, AUROC in %; Brier ×100." in summary["summary"]
    table = summary["table"]
    brier = focal_results.metrics
    brier = brier[
        (brier["metric"] == "brier")
        & (brier["split"] == "test")
        & (brier["shift"] == "none")
        & (brier["method"] == "ce")
        & (brier["calibrator"] == "none")
    ]["value"]
    assert table.loc[0, "brier_x100_mean"] == pytest.approx(100 * brier.mean())
