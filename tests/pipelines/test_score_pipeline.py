"""The score pipeline on a catalog of the project's dataset classes in a temporary folder,
its registration, and the predictions dataset."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from kedro.io import DataCatalog, MemoryDataset
from kedro.io.core import DatasetError
from kedro.runner import SequentialRunner
from kedro_datasets.pandas import ParquetDataset

from calib_pipeline import pipeline_registry
from calib_pipeline.calibration.metrics import calibration_metrics
from calib_pipeline.hooks import SessionConfigHook
from calib_pipeline.kedro_datasets import CalibratorsDataset, PredictionsDataset, ReportDataset
from calib_pipeline.pipelines import score
from tests.crafted import MarkerPayload
from tests.data.test_predictions import NETCAL_KEYS, as_probs, netcal_like, synthetic, write
from tests.pipelines.test_study_pipeline import PARAMETERS

CALIBRATORS = {"ts": {"name": "temperature_nll"}, "hist": {"name": "histogram_binning"}}
# as params:evaluation.<key>
EVALUATION = {"n_bins": 10, "reliability_bins": [10, 5], "metrics": []}


def catalog(tmp_path, path, *names):
    """The project's dataset classes for the score pipeline of ``names`` (the file outputs
    under ``out/<name>/``, the table across files under ``out/summary``)."""
    datasets = {
        "params:calibrators": MemoryDataset(CALIBRATORS),
        **{f"params:evaluation.{key}": MemoryDataset(value) for key, value in EVALUATION.items()},
        "score.summary": ReportDataset(filepath=str(tmp_path / "out" / "summary")),
    }
    for name in names:
        out = tmp_path / "out" / name
        datasets |= {
            f"score.{name}.file": PredictionsDataset(filepath=path, name=name),
            f"score.{name}.calibrators": CalibratorsDataset(filepath=str(out / "calibrators.pt")),
            f"score.{name}.metrics": ParquetDataset(filepath=str(out / "metrics.parquet")),
            f"score.{name}.reliability_bins": ParquetDataset(filepath=str(out / "bins.parquet")),
            f"score.{name}.intervals": ParquetDataset(filepath=str(out / "intervals.parquet")),
        }
        for report in ("summary", "reliability"):
            datasets[f"score.{name}.report_{report}"] = ReportDataset(filepath=str(out / report))
    return DataCatalog(datasets=datasets)


def test_the_pipeline_scores_a_file_and_writes_its_reports(tmp_path):
    arrays = as_probs(synthetic(n=150))
    path = write(tmp_path / "my model.csv", arrays)
    parameters = {
        "calibrators": CALIBRATORS,
        "predictions": {"path": str(path), "calibrators": ["ts"], "ci_resamples": 20},
    }
    pipeline = score.create_pipeline(parameters)
    assert {n.name for n in pipeline.nodes} == {
        "score.my_model.prepare",
        "score.my_model.fit_calibrators",
        "score.my_model.evaluate",
        "score.my_model.intervals",
        "score.my_model.report_summary",
        "score.my_model.report_reliability",
        "score.summary",
    }
    data = catalog(tmp_path, str(path), "my_model")
    SequentialRunner().run(pipeline, data)
    metrics = data.load("score.my_model.metrics")
    assert set(metrics["calibrator"]) == {"none", "ts"}
    ece = metrics.query("split == 'test' and calibrator == 'none' and metric == 'ece'")["value"]
    assert ece.tolist() == [
        calibration_metrics(arrays["test_probs"], arrays["test_labels"], n_bins=10, inputs="probs")[
            "ece"
        ]
    ]
    stored = data.load("score.my_model.calibrators")
    assert list(stored["fitted"]) == ["ts"] and stored["provenance"]["inputs"] == "probs"
    assert data.load("score.my_model.report_summary")["summary"].startswith(
        "# my_model on my model.csv"
    )
    assert set(data.load("score.my_model.report_reliability")) == {
        "reliability_5_bins",
        "reliability_10_bins",
    }
    assert data.load("score.summary")["summary"].startswith("# Scored predictions: 1 file(s)")


def test_several_one_split_files_in_one_run_give_one_table(tmp_path):
    for seed, name in enumerate(("wrn_c100", "densenet_c100")):
        write(tmp_path / f"{name}.npz", netcal_like(n=200, seed=seed))
    pattern = str(tmp_path / "*_c100.npz")
    parameters = {
        "calibrators": CALIBRATORS,
        "predictions": {
            "path": pattern,
            "keys": NETCAL_KEYS,
            "val_fraction": 0.5,
            "ci_resamples": 20,
        },
    }
    data = catalog(tmp_path, pattern, "densenet_c100", "wrn_c100")
    SequentialRunner().run(score.create_pipeline(parameters), data)
    summary = data.load("score.summary")
    assert summary["summary"].startswith("# Scored predictions: 2 file(s)")
    table = summary["table"]
    assert table["name"].unique().tolist() == ["densenet_c100", "wrn_c100"]
    assert set(table["calibrator"]) == {"none", "ts", "hist"}
    assert set(table["n_val"] + table["n_test"]) == {200}
    assert set(abs(table["n_val"] - 100)) <= {0, 1, 2}  # each class split 1:1, up to rounding
    for name in ("densenet_c100", "wrn_c100"):
        metrics = data.load(f"score.{name}.metrics")
        assert set(metrics["dataset"]) == {f"{name}.npz"}


def test_calibrators_asked_for_that_need_logits_fail_the_run_on_probabilities(tmp_path):
    path = write(tmp_path / "p.npz", as_probs(synthetic()))
    parameters = {
        "calibrators": {"vs": {"name": "vector_scaling"}},
        "predictions": {"path": str(path), "calibrators": ["vs"]},
    }
    data = catalog(tmp_path, str(path), "p")
    data["params:calibrators"] = MemoryDataset(parameters["calibrators"])
    with pytest.raises(ValueError, match="'vs' \\(vector_scaling\\) maps logits"):
        SequentialRunner().run(score.create_pipeline(parameters), data)
    assert not (tmp_path / "out" / "p").exists(), "nothing is written when the fit is refused"


def test_the_default_set_leaves_out_calibrators_that_need_logits_and_says_so(tmp_path, caplog):
    path = write(tmp_path / "p.npz", as_probs(synthetic()))
    calibrators = {"ts": {"name": "temperature_nll"}, "vs": {"name": "vector_scaling"}}
    parameters = {"calibrators": calibrators, "predictions": {"path": str(path), "ci_resamples": 5}}
    data = catalog(tmp_path, str(path), "p")
    data["params:calibrators"] = MemoryDataset(calibrators)
    SequentialRunner().run(score.create_pipeline(parameters), data)
    assert set(data.load("score.p.metrics")["calibrator"]) == {"none", "ts"}
    assert "vs (vector_scaling) maps logits and is not fitted" in caplog.text
    assert (
        "not fitted (they map logits, the file holds probabilities): vs"
        in (data.load("score.summary")["summary"])
    )


def test_the_predictions_dataset_reads_the_file_or_says_how_to_give_one(tmp_path):
    path = write(tmp_path / "z.pt", synthetic())
    assert sorted(PredictionsDataset(filepath=str(path)).load().arrays) == sorted(synthetic())
    assert PredictionsDataset(filepath=str(path)).exists()
    write(tmp_path / "y.pt", synthetic())
    pattern = str(tmp_path / "*.pt")
    assert PredictionsDataset(filepath=pattern, name="y").load().source == str(tmp_path / "y.pt")
    with pytest.raises(DatasetError, match="holds no file scored as 'x'"):
        PredictionsDataset(filepath=pattern, name="x").load()
    unset = PredictionsDataset(filepath=None)
    assert not unset.exists()
    with pytest.raises(
        DatasetError,
        match=r"no predictions file given: kedro run --pipelines=score --params=predictions\.path=",
    ):
        unset.load()
    with pytest.raises(DatasetError, match="read-only"):
        unset.save({})


def registered(monkeypatch, **changes):
    monkeypatch.setattr(pipeline_registry, "SESSION_CONFIG", SessionConfigHook())  # no session yet
    real, env = pipeline_registry.session_config()  # the local env's files

    class Loader(dict):
        conf_source = real.conf_source

    loader = Loader(parameters={**PARAMETERS, **changes}, globals=real["globals"])
    monkeypatch.setattr(pipeline_registry, "session_config", lambda: (loader, env))
    return pipeline_registry.register_pipelines()


def test_score_is_registered_by_name_and_never_runs_by_default(monkeypatch, tmp_path):
    pipelines = registered(monkeypatch)
    assert "score" in pipelines
    assert not set(pipelines["score"].nodes) & set(pipelines["__default__"].nodes)
    assert "score.predictions.metrics" in pipelines["score"].all_outputs()
    assert "score.summary" in pipelines["score"].all_outputs()
    path = write(tmp_path / "resnet.npz", synthetic())
    named = registered(monkeypatch, predictions={"path": str(path)}, calibrators=CALIBRATORS)
    assert "score.resnet.metrics" in named["score"].all_outputs()


def test_bad_predictions_parameters_fail_when_the_pipelines_are_built(monkeypatch):
    with pytest.raises(
        ValueError, match=r"predictions.calibrators \['platt'\] must name distinct keys"
    ):
        registered(monkeypatch, predictions={"calibrators": ["platt"]})
    with pytest.raises(ValueError, match=r"predictions\.path: no file at missing\.npz"):
        registered(monkeypatch, predictions={"path": "missing.npz"})
    studies = {"score": PARAMETERS["studies"]["mini"]}
    with pytest.raises(ValueError, match="no study may be named 'score'"):
        registered(monkeypatch, studies=studies)


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
@pytest.mark.parametrize("suffix", [".pt", ".npz"])
def test_a_crafted_predictions_file_is_refused_and_runs_no_code(tmp_path, suffix):
    marker = tmp_path / "ran"
    path = tmp_path / f"crafted{suffix}"
    if suffix == ".pt":
        torch.save({"val_logits": MarkerPayload(str(marker))}, path)
    else:
        np.savez(path, val_logits=np.array([MarkerPayload(str(marker))], dtype=object))
    with pytest.raises(DatasetError, match=f"predictions file {path}"):
        PredictionsDataset(filepath=str(path)).load()
    path.write_bytes(pickle.dumps({"val_logits": MarkerPayload(str(marker))}))
    with pytest.raises(DatasetError, match=f"predictions file {path}"):
        PredictionsDataset(filepath=str(path)).load()
    assert not marker.exists(), "loading a predictions file ran code from it"
