"""Singh et al. reports on a synthetic study."""

import pytest
import torch

from calib_pipeline.calibration.posthoc import build_calibrator
from calib_pipeline.reports.common import paper_view
from calib_pipeline.reports.evaluation import evaluate_runs
from calib_pipeline.reports.registry import StudyResults, build_report
from tests.reports.synthetic import DARK, cell, study


def test_singh_table_layout_values_and_marks(dark_results):
    out = build_report("singh_table", dark_results)
    table = out["table"]
    assert list(paper_view(table).columns) == [
        "Method",
        "Brier",
        "ECE",
        "AUROC",
        "α",
        "β",
        "γ",
        "α − β − γ",
    ]
    assert {
        "brier_x100_mean",
        "auroc_pct_mean",
        "alpha_minus_beta_minus_gamma_pct_std",
        "n_seeds",
    } <= set(table.columns)
    assert table["Method"].tolist() == [
        "CE",
        "CE + ts_fixed",
        "LS (epsilon=0.05)",
        "LS (epsilon=0.05) + ts_fixed",
        "Focal (gamma=3)",
        "Focal (gamma=3) + ts_fixed",
    ]
    assert table.loc[0, "AUROC"] == "91.00 ± 1.00"
    assert (table.loc[0, "auroc_pct_mean"], table.loc[0, "auroc_pct_std"]) == pytest.approx(
        (91.0, 1.0)
    )
    assert table.loc[0, "α − β − γ"] == cell([0.3, 0.2, 0.1])  # alpha - beta - gamma per seed
    comparisons = out["comparisons"].set_index(["method", "metric"])
    assert bool(comparisons.loc[("LS (epsilon=0.05)", "auroc"), "worse"])
    assert not comparisons.loc[("LS (epsilon=0.05)", "ece"), "worse"]  # lower ECE is better
    assert "**71.00 ± 1.00**" in out["singh_table"]
    paper = build_report("singh_table", dark_results, calibrated="baseline")["table"]
    assert paper["Method"].tolist() == [
        "CE",
        "CE + ts_fixed",
        "LS (epsilon=0.05)",
        "Focal (gamma=3)",
    ]


def test_singh_table_shift_tables_and_failures(dark_results):
    out = build_report("singh_table", dark_results, shifts=["none", "cifar10_1"])
    assert {"table", "table_cifar10_1_s0"} <= set(out) and "shift `cifar10_1`" in out["singh_table"]
    with pytest.raises(ValueError, match=r"unknown shift.*cifar10_1"):
        build_report("singh_table", dark_results, shifts=["cifar10_2"])
    with pytest.raises(ValueError, match="baseline 'erl'"):
        build_report("singh_table", dark_results, baseline="erl")
    with pytest.raises(ValueError, match="calibrated must be one of"):
        build_report("singh_table", dark_results, calibrated="some")


def test_singh_density_histograms(dark_results):
    out = build_report("singh_density", dark_results, bins=10)
    hist = out["histograms"]
    assert set(hist["calibrator"]) == {"none", "ts_fixed"} and len(hist) == 3 * 2 * 2 * 10
    correct = sum(
        int((run["test"]["logits"].argmax(1) == run["test"]["labels"]).sum())
        for (m, _), run in dark_results.logits.items()
        if m == "ce"
    )
    counts = hist[hist["method"] == "ce"].groupby(["calibrator", "outcome"])["count"].sum()
    # temperature scaling keeps every prediction: same correct / incorrect split, seeds pooled
    assert counts["none", "correct"] == counts["ts_fixed", "correct"] == correct
    assert counts["none", "incorrect"] == 3 * 120 - correct
    part = hist[
        (hist["method"] == "ce") & (hist["calibrator"] == "none") & (hist["outcome"] == "correct")
    ]
    assert (part["density"] * (part["upper"] - part["lower"])).sum() == pytest.approx(1.0)
    assert out["confidence_density"].axes[0].get_title().startswith("CE, uncalibrated: AUROC 91.0")
    assert len(out["confidence_density"].axes) == 6


def test_singh_density_failure_paths(dark_results):
    with pytest.raises(ValueError, match=r"valid calibrator keys: \['ts_fixed'\]"):
        build_report("singh_density", dark_results, calibrator="ts")
    with pytest.raises(ValueError, match="bins"):
        build_report("singh_density", dark_results, bins=1)
    with pytest.raises(ValueError, match="needs 'logits'"):
        build_report("singh_density", study(DARK, [0, 1, 2], dark_results.metrics))


def test_singh_table_runs_with_a_single_seed():
    # regression: with one seed a per-seed .loc lookup returned a scalar
    generator = torch.Generator().manual_seed(1)
    runs = {}
    for method in ("ce", "erl"):
        parts = {}
        for part in ("val", "test"):
            labels = torch.randint(0, 3, (60,), generator=generator)
            parts[part] = {
                "logits": torch.randn(60, 3, generator=generator)
                + 2 * torch.nn.functional.one_hot(labels, 3),
                "labels": labels,
            }
        runs[f"{method}|0"] = {
            "logits": parts,
            "calibrators": {
                "ts_fixed": build_calibrator("temperature_fixed").fit(
                    parts["val"]["logits"], parts["val"]["labels"]
                )
            },
        }
    labels = {"ce": "CE", "erl": "ERL"}
    metrics, bins = evaluate_runs(
        runs, dataset="toy", study="dark_side", labels=labels, calibrators=["ts_fixed"]
    )
    results = StudyResults(
        study="dark_side",
        dataset="toy",
        methods=["ce", "erl"],
        seeds=[0],
        labels=labels,
        groups={"ce": "ce", "erl": "erl"},
        metrics=metrics,
        bins=bins,
    )
    out = build_report("singh_table", results, calibrator="ts_fixed")
    assert "CE" in set(out["table"]["Method"])


def test_a_seed_without_errors_leaves_its_nan_auroc_out_of_the_comparison(dark_results):
    """A run that makes no test error has AUROC NaN: the table and its t-test skip that
    seed instead of failing the whole report."""
    tidy = dark_results.metrics.copy()
    first = tidy[
        (tidy["metric"] == "auroc") & (tidy["split"] == "test") & (tidy["calibrator"] == "none")
    ]
    ls_rows = first[first["method"].str.startswith("ls")]
    assert len(ls_rows) >= 3
    tidy.loc[ls_rows.index[0], "value"] = float("nan")
    results = StudyResults(**{**dark_results.__dict__, "metrics": tidy})
    out = build_report("singh_table", results)
    comparisons = out["comparisons"].set_index(["method", "metric"])
    p_value = comparisons.loc[("LS (epsilon=0.05)", "auroc"), "p_value"]
    assert 0.0 <= p_value <= 1.0, "a p-value from the remaining seeds, not NaN"
    assert out["table"].loc[2, "n_seeds"] >= 2
