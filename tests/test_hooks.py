"""MLflow tracking never costs a result: guarded hook bodies, logging after the outputs are
saved, masked credentials, and runs of dead processes ended KILLED; and the hook's copy for
a Dask worker (nested runs under the driver's parent run)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import mlflow
import pandas as pd
import pytest

from calib_pipeline.hooks import MlflowTrackingHook, mask_credentials


class RecordingClient:
    """A stand-in for MlflowClient that records calls and can fail on one method."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.calls: list[tuple[str, tuple]] = []
        self.fail_on = fail_on
        self.runs = 0

    def __getattr__(self, name):
        def call(*args, **kwargs):
            self.calls.append((name, args))
            if name == self.fail_on:
                raise ConnectionError("http://bob:hunter2@tracking:5000 refused")
            if name == "create_run":
                self.runs += 1
                return SimpleNamespace(info=SimpleNamespace(run_id=f"run{self.runs}"))
            return None

        return call


def training_node():
    return SimpleNamespace(name="ce.train_seed_0", namespace="ce", tags={"training"})


def started_hook(client: RecordingClient) -> MlflowTrackingHook:
    hook = MlflowTrackingHook()
    hook._client, hook._parent, hook._experiment_id = client, "parent", "0"
    return hook


OUTPUTS = {
    "ce.seed_0.checkpoint": {"method": "ce", "seed": 0, "selected_epoch": 2, "config": {"lr": 0.1}},
    "ce.seed_0.history": pd.DataFrame({"epoch": [1, 2], "seed": [0, 0], "val_accuracy": [0.5, 0.9]}),
}


def test_a_training_run_is_logged_only_after_all_its_outputs_are_saved():
    client = RecordingClient()
    hook = started_hook(client)
    node = training_node()
    hook.before_node_run(node=node, catalog=None, inputs={})
    assert [c[0] for c in client.calls] == ["create_run"], "the nested run opens when training starts"
    hook.after_node_run(node=node, catalog=None, inputs={"params:training": {"lr": 0.1}}, outputs=OUTPUTS)
    hook.after_dataset_saved(dataset_name="ce.seed_0.checkpoint", data=None, node=node)
    assert [c[0] for c in client.calls] == ["create_run"], "nothing is logged before every output is saved"
    hook.after_dataset_saved(dataset_name="ce.seed_0.history", data=None, node=node)
    names = [c[0] for c in client.calls]
    assert names[-1] == "set_terminated" and client.calls[-1][1] == ("run1", "FINISHED")
    assert "log_batch" in names


def test_a_tracking_failure_is_one_warning_and_never_raises(caplog):
    client = RecordingClient(fail_on="log_batch")
    hook = started_hook(client)
    node = training_node()
    with caplog.at_level(logging.WARNING, logger="calib_pipeline.hooks"):
        hook.before_node_run(node=node, catalog=None, inputs={})
        hook.after_node_run(node=node, catalog=None, inputs={}, outputs=OUTPUTS)
        for name in OUTPUTS:
            hook.after_dataset_saved(dataset_name=name, data=None, node=node)
        hook.after_pipeline_run(run_params={}, run_result={}, pipeline=None, catalog=None)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "CALIB_MLFLOW=off" in warnings[0] and "ConnectionError" in warnings[0]
    assert "hunter2" not in warnings[0], "credentials are masked"
    assert hook._client is None, "tracking is off for the rest of the run"


def worker_copy(hook: MlflowTrackingHook) -> MlflowTrackingHook:
    """The hook as a Dask worker receives it."""
    import pickle

    return pickle.loads(pickle.dumps(hook.for_worker()))


def test_a_worker_records_its_nested_run_and_the_driver_writes_it_to_sqlite(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    driver = MlflowTrackingHook()
    driver._project_path, driver._config, driver._env = tmp_path, {}, "test"
    driver._start({"pipeline_names": ["baseline"], "run_id": "x"}, catalog=None, uri=uri)
    worker, node = worker_copy(driver), training_node()
    worker.before_node_run(node=node, catalog=None, inputs={})
    worker.after_node_run(node=node, catalog=None, inputs={"params:training": {"lr": 0.1}}, outputs=OUTPUTS)
    for name in OUTPUTS:
        worker.after_dataset_saved(dataset_name=name, data=None, node=node)
    report = worker.worker_report()
    client = mlflow.MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("calib-pipeline").experiment_id
    assert len(client.search_runs([experiment])) == 1, "the worker never writes to the SQLite file"
    driver.merge_worker_report(report)
    child = next(r for r in client.search_runs([experiment]) if r.info.run_id != driver._parent)
    assert child.data.tags["mlflow.parentRunId"] == driver._parent and child.info.status == "FINISHED"
    assert child.info.run_name == "ce seed 0" and child.data.params["training.lr"] == "0.1"
    assert [m.value for m in client.get_metric_history(child.info.run_id, "val_accuracy")] == [0.5, 0.9]
    assert child.info.start_time <= child.info.end_time <= int(time.time() * 1000), "the worker's times"


def test_the_nested_run_of_a_node_that_failed_in_a_worker_ends_failed(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    driver = MlflowTrackingHook()
    driver._project_path, driver._config, driver._env = tmp_path, {}, "test"
    driver._start({"pipeline_names": ["baseline"], "run_id": "x"}, catalog=None, uri=uri)
    worker = worker_copy(driver)
    worker.before_node_run(node=training_node(), catalog=None, inputs={})  # then the node raised
    driver.merge_worker_report(worker.worker_report())
    client = mlflow.MlflowClient(tracking_uri=uri)
    children = client.search_runs([driver._experiment_id], filter_string=f"tags.mlflow.parentRunId = '{driver._parent}'")
    assert [c.info.status for c in children] == ["FAILED"]


def test_a_worker_writes_to_a_tracking_server_itself(monkeypatch):
    server = RecordingClient()
    monkeypatch.setattr("mlflow.tracking.MlflowClient", lambda tracking_uri: server)
    driver = started_hook(RecordingClient())
    driver._uri = "https://tracking.example:5000"
    worker, node = worker_copy(driver), training_node()
    worker.before_node_run(node=node, catalog=None, inputs={})
    worker.after_node_run(node=node, catalog=None, inputs={}, outputs=OUTPUTS)
    for name in OUTPUTS:
        worker.after_dataset_saved(dataset_name=name, data=None, node=node)
    assert worker.worker_report() is None, "nothing left for the driver to write"
    assert [c[0] for c in server.calls][0] == "create_run" and server.calls[-1] == ("set_terminated", ("run1", "FINISHED"))
    assert server.calls[0][1][0] == "0", "under the driver's experiment"


def test_no_worker_copy_while_tracking_is_off():
    assert MlflowTrackingHook().for_worker() is None


def test_credentials_are_masked_in_any_uri():
    text = "sqlite:///db and http://user:pa:ss@host:5000/api, https://a:b@c/x"
    assert mask_credentials(text) == "sqlite:///db and http://***@host:5000/api, https://***@c/x"


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_runs_of_a_dead_process_end_killed_on_the_next_start(tmp_path):
    import socket

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = mlflow.MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("calib-pipeline")
    host = socket.gethostname()
    orphan = client.create_run(experiment, tags={"calib.host": host, "calib.pid": str(dead_pid())}).info.run_id
    alive = client.create_run(experiment, tags={"calib.host": host, "calib.pid": str(os.getpid())}).info.run_id
    elsewhere = client.create_run(experiment, tags={"calib.host": "other-host", "calib.pid": "1"}).info.run_id
    hook = MlflowTrackingHook()
    hook._project_path, hook._config, hook._env = tmp_path, {}, "test"
    hook._start({"pipeline_names": ["baseline"], "run_id": "x"}, catalog=None, uri=uri)
    assert client.get_run(orphan).info.status == "KILLED"
    assert client.get_run(alive).info.status == "RUNNING", "a live process keeps its run"
    assert client.get_run(elsewhere).info.status == "RUNNING", "another host's runs are not ours to judge"
    parent = client.get_run(hook._parent)
    assert parent.data.tags["kedro.env"] == "test" and parent.info.status == "RUNNING"
    hook._end_at_exit()  # what atexit does after Ctrl-C
    assert client.get_run(parent.info.run_id).info.status == "KILLED"


@pytest.mark.parametrize("as_recorded", [lambda runner: runner, str], ids=["object", "kedro-session-repr"])
def test_runner_is_logged_by_its_class_name(tmp_path, as_recorded):
    from kedro.runner import SequentialRunner

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    hook = MlflowTrackingHook()
    hook._project_path, hook._config, hook._env = tmp_path, {}, "local"
    hook._start({"pipeline_names": ["focal"], "runner": as_recorded(SequentialRunner())}, catalog=None, uri=uri)
    params = mlflow.MlflowClient(tracking_uri=uri).get_run(hook._parent).data.params
    assert params["kedro.runner"] == "kedro.runner.sequential_runner.SequentialRunner"
    assert params["kedro.env"] == "local"


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["dead_server", "corrupted_db"])
def test_kedro_run_finishes_with_all_outputs_and_one_warning_when_tracking_is_broken(tmp_path, backend):
    from tests.test_end_to_end import kedro

    if backend == "dead_server":
        tracking = "http://alice:s3cret@127.0.0.1:9"  # nothing listens on the discard port
    else:
        (tmp_path / "mlflow.db").write_text("not a database")
        tracking = f"sqlite:///{tmp_path}/mlflow.db"
    result = kedro("--pipelines=baseline", data_dir=tmp_path / "data", tracking=tracking)
    output = result.stdout + result.stderr
    assert output.count("WARNING") == 1 and "CALIB_MLFLOW=off" in " ".join(output.split())
    assert "s3cret" not in output
    report = tmp_path / "data" / "08_reporting" / "test" / "baseline"
    assert (report / "metrics.parquet").exists() and (report / "summary").exists()


def _claim_versions(data_dir: str, count: int, queue) -> None:
    os.environ["CALIB_DATA_DIR"] = data_dir
    from calib_pipeline.settings import claim_save_version

    queue.put([claim_save_version() for _ in range(count)])


def test_save_versions_never_collide_between_processes(tmp_path):
    import multiprocessing

    from kedro.framework.session import session

    import calib_pipeline.settings as settings

    assert session.generate_timestamp is settings.claim_save_version, "sessions take their version from the claim"
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [context.Process(target=_claim_versions, args=(str(tmp_path), 40, queue)) for _ in range(3)]
    for worker in workers:
        worker.start()
    versions = [v for _ in workers for v in queue.get(timeout=120)]
    for worker in workers:
        worker.join()
    assert len(versions) == 120 and len(set(versions)) == 120
    assert sorted(versions) == sorted(p.name for p in (tmp_path / ".save_versions").iterdir())


@pytest.mark.parametrize(
    ("dataset", "stage"),
    [("split_meta", "data_split"), ("ce.seed_0.checkpoint", "training"), ("ce.seed_0.logits", "logits"),
     ("ce.seed_0.shift_logits", "shift"), ("shift_sets", "shift"), ("focal.metrics", "reporting"),
     ("params:training", None), ("raw_data", None)],
)
def test_each_cached_artifact_names_the_stage_that_makes_it(dataset, stage):
    from calib_pipeline.hooks import producing_stage

    assert producing_stage(dataset) == stage
