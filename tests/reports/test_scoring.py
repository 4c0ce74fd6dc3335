"""Scoring a predictions file: calibrators fitted on val, the tidy table, the reports."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from calib_pipeline.calibration.metrics import (
    bootstrap_ci,
    calibration_metrics,
    default_metric_names,
)
from calib_pipeline.calibration.predictions import load_predictions
from calib_pipeline.reports import standard
from calib_pipeline.reports.evaluation import TIDY_COLUMNS
from calib_pipeline.reports.scoring import (
    ScoreOptions,
    fit_calibrators,
    predictions_report,
    predictions_results,
    score_intervals,
    score_predictions,
    scores_summary,
)
from tests.data.test_predictions import NETCAL_KEYS, as_probs, netcal_like, synthetic, write

CALIBRATORS = {
    "ts": {"name": "temperature_nll"},
    "hist": {"name": "histogram_binning", "params": {"n_bins": 5}},
}


def value(table, split, calibrator, metric):
    row = table[
        (table["split"] == split)
        & (table["calibrator"] == calibrator)
        & (table["metric"] == metric)
    ]
    assert len(row) == 1
    return float(row["value"].iloc[0])


def test_named_metrics_join_the_default_suite(tmp_path):
    arrays = synthetic(n=80)
    predictions = load_predictions(write(tmp_path / "model.npz", arrays))
    fitted = fit_calibrators(predictions, CALIBRATORS)
    plain, _ = score_predictions(predictions, fitted, 10, [10], name="model")
    named, _ = score_predictions(predictions, fitted, 10, [10], ["skce", "ks_error"], name="model")
    assert set(plain["metric"]) == set(default_metric_names())
    assert "ks_error" in set(plain["metric"])
    assert set(named["metric"]) == {*default_metric_names(), "skce"}
    expected = calibration_metrics(arrays["test_logits"], arrays["test_labels"], keys=["skce"])
    assert value(named, "test", "none", "skce") == expected["skce"]


@pytest.mark.parametrize("kind", ["logits", "probs"])
def test_uncalibrated_rows_equal_the_metrics_of_the_file(tmp_path, kind):
    arrays = synthetic(n=120) if kind == "logits" else as_probs(synthetic(n=120))
    predictions = load_predictions(write(tmp_path / "model.npz", arrays))
    fitted = fit_calibrators(predictions, CALIBRATORS)
    assert list(fitted["fitted"]) == ["ts", "hist"] and fitted["provenance"]["inputs"] == kind
    metrics, bins = score_predictions(predictions, fitted, 10, [20], name="model")
    assert list(metrics.columns) == TIDY_COLUMNS
    assert set(metrics["calibrator"]) == {"none", "ts", "hist"} and set(metrics["split"]) == {
        "val",
        "test",
    }
    assert set(metrics["dataset"]) == {"model.npz"} and set(metrics["method"]) == {"model"}
    for split in ("val", "test"):
        expected = calibration_metrics(
            arrays[f"{split}_{kind}"], arrays[f"{split}_labels"], n_bins=10, inputs=kind
        )
        for metric in ("ece", "nll", "accuracy", "brier"):
            assert value(metrics, split, "none", metric) == expected[metric]
    assert sorted(bins["n_bins"].unique()) == [10, 20] and set(bins["calibrator"]) == {
        "none",
        "ts",
        "hist",
    }


def test_probabilities_calibrate_exactly_as_their_logits(tmp_path):
    """Log-probabilities are logits up to a row constant: TS learns the same temperature."""
    logits = load_predictions(write(tmp_path / "z.npz", synthetic(n=200)))
    probs = load_predictions(write(tmp_path / "p.npz", as_probs(synthetic(n=200))))
    on_logits = fit_calibrators(logits, CALIBRATORS)
    on_probs = fit_calibrators(probs, CALIBRATORS)
    assert on_probs["fitted"]["ts"].temperature == pytest.approx(
        on_logits["fitted"]["ts"].temperature, rel=1e-9
    )
    a, _ = score_predictions(logits, on_logits, name="m")
    b, _ = score_predictions(probs, on_probs, name="m")
    for calibrator in ("ts", "hist"):
        assert value(b, "test", calibrator, "ece") == pytest.approx(
            value(a, "test", calibrator, "ece"), abs=1e-9
        )


def test_calibrators_that_need_logits_are_refused_on_probabilities(tmp_path):
    probs = load_predictions(write(tmp_path / "p.npz", as_probs(synthetic())))
    with pytest.raises(
        ValueError,
        match=r"'vs' \(vector_scaling\) maps logits, and .*p.npz holds probabilities.*dirichlet",
    ):
        fit_calibrators(probs, {"vs": {"name": "vector_scaling"}})
    logits = load_predictions(write(tmp_path / "z.npz", synthetic()))
    assert (
        fit_calibrators(logits, {"vs": {"name": "vector_scaling"}})["fitted"]["vs"].n_classes == 3
    )


def test_a_bad_calibrator_or_a_failing_fit_names_the_calibrator(tmp_path):
    predictions = load_predictions(write(tmp_path / "z.npz", synthetic()))
    with pytest.raises(ValueError, match="calibrator 'x': unknown calibrator 'nope'"):
        fit_calibrators(predictions, {"x": {"name": "nope"}})
    with pytest.raises(ValueError, match=r"calibrator 'ts': .*t_min"):
        fit_calibrators(predictions, {"ts": {"name": "temperature_nll", "params": {"t_min": 0.0}}})


def test_the_standard_reports_run_on_the_results(tmp_path):
    predictions = load_predictions(write(tmp_path / "model.csv", as_probs(synthetic())))
    fitted = fit_calibrators(predictions, CALIBRATORS, keys=["hist", "ts"])
    assert list(fitted["fitted"]) == ["hist", "ts"]
    metrics, bins = score_predictions(predictions, fitted, 15, [5], name="model")
    results = predictions_results(metrics, bins, fitted)
    summary = standard.summary(results)
    assert summary["summary"].startswith("# model on model.csv")
    assert list(summary["table"]["calibrator"]) == ["hist", "none", "ts"]
    assert list(standard.reliability(results, n_bins=15)) == ["reliability_15_bins"]
    assert (
        predictions_report(metrics, bins, fitted, report="summary")["summary"] == summary["summary"]
    )
    figures = predictions_report(metrics, bins, fitted, [5, 15], report="reliability")
    assert list(figures) == ["reliability_5_bins", "reliability_15_bins"]


def test_calibrators_are_refused_on_another_file(tmp_path):
    first = load_predictions(write(tmp_path / "a.npz", synthetic(seed=0)))
    second = load_predictions(write(tmp_path / "b.npz", synthetic(seed=1)))
    fitted = fit_calibrators(first, CALIBRATORS)
    with pytest.raises(ValueError, match=r"fitted on .*a\.npz .*not on .*b\.npz"):
        score_predictions(second, fitted, name="b")


def test_options_default_to_every_calibrator_and_the_file_stem(tmp_path):
    path = str(write(tmp_path / "resnet 110.npz", synthetic()))
    options = ScoreOptions.from_params({"path": path}, CALIBRATORS)
    assert options == ScoreOptions({"resnet_110": path}, ("ts", "hist"))
    assert options.defaulted and options.val_fraction is None and options.ci_resamples == 1000
    unset = ScoreOptions.from_params(None, CALIBRATORS)
    assert unset.files == {} and unset.names == ["predictions"]
    named = ScoreOptions.from_params(
        {"path": path, "name": "r110", "calibrators": ["hist"]}, CALIBRATORS
    )
    assert (named.names, named.calibrators, named.defaulted) == (["r110"], ("hist",), False)
    assert ScoreOptions.from_params({"calibrators": []}, CALIBRATORS).calibrators == ()


def test_a_glob_or_a_list_scores_several_files_each_named_by_its_stem(tmp_path):
    for stem in ("b", "a"):
        write(tmp_path / f"{stem}.npz", synthetic())
    pattern = str(tmp_path / "*.npz")
    assert ScoreOptions.from_params({"path": pattern}, CALIBRATORS).names == ["a", "b"]
    listed = [str(tmp_path / "b.npz"), str(tmp_path / "a.npz")]
    assert ScoreOptions.from_params({"path": listed}, CALIBRATORS).names == ["b", "a"]
    with pytest.raises(ValueError, match=r"predictions\.name names the outputs of one file"):
        ScoreOptions.from_params({"path": pattern, "name": "x"}, CALIBRATORS)
    (tmp_path / "sub").mkdir()
    twin = write(tmp_path / "sub" / "a.npz", synthetic())
    with pytest.raises(ValueError, match="would both be scored as 'a'"):
        ScoreOptions.from_params({"path": [pattern, str(twin)]}, CALIBRATORS)
    with pytest.raises(ValueError, match=r"no file matches .*\*\.pt"):
        ScoreOptions.from_params({"path": str(tmp_path / "*.pt")}, CALIBRATORS)
    reserved = write(tmp_path / "summary.npz", synthetic())
    with pytest.raises(ValueError, match="'summary', the folder of the table across files"):
        ScoreOptions.from_params({"path": str(reserved)}, CALIBRATORS)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"paht": "x.npz"},
            r"unknown key\(s\) \['paht'\]; valid keys: \['path', 'name', 'calibrators', 'keys'",
        ),
        ({"path": "x.h5"}, "formats are .npz, .pt, .csv"),
        ({"path": "missing.npz"}, "no file at missing.npz"),
        ({"name": "a/b"}, "predictions.name must start"),
        (
            {"calibrators": ["ts", "platt"]},
            r"must name distinct keys of the calibrators parameters \(ts, hist\)",
        ),
        ({"calibrators": ["ts", "ts"]}, "must name distinct keys"),
        ({"calibrators": "ts"}, "must be a list of calibrator keys"),
        ("x.npz", "predictions must be a mapping"),
        ({"val_fraction": 1.0}, r"predictions.val_fraction must be in \(0.0, 1.0\)"),
        ({"split_seed": 0.5}, "predictions.split_seed must be an integer"),
        ({"keys": {"scores": "predictions"}}, r"predictions.keys: unknown name\(s\) \['scores'\]"),
        ({"keys": ["predictions"]}, "predictions.keys must map our names to the file's keys"),
        ({"ci_resamples": 0}, "predictions.ci_resamples must be an integer >= 1"),
        ({"ci_level": 95}, r"predictions.ci_level must be in \(0.0, 1.0\)"),
    ],
)
def test_bad_options_are_refused(entry, message):
    with pytest.raises(ValueError, match=message):
        ScoreOptions.from_params(entry, CALIBRATORS)


def test_scores_of_a_float32_file_are_scored_as_given(tmp_path):
    arrays = {
        k: v.astype(np.float32) if k.endswith("logits") else v for k, v in synthetic().items()
    }
    predictions = load_predictions(write(tmp_path / "f.pt", arrays))
    metrics, _ = score_predictions(predictions, fit_calibrators(predictions, {}), name="f")
    expected = calibration_metrics(torch.as_tensor(arrays["test_logits"]), arrays["test_labels"])[
        "ece"
    ]
    assert value(metrics, "test", "none", "ece") == expected


def scored_file(tmp_path, name, seed, calibrators=CALIBRATORS, **options):
    path = write(tmp_path / f"{name}.npz", netcal_like(n=300, seed=seed))
    predictions = load_predictions(path, keys=NETCAL_KEYS, val_fraction=0.5, **options)
    return predictions, fit_calibrators(predictions, calibrators)


def test_intervals_are_seeded_percentile_bootstraps_around_each_test_value(tmp_path):
    predictions, fitted = scored_file(tmp_path, "c100", seed=0)
    table = score_intervals(predictions, fitted, 10, name="c100", n_resamples=200, seed=1)
    assert set(table["calibrator"]) == {"none", "ts", "hist"}
    assert set(table["metric"]) == {"accuracy", "nll", "brier", "ece"}
    assert (table["low"] <= table["high"]).all() and (table["low"] < table["high"]).any()
    assert set(table["n_test"]) == {predictions.labels["test"].numel()}
    metrics, _ = score_predictions(predictions, fitted, 10, name="c100")
    for row in table.itertuples():
        assert row.value == pytest.approx(value(metrics, "test", row.calibrator, row.metric))
    expected = bootstrap_ci(
        predictions.scores["test"],
        predictions.labels["test"],
        "ece",
        n_resamples=200,
        seed=1,
        inputs="probs",
        n_bins=10,
    )
    none_ece = table.query("calibrator == 'none' and metric == 'ece'").iloc[0]
    assert (none_ece["low"], none_ece["high"]) == (expected["low"], expected["high"])
    again = score_intervals(predictions, fitted, 10, name="c100", n_resamples=200, seed=1)
    pd.testing.assert_frame_equal(table, again)


def test_several_files_give_one_table_with_a_row_block_per_file(tmp_path):
    calibrators = {**CALIBRATORS, "vs": {"name": "vector_scaling"}}
    tables = []
    for seed, name in enumerate(("densenet", "resnet")):
        path = write(tmp_path / f"{name}.npz", netcal_like(n=300, seed=seed))
        predictions = load_predictions(path, keys=NETCAL_KEYS, val_fraction=0.5)
        fitted = fit_calibrators(predictions, calibrators, skip_logit_maps=True)
        assert list(fitted["fitted"]) == ["ts", "hist"]  # vector scaling left out: probabilities
        tables.append(score_intervals(predictions, fitted, name=name, n_resamples=50))
    report = scores_summary(*tables, calibrators=list(calibrators))
    assert report["table"]["name"].unique().tolist() == ["densenet", "resnet"]
    lines = report["summary"].splitlines()
    assert lines[0] == "# Scored predictions: 2 file(s)"
    assert "95% percentile bootstrap interval over the test samples, 50 resamples" in lines[2]
    rows = [line for line in lines if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == 2 * 3  # a block of none, ts, hist per file
    assert rows[0].startswith("| densenet.npz ") and rows[3].startswith("| resnet")
    assert rows[1].startswith("|  ")  # the file's cells are given once per block
    accuracy = tables[0].query("calibrator == 'none' and metric == 'accuracy'").iloc[0]
    cell = (
        f"{accuracy['value'] * 100:.2f} [{accuracy['low'] * 100:.2f}, {accuracy['high'] * 100:.2f}]"
    )
    assert cell in rows[0]
    assert (
        "- resnet (resnet.npz): probs, val fraction 0.5 of 300, stratified by class, seed 0; "
        "not fitted (they map logits, the file holds probabilities): vs" in lines
    )


def test_a_calibrator_asked_for_by_name_that_needs_logits_is_still_refused(tmp_path):
    path = write(tmp_path / "p.npz", netcal_like())
    predictions = load_predictions(path, keys=NETCAL_KEYS, val_fraction=0.5)
    with pytest.raises(ValueError, match=r"'vs' \(vector_scaling\) maps logits"):
        fit_calibrators(predictions, {"vs": {"name": "vector_scaling"}})


def test_an_infinite_value_is_said_so_not_given_an_interval(tmp_path):
    predictions, fitted = scored_file(tmp_path, "c10", seed=0)
    table = score_intervals(predictions, fitted, name="renamed", n_resamples=20)
    table.loc[table["metric"] == "nll", ["value", "low", "high"]] = [np.inf, 1.0, np.nan]
    summary = scores_summary(table)["summary"]
    assert "inf (a test label at probability 0)" in summary
    assert "| renamed (c10.npz) |" in summary  # an output name other than the stem is shown
