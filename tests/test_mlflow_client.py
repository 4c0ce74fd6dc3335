"""The MLflow client side of tracking (calib_pipeline/hooks/mlflow_client.py): masked
credentials, HTTP timeouts, the SQLite lock, and a worker's clients -- every call the
tracking hook makes in a worker recorded and replayed, or sent to a server."""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import pickle
from types import SimpleNamespace

import mlflow
import pytest
from mlflow.entities import Metric, Param

from calib_pipeline.hooks.mlflow_client import (
    HTTP_DEFAULTS,
    WORKER_CALLS,
    RecordedCalls,
    ServerClient,
    backend_lock,
    mask_credentials,
    single_writer,
    use_http_defaults,
    worker_client,
)


def test_credentials_are_masked_in_any_uri():
    text = "sqlite:///db and http://user:pa:ss@host:5000/api, https://a:b@c/x"
    assert mask_credentials(text) == "sqlite:///db and http://***@host:5000/api, https://***@c/x"


@pytest.mark.parametrize(
    ("uri", "recorded"),
    [
        ("sqlite:////tmp/m.db", True),
        ("file:///tmp/mlruns", True),
        ("/tmp/mlruns", True),
        (None, True),
        ("http://tracking:5000", False),
        ("https://user:pw@tracking.example", False),
        ("databricks://x", False),
    ],
)
def test_a_worker_records_for_a_file_backend_and_writes_to_a_server(uri, recorded):
    assert isinstance(worker_client(uri), RecordedCalls if recorded else ServerClient)
    assert single_writer(uri) is recorded


@pytest.mark.parametrize("client", [RecordedCalls, ServerClient])
def test_both_worker_clients_implement_every_call_the_hook_makes_in_a_worker(client):
    assert {"create_run", "log_batch", "set_tag", "set_terminated"} <= set(WORKER_CALLS)
    missing = [name for name in WORKER_CALLS if not callable(getattr(client, name, None))]
    assert not missing, f"{client.__name__} lacks {missing}"


def test_every_recorded_call_is_replayed_on_the_drivers_client(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    driver = mlflow.MlflowClient(tracking_uri=uri)
    experiment = driver.create_experiment("replay")
    parent = driver.create_run(experiment).info.run_id
    recorder = RecordedCalls()
    run = recorder.create_run(experiment, run_name="ce seed 0", tags={"mlflow.parentRunId": parent})
    recorder.log_batch(
        run.info.run_id, metrics=[Metric("val_ece", 0.1, 1, 1)], params=[Param("seed", "0")]
    )
    recorder.set_tag(run.info.run_id, "calib.training", "reused")
    recorder.set_terminated(run.info.run_id, "FINISHED")
    assert [name for name, _ in recorder.calls] == list(WORKER_CALLS), (
        "every worker call recorded, in order"
    )
    calls = pickle.loads(pickle.dumps(recorder.calls))  # as they travel back to the driver
    RecordedCalls.replay(calls, driver)
    (child,) = driver.search_runs(
        [experiment], filter_string=f"tags.mlflow.parentRunId = '{parent}'"
    )
    assert child.info.run_name == "ce seed 0" and child.info.status == "FINISHED"
    assert child.data.params == {"seed": "0"} and child.data.metrics == {"val_ece": 0.1}
    assert child.data.tags["calib.training"] == "reused"
    assert child.info.start_time == calls[0][1]["start_time"], (
        "the worker's start time, not the replay's"
    )


def test_a_server_client_pickles_without_its_connection_and_reconnects(monkeypatch):
    made = []

    def connect(tracking_uri):
        made.append(tracking_uri)
        return SimpleNamespace(set_tag=lambda *args: made.append(args))

    monkeypatch.setattr("mlflow.tracking.MlflowClient", connect)
    client = ServerClient("https://tracking.example")
    client.set_tag("run1", "k", "v")
    copy = pickle.loads(pickle.dumps(client))
    assert copy._client is None
    copy.set_tag("run1", "k", "w")
    assert made == [
        "https://tracking.example",
        ("run1", "k", "v"),
        "https://tracking.example",
        ("run1", "k", "w"),
    ]


def test_http_defaults_never_override_the_users_settings(monkeypatch):
    for key in HTTP_DEFAULTS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "60")
    use_http_defaults()
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "60"
    assert (
        os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"]
        == HTTP_DEFAULTS["MLFLOW_HTTP_REQUEST_MAX_RETRIES"]
    )


def _try_lock(path: str, queue) -> None:
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            queue.put("held")
        else:
            queue.put("free")


def test_the_sqlite_lock_is_held_by_one_process_at_a_time(tmp_path):
    uri = f"sqlite:///{tmp_path}/sub/mlflow.db"
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()

    def other_process_sees() -> str:
        process = context.Process(
            target=_try_lock, args=(str(tmp_path / "sub" / "mlflow.lock"), queue)
        )
        process.start()
        process.join()
        return queue.get(timeout=60)

    with backend_lock(uri):
        assert other_process_sees() == "held"
    assert other_process_sees() == "free"
    before = sorted(tmp_path.rglob("*"))
    with backend_lock("http://tracking:5000"):  # a server serialises this itself: no lock file
        assert sorted(tmp_path.rglob("*")) == before
