"""Karandikar et al. reports on a synthetic study."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from calib_pipeline.reports.common import paper_view
from calib_pipeline.reports.registry import build_report
from tests.reports.synthetic import SOFT, SOFT_GROUPS, SOFT_VALUES, cell, study, tidy


def test_karandikar_table_layout_and_cells(soft_results):
    out = build_report("karandikar_table", soft_results)
    table = out["table"]
    assert list(paper_view(table).columns) == [
        "Primary",
        "Secondary",
        "Accuracy",
        "L2-ECE",
        "L2-ECE+TS",
        "L2-ECE+TS-SB-ECE",
    ]  # the paper's ECE columns, under the metric's one name
    assert table[["Primary", "Secondary"]].values.tolist() == [
        ["NLL", "none"],
        ["NLL", "MMCE"],
        ["Focal", "none"],
        ["Focal", "SB-ECE"],
    ]
    assert table.loc[0, "L2-ECE"] == cell([0.09, 0.10, 0.11], "sem")
    assert table.loc[0, "Accuracy"] == cell([0.78, 0.79, 0.80], "sem")
    assert table.loc[1, "L2-ECE"] == cell([0.04, 0.05, 0.07], "sem")  # the selected beta = 1 member
    assert out["selection"]["method"].tolist() == ["sc_nll_mmce_beta_1"]
    grid = out["grid_l2_ece"].set_index("Primary")
    assert paper_view(grid).columns.tolist() == ["none", "MMCE", "SB-ECE"]
    assert grid.loc["NLL", "mmce_pct_mean"] == table.loc[1, "l2_ece_pct_mean"]
    assert grid.loc["NLL", "MMCE"] == table.loc[1, "L2-ECE"] and pd.isna(grid.loc["NLL", "SB-ECE"])
    assert {"grid_accuracy", "grid_l2_ece_ts", "grid_l2_ece_ts_sb_ece"} <= set(out)
    assert f"**{table.loc[3, 'L2-ECE']}**" in out["karandikar_table"]  # lowest ECE in bold
    # std instead of SEM, and a post-hoc column dropped
    plain = build_report("karandikar_table", soft_results, spread="std", ts_sb_ece=None)["table"]
    assert plain.loc[0, "L2-ECE"] == cell([0.09, 0.10, 0.11]) and "L2-ECE+TS-SB-ECE" not in plain


def test_karandikar_table_loss_mapping_and_failures(soft_results):
    losses = {
        "ce": ["CE", "-"],
        "sc_nll_mmce_beta_1": ["CE", "MMCE"],
        "sc_focal_none": ["FL", "-"],
        "sc_focal_sb_ece": ["FL", "SB-ECE"],
    }
    table = build_report("karandikar_table", soft_results, losses=losses)["table"]
    assert table["Primary"].tolist() == ["CE", "CE", "FL", "FL"]
    with pytest.raises(ValueError, match=r"share a \(primary, secondary\) cell"):
        build_report("karandikar_table", soft_results, selection=None)
    with pytest.raises(ValueError, match="missing: \\['sc_focal_sb_ece'\\]"):
        build_report(
            "karandikar_table",
            soft_results,
            losses={k: v for k, v in losses.items() if k != "sc_focal_sb_ece"},
        )
    with pytest.raises(ValueError, match=r"valid calibrator keys: \['ts', 'ts_sb_ece'\]"):
        build_report("karandikar_table", soft_results, ts="ts_nll")
    with pytest.raises(
        ValueError,
        match="selection must be one of 'karandikar', 'best_val_error', 'test_ece', got 'best'",
    ):
        build_report("karandikar_table", soft_results, selection="best")


def test_karandikar_effects_cohens_d_and_p_value(soft_results):
    out = build_report("karandikar_effects", soft_results, calibrators=["none"])
    effects = out["effects"].set_index(["primary", "secondary"])
    none, mmce = np.array([0.09, 0.10, 0.11]), np.array([0.04, 0.05, 0.07])
    pooled = math.sqrt((2 * none.var(ddof=1) + 2 * mmce.var(ddof=1)) / 4)
    row = effects.loc[("NLL", "MMCE")]
    assert row["cohens_d"] == pytest.approx(
        (none.mean() - mmce.mean()) / pooled
    )  # positive: MMCE lowers ECE
    assert row["p_value"] == pytest.approx(
        scipy_stats.ttest_ind(none, mmce, equal_var=False).pvalue
    )
    assert bool(row["significant"]) and row["n_none"] == 3
    assert row["mean_none"] == pytest.approx(10.0) and row["mean_secondary"] == pytest.approx(
        16 / 3
    )  # ×100
    assert sorted(effects.index) == [("Focal", "SB-ECE"), ("NLL", "MMCE")]
    every = build_report("karandikar_effects", soft_results)["effects"]
    assert sorted(set(every["calibrator"])) == ["none", "ts", "ts_sb_ece"]
    assert len(out["effect_sizes"].axes) == 1
    student = build_report(
        "karandikar_effects", soft_results, calibrators=["none"], test="student"
    )["effects"]
    assert student.loc[0, "p_value"] == pytest.approx(scipy_stats.ttest_ind(none, mmce).pvalue)


def test_karandikar_effects_with_one_seed_is_nan_with_a_note():
    values = {k: v[:1] for k, v in SOFT_VALUES.items()}
    results = study(SOFT, [0], tidy(SOFT, [0], ["ts"], values), SOFT_GROUPS)
    effects = build_report("karandikar_effects", results)["effects"]
    assert effects["cohens_d"].isna().all() and effects["p_value"].isna().all()
    assert set(effects["note"]) == {"needs >= 2 seeds per method"}
    with pytest.raises(ValueError, match="valid calibrator keys"):
        build_report("karandikar_effects", results, calibrators=["ts_sb_ece"])
    with pytest.raises(ValueError, match="alpha"):
        build_report("karandikar_effects", results, alpha=0)
