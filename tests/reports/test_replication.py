"""The replication report: combined claims tables, counts per paper, failure paths."""

import math

import pandas as pd
import pytest

from calib_pipeline.reports.common import write_artifacts
from calib_pipeline.reports.replication import (
    TABLE_COLUMNS,
    combined_claims,
    replication_report,
    verdict_summary,
)


def claims_table(paper: str, verdicts: list[str]) -> pd.DataFrame:
    n = len(verdicts)
    return pd.DataFrame(
        {
            "paper": [paper] * n,
            "id": [f"claim_{i}" for i in range(n)],
            "source": ["Table 1"] * n,
            "claim": [f"claim {i} of {paper}" for i in range(n)],
            "effect_is": ["A − B"] * n,
            "n_seeds": [3] * n,
            "effect": [0.01 * (i + 1) for i in range(n)],
            "effect_std": [0.01] * n,
            "ci_low": [0.0] * n,
            "ci_high": [0.02] * n,
            "p_value": [0.04] * n,
            "p_holm": [min(1.0, 0.04 * n)] * n,
            "verdict": verdicts,
            "seeds_needed": [None if v != "inconclusive" else 7 for v in verdicts],
            "note": [""] * n,
        }
    )


STUDIES = {
    "focal": claims_table("mukhoti", ["holds", "contradicted", "inconclusive", "not applicable"]),
    "focal_meta": claims_table("focal_meta", ["holds", "holds", "not measured"]),
}


def test_combined_table_keeps_every_claim_with_its_study_and_numbers():
    table = combined_claims(STUDIES)
    assert list(table.columns) == list(TABLE_COLUMNS)
    assert len(table) == 7
    assert list(table["study"]) == ["focal"] * 4 + ["focal_meta"] * 3
    row = table[(table["paper"] == "focal_meta") & (table["id"] == "claim_1")].iloc[0]
    assert row["effect"] == pytest.approx(0.02) and row["verdict"] == "holds"
    assert table.loc[2, "seeds_needed"] == 7


def test_counts_per_paper_and_overall():
    summary = verdict_summary(combined_claims(STUDIES)).set_index("paper")
    assert summary.loc["mukhoti", "holds"] == 1 and summary.loc["mukhoti", "study"] == "focal"
    assert summary.loc["mukhoti", "applicable"] == 3  # "not applicable" is not counted
    assert summary.loc["mukhoti", "decided"] == 2
    assert summary.loc["focal_meta", "not measured"] == 1
    assert summary.loc["all", "applicable"] == 6
    assert summary.loc["all", "holds"] == 3 and summary.loc["all", "contradicted"] == 1


def test_report_lines_and_metrics():
    report = replication_report(STUDIES, "fashion_mnist")
    first = report["summary"].splitlines()[0]
    assert first == (
        "**all papers on fashion_mnist: 3 of 6 applicable claims hold, 1 contradicted, "
        "1 inconclusive, 1 not measured**"
    )
    assert (
        "- Mukhoti et al. (2020), On using focal loss for neural network calibration (study focal) "
        "on fashion_mnist: 1 of 3 applicable claims hold, 1 contradicted, 1 inconclusive\n"
    ) in report["summary"]
    assert report["metrics"]["replication.holds"] == 3.0
    assert report["metrics"]["replication.decided"] == 4.0
    assert report["metrics"]["replication.not_applicable"] == 1.0


def test_report_writes_csv_markdown_and_latex(tmp_path):
    write_artifacts(tmp_path, replication_report(STUDIES, "fashion_mnist"))
    for name in ("replication", "verdicts"):
        for suffix in ("csv", "md", "tex"):
            assert (tmp_path / f"{name}.{suffix}").stat().st_size > 0
    back = pd.read_csv(tmp_path / "replication.csv")
    assert len(back) == 7 and math.isclose(back["effect"].iloc[0], 0.01)
    assert "\\begin{tabular}" in (tmp_path / "replication.tex").read_text()


def test_refuses_no_studies_foreign_tables_and_unknown_verdicts():
    with pytest.raises(ValueError, match="no claims tables"):
        combined_claims({})
    with pytest.raises(ValueError, match=r"study 'focal' has no column\(s\) \['verdict'"):
        combined_claims({"focal": STUDIES["focal"].drop(columns="verdict")})
    bad = STUDIES["focal"].assign(verdict=["holds", "maybe", "holds", "holds"])
    with pytest.raises(ValueError, match=r"unknown verdicts \['maybe'\]"):
        combined_claims({"focal": bad})


def test_a_claim_two_studies_judge_keeps_a_row_per_study_and_the_report_says_so():
    both = {"focal": STUDIES["focal"], "focal_variant": STUDIES["focal"].iloc[:2]}
    table = combined_claims(both)
    assert len(table) == 6 and list(table["study"]) == ["focal"] * 4 + ["focal_variant"] * 2
    summary = verdict_summary(table)
    assert list(summary["study"]) == ["focal", "focal_variant", "all"]
    assert summary.iloc[-1]["holds"] == 2  # counted once per study
    report = replication_report(both, "test")
    assert (
        "2 claim(s) judged by more than one study are counted once per study: "
        "mukhoti:claim_0, mukhoti:claim_1." in report["summary"]
    )


def test_a_studys_own_claims_are_named_as_such():
    own = {"baseline": claims_table("baseline", ["holds", "inconclusive"])}
    report = replication_report(own, "test")
    assert (
        "- study baseline's own claims on test: 1 of 2 applicable claims hold" in report["summary"]
    )
