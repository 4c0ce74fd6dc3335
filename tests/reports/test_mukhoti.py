"""Mukhoti et al. reports on a synthetic study."""

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import torch

from calib_pipeline.reports import mukhoti
from calib_pipeline.reports.common import paper_view
from calib_pipeline.reports.registry import build_report
from tests.reports.synthetic import FOCAL, FOCAL_GROUPS, study


def test_mukhoti_table_cells_and_temperatures(focal_results):
    out = build_report("mukhoti_table", focal_results)
    table = out["table"]
    assert list(paper_view(table).columns) == [
        "Method",
        "Error",
        "ECE Pre T",
        "ECE Post T",
        "AdaECE Pre T",
        "AdaECE Post T",
        "Classwise-ECE Pre T",
        "Classwise-ECE Post T",
    ]
    assert table["Method"].tolist() == list(FOCAL.values())
    ce = table.iloc[0]
    assert ce["Error"] == "25.00 ± 5.00"
    assert ce["ECE Pre T"] == "12.00 ± 2.00"
    assert (ce["error_pct_mean"], ce["error_pct_std"], ce["ece_pre_t_pct_mean"]) == pytest.approx(
        (25.0, 5.0, 12.0)
    )
    assert ce["temperature_mean"] > 0 and ce["n_seeds"] == len(focal_results.seeds)
    t = np.mean(
        [
            focal_results.calibrators[("ce", s)]["ts_grid"].learned()["temperature"]
            for s in (0, 1, 2)
        ]
    )
    assert ce["ECE Post T"] == f"3.00 ± 1.00 ({t:.2f})"
    assert out["temperatures"].shape == (9, 3)
    paper = out["paper_ece"]
    assert paper.columns[:3].tolist() == ["Dataset", "CE ECE Pre T", "CE ECE Post T"]
    assert paper.loc[0, "CE ECE Post T"] == ce["ECE Post T"]
    assert paper_view(out["paper_error"]).columns.tolist() == ["Dataset", *FOCAL.values()]
    assert "ts_grid" in out["mukhoti_table"] and "| CE" in out["mukhoti_table"]


def test_mukhoti_table_selection_marks_test_selected(focal_results):
    out = build_report("mukhoti_table", focal_results, selection="test_ece")
    assert len(out["table"]) == 2 and out["table"]["Method"][1].endswith("[test-selected]")
    assert out["selection"]["selected_on"].tolist() == ["test"]
    assert "test-selected" in out["mukhoti_table"]


def test_mukhoti_table_failure_paths(focal_results):
    with pytest.raises(ValueError, match=r"valid calibrator keys: \['ts_grid'\]"):
        build_report("mukhoti_table", focal_results, calibrator="ts")
    with pytest.raises(ValueError, match="unknown option"):
        build_report("mukhoti_table", focal_results, temperature="grid")
    with pytest.raises(ValueError, match="spread"):
        build_report("mukhoti_table", focal_results, spread="iqr")
    with pytest.raises(ValueError, match="not in the metrics table"):
        build_report("mukhoti_table", focal_results, metrics=["ece", "smooth_ece"])
    without = study(FOCAL, [0, 1, 2], focal_results.metrics, FOCAL_GROUPS)
    with pytest.raises(ValueError, match="needs 'calibrators'"):
        build_report("mukhoti_table", without)


def test_mukhoti_curves_mean_over_seeds(focal_results):
    out = build_report("mukhoti_curves", focal_results)
    curves = out["curves"].set_index(["method", "quantity", "epoch"])
    assert curves.loc[("ce", "nll", 2), "mean"] == pytest.approx(3.0)  # seeds give 2, 3, 4
    assert curves.loc[("ce", "nll", 2), "std"] == pytest.approx(1.0)
    assert curves.loc[("ce", "nll_incorrect", 2), "n"] == 0  # NaN epochs are skipped, not zeros
    assert curves.loc[("ce", "head_weight_norm", 3), "mean"] == pytest.approx(4.0)  # 3, 4, 5
    assert set(out["curves"]["quantity"]) == {
        "nll",
        "nll_correct",
        "nll_incorrect",
        "entropy_correct",
        "entropy_incorrect",
        "head_weight_norm",
    }
    assert len(out["epochs_by_method"].axes) == 6 and len(out["overview"].axes) == 3
    # one legend for every panel, right of them
    assert [t.get_text() for t in out["epochs_by_method"].legends[0].get_texts()] == list(
        FOCAL.values()
    )


def test_mukhoti_curves_failure_paths(focal_results):
    with pytest.raises(ValueError, match=r"valid panels: .*entropy_correct"):
        build_report("mukhoti_curves", focal_results, panels=["nll", "confidence"])
    with pytest.raises(ValueError, match="unknown method"):
        build_report("mukhoti_curves", focal_results, methods=["brier"])
    with pytest.raises(ValueError, match="needs 'histories'"):
        build_report("mukhoti_curves", study(FOCAL, [0, 1, 2], focal_results.metrics))


# --- notebook use: compute functions on a tidy frame, no Kedro, no figures ---------------


def tiny_tidy() -> pd.DataFrame:
    """Two methods x two seeds x (raw, TS) on the clean test split: error 20 / 30 %, every
    calibration error 10 % + 2 points per seed raw and 3 % + 2 points per seed after TS."""
    rows = []
    for method, label, error in (("ce", "CE", 0.20), ("focal", "Focal", 0.30)):
        for seed in (0, 1):
            for calibrator, base in (("none", 0.10), ("ts", 0.03)):
                for metric in ("error", "ece", "ece_em", "classwise_ece"):
                    value = error if metric == "error" else base + 0.02 * seed
                    rows.append((method, label, seed, calibrator, metric, value))
    frame = pd.DataFrame(rows, columns=["method", "label", "seed", "calibrator", "metric", "value"])
    return frame.assign(split="test", shift="none", severity=0)


def test_mukhoti_table_from_a_tidy_frame_alone_draws_nothing():
    before = plt.get_fignums()
    table = mukhoti.table(tiny_tidy())
    assert plt.get_fignums() == before
    assert table["Method"].tolist() == ["CE", "Focal"]
    assert table.loc[1, "Error"] == "30.00 ± 0.00"
    assert (
        table.loc[0, "ECE Pre T"] == "11.00 ± 1.41" and table.loc[0, "ECE Post T"] == "4.00 ± 1.41"
    )
    assert table.loc[0, "AdaECE Post T"] == "4.00 ± 1.41"
    # options of the report are plain arguments: SEM, fewer metrics, the row order, T
    temperatures = pd.DataFrame({"method": ["ce", "ce"], "seed": [0, 1], "temperature": [1.4, 1.6]})
    sem = mukhoti.table(
        tiny_tidy(),
        "ts",
        metrics=["ece"],
        methods=["focal", "ce"],
        temperatures=temperatures,
        spread="sem",
    )
    assert paper_view(sem).columns.tolist() == ["Method", "Error", "ECE Pre T", "ECE Post T"]
    assert sem.loc[0, "ece_post_t_pct_sem"] == pytest.approx(1.0)
    assert sem["Method"].tolist() == ["Focal", "CE"]
    assert (
        sem.loc[1, "ECE Post T"] == "4.00 ± 1.00 (1.50)"
        and sem.loc[0, "ECE Post T"] == "4.00 ± 1.00"
    )
    oriented = mukhoti.paper_orientation(sem, ["ece"], "toy")
    assert list(oriented) == ["paper_error", "paper_ece"]
    assert oriented["paper_ece"].loc[0, "CE ECE Post T"] == "4.00 ± 1.00 (1.50)"
    assert oriented["paper_ece"].loc[0, "ce_ece_post_t_pct_mean"] == pytest.approx(4.0)
    with pytest.raises(ValueError, match="spread must be one of 'std', 'sem', got 'iqr'"):
        mukhoti.table(tiny_tidy(), spread="iqr")
    with pytest.raises(ValueError, match=r"metric\(s\) \['nll'\] are not in the metrics table"):
        mukhoti.table(tiny_tidy(), metrics=["nll"])


def test_mukhoti_table_refuses_a_calibrator_without_a_temperature(focal_results):
    """Its "Post T" columns, T in parentheses and the paper's TS numbers beside them would
    all describe another calibrator (e.g. histogram binning)."""
    import dataclasses

    from calib_pipeline.calibration.posthoc import build_calibrator

    binned = {
        run: {
            "ts_grid": build_calibrator("histogram_binning").fit(
                torch.randn(40, 4), torch.arange(40) % 4
            )
        }
        for run in focal_results.calibrators
    }
    with pytest.raises(ValueError, match="calibrator 'ts_grid' fitted no temperature"):
        build_report("mukhoti_table", dataclasses.replace(focal_results, calibrators=binned))
