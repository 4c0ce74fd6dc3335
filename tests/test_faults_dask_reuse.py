"""The fault suite, a reused training on the Dask runner with MLflow on: the Dask run that
finds every training finished tracks each as the sequential runner does (its worker-made
nested runs get the same params and final metrics, tagged ``calib.training = reused``, and
are then folded into the training's nested run: one row per training); it once turned
tracking off (the worker's recorder lacked ``set_tag``) and left the nested runs without
params."""

from __future__ import annotations

import mlflow
import pytest
from mlflow.entities import ViewType

from tests.test_end_to_end import kedro
from tests.test_runner import DASK

pytestmark = pytest.mark.slow


def children_by_parent(tracking: str, view: int) -> dict[str, dict[str, object]]:
    """Each parent run's id -> its nested runs (active or deleted: ``view``) by method."""
    client = mlflow.MlflowClient(tracking_uri=tracking)
    experiment = client.get_experiment_by_name("calib-pipeline").experiment_id
    found: dict[str, dict[str, object]] = {}
    for run in client.search_runs([experiment], run_view_type=view):
        parent = run.data.tags.get("mlflow.parentRunId")
        if parent:
            found.setdefault(parent, {})[run.data.tags["method"]] = run
    return found


def test_a_dask_run_reusing_every_training_tracks_it_as_the_sequential_run(tmp_path):
    data_dir, tracking = tmp_path / "data", f"sqlite:///{tmp_path}/m.db"
    kedro("--pipelines=baseline", data_dir=data_dir, tracking=tracking)  # trains
    result = kedro("--pipelines=baseline", *DASK, data_dir=data_dir, tracking=tracking)
    output = result.stdout + result.stderr
    assert "turned off" not in output and "set_tag" not in output, output[-2000:]

    (sequential,) = children_by_parent(tracking, ViewType.ACTIVE_ONLY).values()
    ((dask_parent, dask),) = children_by_parent(tracking, ViewType.DELETED_ONLY).items()
    assert sorted(dask) == sorted(sequential) == ["ce", "focal_gamma_3", "ls_epsilon_0p05"]
    for method, reused in dask.items():
        trained = sequential[method]
        assert trained.data.tags["calib.reused_by"] == dask_parent, "one row per training"
        assert reused.info.status == "FINISHED"
        assert reused.data.params == trained.data.params and len(reused.data.params) > 20
        assert reused.data.tags["calib.training"] == "reused"
        assert "calib.training" not in trained.data.tags
        final = {
            k: v
            for k, v in trained.data.metrics.items()
            if k.startswith("final_") and "seconds" not in k
        }
        assert final and all(reused.data.metrics[k] == v for k, v in final.items())
