"""Ensembles of a study's runs as extra rows of its tidy table, its summary and its claims."""

import matplotlib

matplotlib.use("Agg")
import pandas as pd
import pytest
import torch

from calib_pipeline.calibration.metrics import calibration_metrics
from calib_pipeline.calibration.posthoc import build_calibrator
from calib_pipeline.reports.ensembles import (
    CALIBRATE_THEN_POOL_SUFFIX,
    ENSEMBLE_SEED,
    EnsembleSpec,
)
from calib_pipeline.reports.evaluation import evaluate_runs
from calib_pipeline.reports.registry import StudyResults, build_report, shows_ensembles

from .synthetic import fitted_runs

SEEDS = [0, 1, 2]
TS = {"ts": {"name": "temperature_nll"}}
ENSEMBLE = EnsembleSpec("ce_ensemble", "Ensemble of CE (3)", tuple(("ce", s) for s in SEEDS))
LABELS = {"ce": "CE", "focal": "Focal"}


@pytest.fixture(scope="module")
def runs():
    logits, calibrators = fitted_runs(["ce", "focal"], SEEDS)
    shared = logits[("ce", 0)]  # members are scored on the same samples
    for run in logits.values():
        for split in ("val", "test"):
            run[split]["labels"] = shared[split]["labels"]
    return {
        f"{m}|{s}": {
            "logits": logits[(m, s)],
            "calibrators": calibrators[(m, s)],
            "run_id": f"run-{m}-{s}",
        }
        for m, s in logits
    }


@pytest.fixture(scope="module")
def scored(runs):
    return evaluate_runs(
        runs,
        dataset="toy",
        study="s",
        labels=LABELS,
        calibrators=["ts"],
        ensembles=[ENSEMBLE],
        calibrator_definitions=TS,
    )


def value(table, method, calibrator, metric, split="test"):
    rows = table[
        (table["method"] == method)
        & (table["calibrator"] == calibrator)
        & (table["metric"] == metric)
        & (table["split"] == split)
    ]
    assert len(rows) == 1, rows
    return float(rows["value"].iloc[0])


def members(runs, split):
    return [runs[f"ce|{s}"]["logits"][split]["logits"] for s in SEEDS]


def test_the_ensemble_is_one_run_whose_rows_name_their_members(scored):
    table, bins = scored
    rows = table[table["method"] == "ce_ensemble"]
    assert set(rows["seed"]) == {ENSEMBLE_SEED}
    assert set(rows["label"]) == {"Ensemble of CE (3)"}
    assert set(rows["run_id"]) == {"run-ce-0+run-ce-1+run-ce-2"}
    assert list(dict.fromkeys(rows["calibrator"])) == ["none", "ts", "ts@calibrate_then_pool"]
    assert set(bins[bins["method"] == "ce_ensemble"]["seed"]) == {ENSEMBLE_SEED}


def test_the_members_rows_are_those_scored_without_the_ensemble(runs, scored):
    alone, _ = evaluate_runs(runs, dataset="toy", study="s", labels=LABELS, calibrators=["ts"])
    with_ensemble = scored[0][scored[0]["seed"] != ENSEMBLE_SEED].reset_index(drop=True)
    pd.testing.assert_frame_equal(with_ensemble, alone)


def test_uncalibrated_rows_score_the_averaged_probabilities(runs, scored):
    labels = runs["ce|0"]["logits"]["test"]["labels"]
    by_hand = sum(torch.softmax(z.double(), dim=1) for z in members(runs, "test")) / 3
    expected = calibration_metrics(by_hand, labels, inputs="probs")
    for metric in ("accuracy", "nll", "ece", "brier"):
        assert value(scored[0], "ce_ensemble", "none", metric) == pytest.approx(expected[metric])


def test_pool_then_calibrate_fits_on_the_log_of_the_ensembles_val_probabilities(runs, scored):
    val = sum(torch.softmax(z.double(), dim=1) for z in members(runs, "val")) / 3
    test = sum(torch.softmax(z.double(), dim=1) for z in members(runs, "test")) / 3
    scaler = build_calibrator("temperature_nll").fit(
        val.log(), runs["ce|0"]["logits"]["val"]["labels"]
    )
    labels = runs["ce|0"]["logits"]["test"]["labels"]
    expected = calibration_metrics(scaler.transform_logits(test.log()), labels)
    assert value(scored[0], "ce_ensemble", "ts", "nll") == pytest.approx(expected["nll"])
    assert value(scored[0], "ce_ensemble", "ts", "ece") == pytest.approx(expected["ece"])


def test_calibrate_then_pool_averages_the_members_calibrated_probabilities(runs, scored):
    calibrated = [
        runs[f"ce|{s}"]["calibrators"]["ts"].predict_proba(z)
        for s, z in zip(SEEDS, members(runs, "test"))
    ]
    labels = runs["ce|0"]["logits"]["test"]["labels"]
    expected = calibration_metrics(sum(calibrated) / 3, labels, inputs="probs")
    key = f"ts{CALIBRATE_THEN_POOL_SUFFIX}"
    for metric in ("nll", "ece"):
        assert value(scored[0], "ce_ensemble", key, metric) == pytest.approx(expected[metric])
    # the two orders are different predictions
    assert value(scored[0], "ce_ensemble", key, "nll") != pytest.approx(
        value(scored[0], "ce_ensemble", "ts", "nll")
    )


def test_shifted_sets_every_member_has_are_pooled_the_others_skipped(runs):
    generator = torch.Generator().manual_seed(1)
    labels = torch.randint(0, 4, (50,), generator=generator)
    shifted = {}
    for seed in SEEDS:
        sets = {"noise_1": {"shift": "noise", "severity": 1, "split": "test", "labels": labels}}
        sets["noise_1"]["logits"] = torch.randn(50, 4, generator=generator)
        if seed == 0:  # a corruption the other members skipped: no logits there
            sets["blur_1"] = {"shift": "blur", "severity": 1, "split": "test", "labels": labels}
            sets["blur_1"]["logits"] = torch.randn(50, 4, generator=generator)
        shifted[seed] = sets
    with_shift = {k: {**r, "shift": shifted[int(k.split("|")[1])]} for k, r in runs.items()}
    table, _ = evaluate_runs(
        {k: r for k, r in with_shift.items() if k.startswith("ce|")},
        dataset="toy",
        study="s",
        labels=LABELS,
        calibrators=["ts"],
        ensembles=[ENSEMBLE],
        calibrator_definitions=TS,
        shift_metrics=("nll",),
    )
    ensemble = table[(table["method"] == "ce_ensemble") & (table["shift"] != "none")]
    assert set(ensemble["shift"]) == {"noise"}
    by_hand = sum(torch.softmax(shifted[s]["noise_1"]["logits"].double(), 1) for s in SEEDS) / 3
    expected = calibration_metrics(by_hand, labels, inputs="probs")["nll"]
    assert float(ensemble[ensemble["calibrator"] == "none"]["value"].iloc[0]) == pytest.approx(
        expected
    )


def test_members_scored_on_different_samples_are_refused(runs):
    other = dict(runs)
    moved = {**runs["ce|1"]["logits"]}
    moved["test"] = {**moved["test"], "labels": moved["test"]["labels"].roll(1)}
    other["ce|1"] = {**runs["ce|1"], "logits": moved}
    with pytest.raises(ValueError, match="ensemble 'ce_ensemble': its members' labels differ"):
        evaluate_runs(
            other,
            dataset="toy",
            study="s",
            labels=LABELS,
            calibrators=["ts"],
            ensembles=[ENSEMBLE],
            calibrator_definitions=TS,
        )


@pytest.fixture(scope="module")
def results(scored, runs):
    table, bins = scored
    return StudyResults(
        study="s",
        dataset="toy",
        methods=["ce", "focal"],
        seeds=SEEDS,
        labels=LABELS,
        groups={"ce": "ce", "focal": "focal"},
        metrics=table,
        bins=bins,
        ensembles=[ENSEMBLE.record()],
        calibrators={
            (k.split("|")[0], int(k.split("|")[1])): r["calibrators"] for k, r in runs.items()
        },
    )


def test_the_summary_shows_the_ensemble_without_spread_and_lists_its_members(results):
    out = build_report("summary", results, metrics=["accuracy", "nll"])
    table = out["table"]
    ensemble = table[table["label"] == "Ensemble of CE (3)"]
    assert list(ensemble["calibrator"]) == ["none", "ts", "ts@calibrate_then_pool"]
    assert not ensemble["Accuracy"].astype(str).str.contains("±").any()
    assert set(ensemble["n_seeds"]) == {1}
    assert table[table["label"] == "CE"]["Accuracy"].astype(str).str.contains("±").all()
    summary = out["summary"]
    assert "| Ensemble of CE (3) | `ce_ensemble` | 3 | ce seed 0, ce seed 1, ce seed 2 |" in summary
    assert "ONE run" in summary


def test_reliability_draws_a_panel_per_ensemble_calibrator(results):
    figure = build_report("reliability", results, n_bins=15)["reliability_15_bins"]
    titles = [ax.get_title().replace("\n", " ") for ax in figure.axes if ax.get_title()]
    assert "Ensemble of CE (3) · ts@calibrate_then_pool" in titles
    assert "3 seed(s): 0, 1, 2" in figure._suptitle.get_text()


def claim(a, b, calibrator="none"):
    return {
        "id": f"{a}_vs_{b}",
        "source": "test",
        "quote": "q",
        "expect": "lower",
        "a": {"method": a, "calibrator": calibrator},
        "b": {"method": b, "calibrator": calibrator},
        "quantity": {"metric": "nll"},
    }


def test_a_claim_holds_the_ensemble_fixed_against_the_other_sides_seeds(results):
    out = build_report("claims", results, claims=[claim("ce_ensemble", "ce")])
    row = out["claims"].iloc[0]
    ensemble = value(results.metrics, "ce_ensemble", "none", "nll")
    per_seed = [
        float(
            results.metrics[
                (results.metrics["method"] == "ce")
                & (results.metrics["seed"] == s)
                & (results.metrics["calibrator"] == "none")
                & (results.metrics["split"] == "test")
                & (results.metrics["metric"] == "nll")
            ]["value"].iloc[0]
        )
        for s in SEEDS
    ]
    assert row["n_seeds"] == 3
    assert out["effects"]["effect"].tolist() == pytest.approx([ensemble - v for v in per_seed])
    assert "one run (an ensemble)" in row["note"]


def test_an_ensemble_against_itself_is_one_value_never_a_test(results):
    both = claim("ce_ensemble", "ce_ensemble")
    both["a"]["calibrator"] = "ts"
    both["b"]["calibrator"] = f"ts{CALIBRATE_THEN_POOL_SUFFIX}"
    row = build_report("claims", results, claims=[both])["claims"].iloc[0]
    assert row["n_seeds"] == 1
    assert row["verdict"] == "inconclusive"
    assert "ensembles only: one run each, no spread, so no test" in row["note"]


def test_a_claim_on_an_ensembles_temperature_is_not_measured(results):
    spec = claim("ce_ensemble", "ce")
    spec["quantity"] = {"temperature": "ts"}
    del spec["a"]["calibrator"], spec["b"]["calibrator"]
    row = build_report("claims", results, claims=[spec])["claims"].iloc[0]
    assert row["verdict"] == "not measured"
    assert "ce_ensemble is an ensemble" in row["note"]


def test_reports_reading_per_run_artifacts_are_handed_the_study_without_ensembles(results):
    assert shows_ensembles("summary") and shows_ensembles("claims")
    assert not shows_ensembles("mukhoti_table")
    # the fitted T of each row's run: an ensemble has no stored calibrator, so it is left out
    out = build_report("mukhoti_table", results, calibrator="ts")
    assert set(out["temperatures"]["method"]) == {"ce", "focal"}
    assert "Ensemble" not in out["mukhoti_table"]
