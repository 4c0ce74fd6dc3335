"""`kedro run --pipelines=score --params=predictions.path=<file>` as a user runs it, on a small
file of each format: the metrics table, the reports, MLflow, and a run without a file."""

from __future__ import annotations

import mlflow
import pandas as pd
import pytest

from calib_pipeline.calibration.metrics import calibration_metrics
from tests.data.test_predictions import as_probs, netcal_like, synthetic, write
from tests.test_end_to_end import kedro, versions

pytestmark = pytest.mark.slow


def latest(folder):
    found = versions(folder)
    assert len(found) == 1, f"{folder} holds versions {found}"
    return folder / found[0]


# MLflow tracks one of them: it costs seconds a run
@pytest.mark.parametrize(
    ("file_name", "kind", "tracked"),
    [("logits.npz", "logits", True), ("probs.pt", "probs", False), ("probs.csv", "probs", False)],
)
def test_scoring_a_file_writes_its_metrics_and_reports(
    tmp_path, monkeypatch, file_name, kind, tracked
):
    if not tracked:
        monkeypatch.setenv("CALIB_MLFLOW", "off")
    arrays = synthetic(n=200) if kind == "logits" else as_probs(synthetic(n=200))
    path = write(tmp_path / file_name, arrays)
    data_dir, tracking = tmp_path / "data", f"sqlite:///{tmp_path}/mlflow.db"
    kedro(
        "--pipelines=score",
        f"--params=predictions.path={path}",
        data_dir=data_dir,
        tracking=tracking,
    )
    out = data_dir / "08_reporting" / "score" / path.stem
    metrics = pd.read_parquet(latest(out / "metrics.parquet") / "metrics.parquet")
    # conf/base: every configured calibrator, evaluation.n_bins 15
    # vector scaling and pts map logits: the default set leaves them out on probabilities
    assert set(metrics["calibrator"]) == {
        "none",
        "ts",
        "ts_grid_mukhoti",
        "ts_grid_wang",
        "ts_sb_ece",
        "ts_fixed",
        "hist_binning",
        "isotonic",
        "dirichlet_cv",
        "ets",
        "irm",
        "spline",
        "bbq",
        "svs",
        "sms",
        *(["vector_scaling", "pts"] if kind == "logits" else []),
    }
    expected = calibration_metrics(
        arrays[f"test_{kind}"], arrays["test_labels"], n_bins=15, inputs=kind
    )
    uncalibrated = metrics.query("split == 'test' and calibrator == 'none'").set_index("metric")[
        "value"
    ]
    assert uncalibrated["ece"] == expected["ece"] and uncalibrated["nll"] == expected["nll"]
    summary = (latest(out / "summary") / "summary" / "summary.md").read_text()
    assert summary.startswith(f"# {path.stem} on {file_name}")
    assert (
        latest(out / "reliability") / "reliability" / "reliability_15_bins.png"
    ).stat().st_size > 10_000
    assert (latest(out / "calibrators.pt") / "calibrators.pt").is_file()
    assert (latest(out / "reliability_bins.parquet") / "reliability_bins.parquet").is_file()
    if tracked:
        client = mlflow.MlflowClient(tracking_uri=tracking)
        (run,) = client.search_runs([client.get_experiment_by_name("calib-pipeline").experiment_id])
        assert run.info.status == "FINISHED"
        logged = {a.path for a in client.list_artifacts(run.info.run_id, "score")}
        expected = ("metrics.csv", "report_summary", "report_reliability")
        assert logged >= {f"score/{path.stem}.{artifact}" for artifact in expected}


def test_several_one_split_files_are_scored_into_one_table_tracked_in_mlflow(tmp_path):
    """netcal's CIFAR records hold one split (``predictions``, ``ground_truth``); files of
    that layout, synthesised here, scored in one run through a glob and a key mapping."""
    for seed, stem in enumerate(("densenet-40_c100", "wrn-16-4_c100")):
        write(tmp_path / f"{stem}.npz", netcal_like(n=300, k=4, seed=seed))
    data_dir, tracking = tmp_path / "data", f"sqlite:///{tmp_path}/mlflow.db"
    result = kedro(
        "--pipelines=score",
        f"--params=predictions.path={tmp_path}/*_c100.npz,predictions.keys.probs=predictions,"
        "predictions.keys.labels=ground_truth,predictions.val_fraction=0.5,"
        "predictions.ci_resamples=100",
        data_dir=data_dir,
        tracking=tracking,
    )
    files = "densenet-40_c100.npz, wrn-16-4_c100.npz"
    assert f"(scoring {files}; score: val fraction 0.5, stratified, seed 0)" in result.stdout
    assert "densenet-40_c100.npz: 4 classes, probabilities, val " in result.stdout
    assert "dataset digits" not in result.stdout
    summary = latest(data_dir / "08_reporting" / "score" / "summary") / "summary"
    text = (summary / "summary.md").read_text()
    assert text.startswith("# Scored predictions: 2 file(s)")
    table = pd.read_csv(summary / "table.csv")
    assert table["name"].unique().tolist() == ["densenet-40_c100", "wrn-16-4_c100"]
    bounded = table.dropna(subset=["low", "high"])  # an infinite NLL has no interval
    assert len(bounded) and (bounded["low"] <= bounded["high"]).all()
    assert set(table["n_resamples"]) == {100}
    client = mlflow.MlflowClient(tracking_uri=tracking)
    (run,) = client.search_runs([client.get_experiment_by_name("calib-pipeline").experiment_id])
    tags, metrics = run.data.tags, run.data.metrics
    assert tags["dataset"] == "densenet-40_c100.npz,wrn-16-4_c100.npz"
    assert tags["protocol"] == "score: val fraction 0.5, stratified, seed 0"
    assert tags["score.wrn-16-4_c100"].startswith("wrn-16-4_c100.npz: 4 classes, probabilities")
    ece = table.query("name == 'wrn-16-4_c100' and calibrator == 'ts' and metric == 'ece'")
    assert metrics["score.wrn-16-4_c100.test.ece.ts"] == pytest.approx(ece["value"].iloc[0])
    assert metrics["score.wrn-16-4_c100.test.ece.ts.ci_low"] == pytest.approx(ece["low"].iloc[0])
    assert "score.densenet-40_c100.val.nll.dirichlet_cv" in metrics


def test_without_a_file_the_run_says_how_to_give_one(tmp_path, monkeypatch):
    monkeypatch.setenv("CALIB_MLFLOW", "off")
    result = kedro("--pipelines=score", data_dir=tmp_path, tracking="", check=False)
    assert result.returncode != 0
    assert "no predictions file given" in result.stdout + result.stderr
    assert not (tmp_path / "08_reporting").exists()
