import numpy as np
import pandas as pd
import pytest
import torch

from calib_pipeline.calibration.posthoc import build_calibrator
from calib_pipeline.reports.common import paper_view
from calib_pipeline.reports.evaluation import evaluate_runs
from calib_pipeline.reports.registry import StudyResults, build_report, report_names

METHODS = ["fm_ce", "fm_fl_gamma", "fm_fl_gamma_sece"]
LABELS = {"fm_ce": "CE", "fm_fl_gamma": "FLγ", "fm_fl_gamma_sece": "FLγ-SECE"}


@pytest.fixture(scope="module")
def results():
    generator = torch.Generator().manual_seed(0)
    runs, logits, histories = {}, {}, {}
    for method in METHODS:
        for seed in (0, 1):
            parts = {}
            for part in ("val", "test"):
                labels = torch.randint(0, 4, (200,), generator=generator)
                scores = torch.randn(200, 4, generator=generator) + 3 * torch.nn.functional.one_hot(
                    labels, 4
                )
                parts[part] = {"logits": scores, "labels": labels}
            entry = dict(parts)
            if method != "fm_ce":
                entry["gamma_test"] = torch.rand(200, generator=generator) * 2
            ts = build_calibrator("temperature_nll").fit(
                parts["val"]["logits"], parts["val"]["labels"]
            )
            runs[f"{method}|{seed}"] = {"logits": parts, "calibrators": {"ts": ts}}
            logits[(method, seed)] = entry
            histories[(method, seed)] = pd.DataFrame(
                {
                    "epoch": [1, 2],
                    "test_ece": [0.2, 0.1],
                    "test_accuracy": [0.5, 0.6],
                    "test_gamma_mean": [1.0, 1.2] if method != "fm_ce" else [np.nan, np.nan],
                    "test_gamma_std": [0.0, 0.3] if method != "fm_ce" else [np.nan, np.nan],
                }
            )
    metrics, bins = evaluate_runs(
        runs, dataset="toy", study="focal_meta", labels=LABELS, calibrators=["ts"]
    )
    return StudyResults(
        study="focal_meta",
        dataset="toy",
        methods=METHODS,
        seeds=[0, 1],
        labels=LABELS,
        groups={m: m for m in METHODS},
        metrics=metrics,
        bins=bins,
        histories=histories,
        logits=logits,
    )


def test_reports_are_registered():
    assert {
        "meta_tables",
        "meta_curves",
        "bin_robustness",
        "gamma_histogram",
        "summary",
        "reliability",
    } <= set(report_names())


def test_table1_has_the_paper_columns_and_a_ce_ts_row(results):
    out = build_report(
        "meta_tables",
        results,
        calibrated={"fm_ce": "ts"},
        ablation=["fm_fl_gamma", "fm_fl_gamma_sece"],
    )
    table1 = out["table1"]
    assert list(paper_view(table1).columns) == [
        "Methods",
        "Error",
        "NLL",
        "ECE",
        "MCE",
        "AdaECE",  # the paper's ACE, under its one name; the note says so
        "Classwise-ECE",
    ]
    assert "the meta-regularisation paper's ACE" in out["tables"]
    assert list(table1["Methods"]) == ["CE", "CE (TS)", "FLγ", "FLγ-SECE"]
    test = results.metrics
    ece = test[
        (test["method"] == "fm_ce")
        & (test["calibrator"] == "none")
        & (test["split"] == "test")
        & (test["metric"] == "ece")
    ]["value"]
    assert table1.loc[0, "ECE"] == f"{100 * ece.mean():.2f} ± {100 * ece.std():.2f}"
    # the CSV's numbers beside the cells, in the cells' unit (NLL as computed)
    assert table1.loc[0, "ece_pct_mean"] == pytest.approx(100 * ece.mean())
    assert table1.loc[0, "ece_pct_std"] == pytest.approx(100 * ece.std())
    assert {"nll_mean", "nll_std", "classwise_ece_pct_mean"} <= set(table1.columns)
    assert table1["n_seeds"].tolist() == [2, 2, 2, 2]
    assert list(out["table2"]["Methods"]) == ["FLγ", "FLγ-SECE"]
    assert "Table 2" in out["tables"]


def test_table_errors_name_the_problem(results):
    with pytest.raises(ValueError, match="calibrator 'dirichlet' was not evaluated for 'fm_ce'"):
        build_report("meta_tables", results, calibrated={"fm_ce": "dirichlet"})
    with pytest.raises(ValueError, match=r"methods \['nope'\] are not in the study's table"):
        build_report("meta_tables", results, ablation=["nope"])
    with pytest.raises(
        ValueError, match=r"unknown option\(s\) \['bins'\]; valid options: calibrated, ablation"
    ):
        build_report("meta_tables", results, bins=3)


def test_bin_robustness_covers_10_to_1000_bins(results):
    out = build_report("bin_robustness", results)
    table = out["ece_mce_vs_bins"]
    assert sorted(table["n_bins"].unique()) == [10, 20, 50, 100, 200, 500, 1000]
    assert (table["mce"] >= table["ece"]).all()
    assert out["figure5"].axes[0].get_xscale() == "log"


def test_gamma_histogram_and_curves(results):
    out = build_report("gamma_histogram", results)
    assert set(out["gamma_summary"]["label"]) == {"FLγ", "FLγ-SECE"}
    curves = build_report("meta_curves", results)["curves"]
    assert curves.loc[curves["label"] == "FLγ", "test_gamma_std"].tolist() == [
        0.0,
        pytest.approx(0.3),
    ]
    no_gamma = StudyResults(
        **{
            **results.__dict__,
            "logits": {k: v for k, v in results.logits.items() if k[0] == "fm_ce"},
        }
    )
    with pytest.raises(ValueError, match="no run of this study has learned γ values"):
        build_report("gamma_histogram", no_gamma)


def test_summary_lists_calibrator_fit_warnings(results):
    # a perfectly separable validation set drives NLL temperature scaling to its bound
    separable = torch.tensor([[4.0, 0.0, 0.0, 0.0], [0.0, 4.0, 0.0, 0.0]])
    degenerate = build_calibrator("temperature_nll").fit(separable, torch.tensor([0, 1]))
    assert degenerate.warnings
    flagged = StudyResults(
        **{**results.__dict__, "calibrators": {("fm_ce", 0): {"ts": degenerate}}}
    )
    out = build_report("summary", flagged, metrics=["accuracy", "ece"])
    assert list(out["fit_warnings"]["calibrator"]) == ["ts"] * len(degenerate.warnings)
    assert "Calibrator fit warnings" in out["summary"] and degenerate.warnings[0] in out["summary"]
    clean = build_report(
        "summary", StudyResults(**{**results.__dict__, "calibrators": {}}), metrics=["ece"]
    )
    assert clean["summary"].rstrip().endswith("None.")
