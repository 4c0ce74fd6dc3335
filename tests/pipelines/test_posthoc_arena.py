"""The posthoc_arena pipeline on stored runs in a temporary folder: it reads every run's
newest logits, whichever studies wrote them, ranks the calibrators, refuses an empty store
and logits of another protocol; its registration; and one `kedro run` after a study."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import mlflow
import pandas as pd
import pytest
import torch
from kedro.io import DataCatalog, MemoryDataset
from kedro.io.core import Version
from kedro.runner import SequentialRunner
from kedro_datasets.pandas import ParquetDataset

from calib_pipeline import pipeline_registry
from calib_pipeline.hooks import SessionConfigHook
from calib_pipeline.kedro_datasets import (
    PredictionsDataset,
    ReportDataset,
    RunLogitsStoreDataset,
    TorchDataset,
)
from calib_pipeline.pipelines import posthoc_arena
from calib_pipeline.pipelines.provenance import ProvenanceError
from calib_pipeline.pipelines.run_info import run_info
from calib_pipeline.reports.arena import NoPredictionSetsError
from calib_pipeline.settings import config_loader, project_root
from tests.data.test_predictions import as_probs, synthetic, write

PARAMETERS = {
    "posthoc_arena": {
        "calibrators": ["ts", "histogram_binning"],
        "metrics": ["nll", "brier", "ece"],
        "shifted": True,
        "ci_resamples": 50,
    },
    "calibrators": {"ts": {"name": "temperature_nll"}},
}


def stored_logits(seed: int, scale: float, protocol: str = "test") -> dict:
    generator = torch.Generator().manual_seed(seed)
    true = 3.0 * torch.randn(400, 3, generator=generator)
    labels = torch.multinomial(torch.softmax(true, 1), 1, generator=generator).squeeze(1)
    part = {"logits": scale * true[:200], "labels": labels[:200]}
    test = {"logits": scale * true[200:], "labels": labels[200:]}
    return {
        "val": part,
        "test": test,
        "provenance": {"protocol": protocol, "env": "test", "run_id": "r0"},
    }


def store(root: Path, run: str, artifact: str, data: dict, version: str) -> None:
    method, seed = run.split(".")
    path = root / method / seed / f"{artifact}.pt"
    TorchDataset(filepath=path.as_posix(), version=Version(None, version)).save(data)


def run_arena(
    root: Path, out: Path, parameters: dict = PARAMETERS, files: dict | None = None
) -> dict:
    catalog = DataCatalog(
        {
            **(files or {}),
            "stored_run_logits": RunLogitsStoreDataset(path=str(root)),
            "run_info": MemoryDataset(run_info("r", "test", "test")),
            "params:evaluation.n_bins": MemoryDataset(10),
            "posthoc_arena.scores": ParquetDataset(filepath=str(out.parent / "scores.parquet")),
            "posthoc_arena.report": ReportDataset(filepath=str(out)),
        }
    )
    SequentialRunner().run(posthoc_arena.create_pipeline(parameters), catalog)
    return {"scores": pd.read_parquet(out.parent / "scores.parquet")}


def test_the_arena_ranks_every_stored_runs_newest_logits(tmp_path):
    root = tmp_path / "07_model_output" / "test"
    store(root, "ce.seed_0", "logits", stored_logits(0, 1.0), "2026-01-01T00.00.00.000Z")
    store(root, "ce.seed_0", "logits", stored_logits(0, 3.0), "2026-01-02T00.00.00.000Z")
    store(root, "focal.seed_1", "logits", stored_logits(1, 3.0), "2026-01-01T00.00.00.000Z")
    shifted = {"sets": {"noise_5": {**stored_logits(1, 3.0)["test"], "split": "test"}}}
    store(root, "focal.seed_1", "shift_logits", shifted, "2026-01-01T00.00.00.000Z")
    (root / "other" / "seed_0" / "logits.pt").mkdir(parents=True)  # no version: no run
    scores = run_arena(root, tmp_path / "out")["scores"]
    assert set(scores["set"]) == {"ce.seed_0", "focal.seed_1", "focal.seed_1/noise_5"}
    assert set(scores["method"]) == {"ce", "focal"}
    newest = scores[(scores["set"] == "ce.seed_0") & (scores["calibrator"] == "ts")]
    assert (newest.set_index("metric").loc["nll", "phi"]) > 0.1, "the x3 version was read"
    folder = tmp_path / "out"
    for name in ("leaderboard.csv", "leaderboard.tex", "pairwise.md", "by_method.csv"):
        assert (folder / name).is_file(), name
    assert (folder / "leaderboard_figure.png").is_file()
    board = pd.read_csv(folder / "leaderboard.csv")
    assert board["calibrator"].iloc[0] == "ts" and set(board["n_sets"]) == {3}


def test_a_predictions_file_enters_as_a_run_of_its_own(tmp_path):
    root = tmp_path / "store"
    store(root, "ce.seed_0", "logits", stored_logits(0, 3.0), "2026-01-01T00.00.00.000Z")
    path = write(tmp_path / "mine.npz", as_probs(synthetic(n=200)))
    parameters = {**PARAMETERS, "predictions": {"path": str(path)}}
    parameters["posthoc_arena"] = {**PARAMETERS["posthoc_arena"], "calibrators": ["ts", "vs"]}
    parameters["calibrators"] = {**PARAMETERS["calibrators"], "vs": {"name": "vector_scaling"}}
    file = {"score.mine.file": PredictionsDataset(filepath=str(path), name="mine")}
    scores = run_arena(root, tmp_path / "out", parameters, file)["scores"]
    assert set(scores["set"]) == {"ce.seed_0", "score.mine"}
    status = scores.drop_duplicates(["set", "calibrator"]).set_index(["set", "calibrator"])
    assert status.loc[("score.mine", "vs"), "status"] == "not applicable", "probabilities"
    assert status.loc[("ce.seed_0", "vs"), "status"] == "ok"


def test_an_empty_store_is_refused_saying_what_to_run(tmp_path):
    with pytest.raises(NoPredictionSetsError, match="Run a study first"):
        run_arena(tmp_path / "nothing", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_logits_of_another_protocol_are_refused(tmp_path):
    root = tmp_path / "store"
    store(root, "ce.seed_0", "logits", stored_logits(0, 3.0, "cifar10"), "2026-01-01T00.00.00.000Z")
    with pytest.raises(ProvenanceError, match="cifar10"):
        run_arena(root, tmp_path / "out")


def test_a_bad_calibrator_is_refused_when_the_pipeline_is_built():
    with pytest.raises(ValueError, match="'nope' is neither a key"):
        posthoc_arena.create_pipeline({"posthoc_arena": {"calibrators": ["nope"]}})


def test_it_runs_by_name_only_after_any_studies():
    session = SessionConfigHook()
    loader = config_loader("test", project_root())
    session.after_context_created(SimpleNamespace(config_loader=loader, env="test"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline_registry, "SESSION_CONFIG", session)
        pipelines = pipeline_registry.register_pipelines()
    arena = pipelines["posthoc_arena"]
    assert {n.name for n in arena.nodes} == {"posthoc_arena.score", "posthoc_arena.report"}
    assert arena.inputs() == {"stored_run_logits", "run_info", "params:evaluation.n_bins"}
    assert not {n.name for n in pipelines["__default__"].nodes} & {"posthoc_arena.score"}


PROJECT = Path(__file__).resolve().parents[2]


def kedro_run(pipeline: str, data_dir: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "DO_NOT_TRACK": "1",
        "KEDRO_DISABLE_TELEMETRY": "true",
        "CALIB_DATA_DIR": str(data_dir),
        "MLFLOW_TRACKING_URI": f"sqlite:///{data_dir}/mlflow.db",
        "PYTHONWARNINGS": "ignore",
    }
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "kedro"),
            "run",
            "--env=test",
            f"--pipelines={pipeline}",
        ],
        cwd=PROJECT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.slow
def test_kedro_run_posthoc_arena_after_a_study(tmp_path):
    refused = kedro_run("posthoc_arena", tmp_path)
    assert refused.returncode != 0
    assert "no prediction sets for the calibrator arena" in refused.stdout + refused.stderr
    assert kedro_run("baseline", tmp_path).returncode == 0
    result = kedro_run("posthoc_arena", tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    reports = tmp_path / "08_reporting" / "test" / "posthoc_arena" / "report"
    (version,) = list(reports.iterdir())
    board = pd.read_csv(reports / version / "report" / "leaderboard.csv")
    assert set(board["n_sets"]) == {9}, "3 runs, each with its clean and 2 shifted test sets"
    assert {"none", "ts", "vector_scaling"} <= set(board["calibrator"])
    assert "posthoc_arena" in (tmp_path / "08_reporting" / "test" / "LATEST.md").read_text()
    client = mlflow.tracking.MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    (parent,) = client.search_runs(
        [experiment.experiment_id for experiment in client.search_experiments()],
        "tags.mlflow.runName = 'posthoc_arena [test]' and attributes.status = 'FINISHED'",
    )
    logged = [a.path for a in client.list_artifacts(parent.info.run_id, "posthoc_arena/report")]
    assert "posthoc_arena/report/leaderboard.csv" in logged
