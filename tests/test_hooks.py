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

from calib_pipeline.hooks import MlflowTrackingHook
from calib_pipeline.settings import project_root


class RecordingClient:
    """A stand-in for MlflowClient that records calls and can fail on one method."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.calls: list[tuple[str, tuple]] = []
        self.keywords: list[tuple[str, dict]] = []  # the keyword arguments of each call
        self.fail_on = fail_on
        self.runs = 0

    def __getattr__(self, name):
        def call(*args, **kwargs):
            self.calls.append((name, args))
            self.keywords.append((name, kwargs))
            if name == self.fail_on:
                raise ConnectionError("http://bob:hunter2@tracking:5000 refused")
            if name == "create_run":
                self.runs += 1
                return SimpleNamespace(info=SimpleNamespace(run_id=f"run{self.runs}"))
            return None

        return call


def training_node():
    return SimpleNamespace(
        name="ce.train_seed_0", namespace="ce", tags={"training"}, outputs=["ce.seed_0.model"]
    )


def started_hook(client: RecordingClient) -> MlflowTrackingHook:
    hook = MlflowTrackingHook()
    hook._client, hook._parent, hook._experiment_id = client, "parent", "0"
    return hook


OUTPUTS = {
    "ce.seed_0.checkpoint": {"method": "ce", "seed": 0, "selected_epoch": 2, "config": {"lr": 0.1}},
    "ce.seed_0.history": pd.DataFrame(
        {"epoch": [1, 2], "seed": [0, 0], "val_accuracy": [0.5, 0.9]}
    ),
}


def test_a_training_run_is_logged_only_after_all_its_outputs_are_saved():
    client = RecordingClient()
    hook = started_hook(client)
    node = training_node()
    hook.before_node_run(node=node, catalog=None, inputs={})
    assert [c[0] for c in client.calls] == ["create_run"], (
        "the nested run opens when training starts"
    )
    hook.after_node_run(
        node=node, catalog=None, inputs={"params:training": {"lr": 0.1}}, outputs=OUTPUTS
    )
    hook.after_dataset_saved(dataset_name="ce.seed_0.checkpoint", data=None, node=node)
    assert [c[0] for c in client.calls] == ["create_run"], (
        "nothing is logged before every output is saved"
    )
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
    ended = [c[1] for c in client.calls if c[0] == "set_terminated"]
    assert ("run1", "KILLED") in ended and ("parent", "KILLED") in ended, "no run left RUNNING"


def test_a_tracking_failure_in_a_workers_copy_ends_only_its_own_nested_run():
    """The driver's parent run goes on (other workers still log to it): a worker's copy
    never terminates it."""
    driver = started_hook(RecordingClient())
    driver._uri = "http://tracking:5000"
    worker = driver.for_worker()
    worker._client = server = RecordingClient(fail_on="log_batch")
    node = training_node()
    worker.before_node_run(node=node, catalog=None, inputs={})
    worker.after_node_run(node=node, catalog=None, inputs={}, outputs=OUTPUTS)
    for name in OUTPUTS:
        worker.after_dataset_saved(dataset_name=name, data=None, node=node)
    assert [c[1] for c in server.calls if c[0] == "set_terminated"] == [("run1", "KILLED")]


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
    worker.after_node_run(
        node=node, catalog=None, inputs={"params:training": {"lr": 0.1}}, outputs=OUTPUTS
    )
    for name in OUTPUTS:
        worker.after_dataset_saved(dataset_name=name, data=None, node=node)
    report = worker.worker_report()
    client = mlflow.MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("calib-pipeline").experiment_id
    assert len(client.search_runs([experiment])) == 1, "the worker never writes to the SQLite file"
    driver.merge_worker_report(report)
    child = next(r for r in client.search_runs([experiment]) if r.info.run_id != driver._parent)
    assert (
        child.data.tags["mlflow.parentRunId"] == driver._parent and child.info.status == "FINISHED"
    )
    assert child.info.run_name == "ce seed 0" and child.data.params["training.lr"] == "0.1"
    assert [m.value for m in client.get_metric_history(child.info.run_id, "val_accuracy")] == [
        0.5,
        0.9,
    ]
    assert child.info.start_time <= child.info.end_time <= int(time.time() * 1000), (
        "the worker's times"
    )


def test_the_nested_run_of_a_node_that_failed_in_a_worker_ends_failed(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    driver = MlflowTrackingHook()
    driver._project_path, driver._config, driver._env = tmp_path, {}, "test"
    driver._start({"pipeline_names": ["baseline"], "run_id": "x"}, catalog=None, uri=uri)
    worker = worker_copy(driver)
    worker.before_node_run(node=training_node(), catalog=None, inputs={})  # then the node raised
    driver.merge_worker_report(worker.worker_report())
    client = mlflow.MlflowClient(tracking_uri=uri)
    children = client.search_runs(
        [driver._experiment_id], filter_string=f"tags.mlflow.parentRunId = '{driver._parent}'"
    )
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
    assert next(c[0] for c in server.calls) == "create_run" and server.calls[-1] == (
        "set_terminated",
        ("run1", "FINISHED"),
    )
    assert server.calls[0][1][0] == "0", "under the driver's experiment"


# a finished 2-epoch training whose stored state was reused: nothing was trained again
REUSED = {
    **OUTPUTS,
    "ce.seed_0.checkpoint": {
        **OUTPUTS["ce.seed_0.checkpoint"],
        "resumed_after_epoch": 2,
        "config": {"training": {"epochs": 2}},
    },
}


def test_a_worker_tags_a_reused_training_through_the_driver(tmp_path, caplog):
    """A training reused from a stored state is tagged so in the worker (set_tag); with a
    SQLite file the driver replays the tags (issue 34: the recorder had no set_tag, and the
    Dask runner switched tracking off)."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    driver = MlflowTrackingHook()
    driver._project_path, driver._config, driver._env = tmp_path, {}, "test"
    driver._start({"pipeline_names": ["baseline"], "run_id": "x"}, catalog=None, uri=uri)
    worker, node = worker_copy(driver), training_node()
    worker.before_node_run(node=node, catalog=None, inputs={})
    worker.after_node_run(node=node, catalog=None, inputs={}, outputs=REUSED)
    for name in REUSED:
        worker.after_dataset_saved(dataset_name=name, data=None, node=node)
    driver.merge_worker_report(worker.worker_report())
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], "tracking stayed on"
    client = mlflow.MlflowClient(tracking_uri=uri)
    children = f"tags.mlflow.parentRunId = '{driver._parent}'"
    (child,) = client.search_runs([driver._experiment_id], filter_string=children)
    assert child.data.tags["calib.training"] == "reused"
    assert child.data.tags["calib.resumed_after_epoch"] == "2" and child.info.status == "FINISHED"


def test_a_worker_tags_a_reused_training_on_a_tracking_server(monkeypatch):
    server = RecordingClient()
    monkeypatch.setattr("mlflow.tracking.MlflowClient", lambda tracking_uri: server)
    driver = started_hook(RecordingClient())
    driver._uri = "https://tracking.example:5000"
    worker, node = worker_copy(driver), training_node()
    worker.before_node_run(node=node, catalog=None, inputs={})
    worker.after_node_run(node=node, catalog=None, inputs={}, outputs=REUSED)
    for name in REUSED:
        worker.after_dataset_saved(dataset_name=name, data=None, node=node)
    assert ("set_tag", ("run1", "calib.training", "reused")) in server.calls
    finished = ("set_terminated", ("run1", "FINISHED"))
    assert server.calls[-1] == finished, "not ended by a tracking failure"


def test_no_worker_copy_while_tracking_is_off():
    assert MlflowTrackingHook().for_worker() is None


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
    orphan = client.create_run(
        experiment, tags={"calib.host": host, "calib.pid": str(dead_pid())}
    ).info.run_id
    alive = client.create_run(
        experiment, tags={"calib.host": host, "calib.pid": str(os.getpid())}
    ).info.run_id
    elsewhere = client.create_run(
        experiment, tags={"calib.host": "other-host", "calib.pid": "1"}
    ).info.run_id
    hook = MlflowTrackingHook()
    hook._project_path, hook._config, hook._env = tmp_path, {}, "test"
    hook._start({"pipeline_names": ["baseline"], "run_id": "x"}, catalog=None, uri=uri)
    assert client.get_run(orphan).info.status == "KILLED"
    assert client.get_run(alive).info.status == "RUNNING", "a live process keeps its run"
    assert client.get_run(elsewhere).info.status == "RUNNING", (
        "another host's runs are not ours to judge"
    )
    parent = client.get_run(hook._parent)
    assert parent.data.tags["kedro.env"] == "test" and parent.info.status == "RUNNING"
    hook._end_at_exit()  # what atexit does after Ctrl-C
    assert client.get_run(parent.info.run_id).info.status == "KILLED"


@pytest.mark.parametrize(
    "as_recorded", [lambda runner: runner, str], ids=["object", "kedro-session-repr"]
)
def test_runner_is_logged_by_its_class_name(tmp_path, as_recorded):
    from kedro.runner import SequentialRunner

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    hook = MlflowTrackingHook()
    hook._project_path, hook._config, hook._env = tmp_path, {}, "local"
    hook._start(
        {"pipeline_names": ["focal"], "runner": as_recorded(SequentialRunner())},
        catalog=None,
        uri=uri,
    )
    params = mlflow.MlflowClient(tracking_uri=uri).get_run(hook._parent).data.params
    assert params["kedro.runner"] == "kedro.runner.sequential_runner.SequentialRunner"
    assert params["kedro.env"] == "local"


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["dead_server", "corrupted_db"])
def test_kedro_run_finishes_with_all_outputs_and_one_warning_when_tracking_is_broken(
    tmp_path, backend
):
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

    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    workers = [
        context.Process(target=_claim_versions, args=(str(tmp_path), 40, queue)) for _ in range(3)
    ]
    for worker in workers:
        worker.start()
    versions = [v for _ in workers for v in queue.get(timeout=120)]
    for worker in workers:
        worker.join()
    assert len(versions) == 120 and len(set(versions)) == 120
    assert sorted(versions) == sorted(p.name for p in (tmp_path / ".save_versions").iterdir())


def test_a_session_takes_a_claimed_save_version(tmp_path, monkeypatch):
    """The project's session class (settings.SESSION_CLASS, which `kedro run` and
    %reload_kedro create) keeps Kedro's stamp when it is free, and takes another when a
    run started in the same millisecond holds it."""
    from kedro.framework.project import configure_project, settings

    from calib_pipeline.settings import CalibSession

    monkeypatch.setenv("CALIB_DATA_DIR", str(tmp_path))
    configure_project("calib_pipeline")
    assert settings.SESSION_CLASS is CalibSession
    session = CalibSession.create(project_path=project_root(), save_on_close=False)
    claims = tmp_path / ".save_versions"
    assert [p.name for p in claims.iterdir()] == [session.session_id]
    assert session.store["session_id"] == session.session_id
    taken = CalibSession(session_id=session.session_id, project_path=project_root())
    assert taken.session_id != session.session_id and (claims / taken.session_id).is_dir()


@pytest.mark.parametrize(
    ("dataset", "stage"),
    [
        ("split_meta", "data_split"),
        ("ce.seed_0.checkpoint", "training"),
        ("ce.seed_0.logits", "logits"),
        ("ce.seed_0.shift_logits", "shift"),
        ("shift_sets", "shift"),
        ("focal.metrics", "reporting"),
        ("params:training", None),
        ("raw_data", None),
    ],
)
def test_each_cached_artifact_names_the_stage_that_makes_it(dataset, stage):
    from calib_pipeline.hooks import producing_stage

    assert producing_stage(dataset) == stage


# --- MLflow as a comparison tool: selected epoch, per-calibrator metrics, parent summary --


def test_final_metrics_are_those_of_the_selected_epoch_not_the_last():
    client = RecordingClient()
    hook, node = started_hook(client), training_node()
    outputs = {
        "ce.seed_0.checkpoint": {"method": "ce", "seed": 0, "selected_epoch": 2, "config": {}},
        "ce.seed_0.history": pd.DataFrame({"epoch": [1, 2, 3], "val_accuracy": [0.5, 0.9, 0.7]}),
    }
    hook.before_node_run(node=node, catalog=None, inputs={})
    hook.after_node_run(node=node, catalog=None, inputs={}, outputs=outputs)
    for name in outputs:
        hook.after_dataset_saved(dataset_name=name, data=None, node=node)
    logged = {
        m.key: (m.value, m.step)
        for name, kwargs in client.keywords
        if name == "log_batch"
        for m in kwargs.get("metrics", [])
    }
    assert logged["final_val_accuracy"] == (0.9, 2) and logged["selected_epoch"][0] == 2


def tidy_table() -> pd.DataFrame:
    """Two seeds of ce: clean val/test rows for two calibrators, and one shifted row."""
    rows = []
    for seed, ece in ((0, 0.10), (1, 0.20)):
        for calibrator, factor in (("none", 1.0), ("ts", 0.5), ("ts@shifted_val", 0.4)):
            for split in ("val", "test"):
                for metric, value in (
                    ("ece", ece * factor),
                    ("nll", 1.0 + seed),
                    ("accuracy", 0.9),
                ):
                    rows.append(
                        ("ce", seed, f"train{seed}", calibrator, split, "none", 0, metric, value)
                    )
        rows.append(("ce", seed, f"train{seed}", "ts", "test", "gaussian_noise", 3, "ece", 0.99))
    return pd.DataFrame(
        rows,
        columns=[
            "method",
            "seed",
            "run_id",
            "calibrator",
            "split",
            "shift",
            "severity",
            "metric",
            "value",
        ],
    )


def sqlite_driver(tmp_path, pipeline=None) -> tuple[MlflowTrackingHook, mlflow.MlflowClient]:
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    driver = MlflowTrackingHook()
    driver._project_path, driver._config, driver._env = tmp_path, {}, "test"
    driver._globals = {"dataset": "digits", "protocol": "test"}
    driver._start(
        {"pipeline_names": ["baseline"], "run_id": "x"}, catalog=None, uri=uri, pipeline=pipeline
    )
    return driver, mlflow.MlflowClient(tracking_uri=uri)


EVALUATE = SimpleNamespace(
    name="baseline.evaluate",
    namespace="baseline",
    tags={"reporting", "evaluation"},
    outputs=["baseline.metrics"],
)
CLAIMS = SimpleNamespace(
    name="baseline.report_claims",
    namespace="baseline",
    tags={"reporting"},
    outputs=["baseline.claims"],
)


def test_per_calibrator_test_metrics_land_on_the_nested_runs_and_means_on_the_parent(tmp_path):
    driver, client = sqlite_driver(tmp_path)
    node = training_node()
    driver.before_node_run(node=node, catalog=None, inputs={})  # ce seed 0 trains in this run
    driver.after_node_run(node=node, catalog=None, inputs={}, outputs=OUTPUTS)
    for name in OUTPUTS:
        driver.after_dataset_saved(dataset_name=name, data=None, node=node)
    driver.after_dataset_saved(dataset_name="baseline.metrics", data=tidy_table(), node=EVALUATE)
    children = {
        r.data.tags["seed"]: r
        for r in client.search_runs(
            [driver._experiment_id], filter_string=f"tags.mlflow.parentRunId = '{driver._parent}'"
        )
    }
    assert sorted(children) == ["0", "1"]
    trained = children["0"].data
    assert trained.metrics["test.ece.ts"] == pytest.approx(0.05), (
        "the clean test split, not the shifted row"
    )
    assert (
        trained.metrics["test.ece.none"] == pytest.approx(0.10)
        and trained.metrics["test.nll.none"] == 1.0
    )
    assert trained.metrics["val.ece.ts"] == pytest.approx(0.05)
    assert trained.metrics["test.ece.ts_shifted_val"] == pytest.approx(0.04), (
        "@ is not allowed in a metric name"
    )
    assert trained.metrics["final_val_accuracy"] == 0.9, "the training run itself, not a second one"
    reused = children["1"]
    assert (
        reused.data.tags["calib.training"] == "reused"
        and reused.data.tags["kedro.training_run_id"] == "train1"
    )
    assert reused.info.status == "FINISHED" and reused.data.metrics[
        "test.ece.none"
    ] == pytest.approx(0.20)
    parent = client.get_run(driver._parent).data.metrics
    assert parent["baseline.ce.test.ece.ts"] == pytest.approx(0.075), "mean over seeds"
    assert parent["baseline.ce.test.nll.none"] == pytest.approx(1.5)
    assert not any(".val." in k or ".brier." in k for k in parent), "the summary stays small"


def test_claims_verdict_counts_and_line_go_on_the_parent(tmp_path):
    driver, client = sqlite_driver(tmp_path)
    report = {
        "summary": "# ...",
        "verdicts": {
            "line": "baseline on digits: 3 of 6 claims hold",
            "metrics": {"claims.holds": 3.0, "claims.total": 6.0},
        },
    }
    driver.after_dataset_saved(dataset_name="baseline.report_claims", data=report, node=CLAIMS)
    parent = client.get_run(driver._parent).data
    assert (
        parent.metrics["baseline.claims.holds"] == 3.0
        and parent.metrics["baseline.claims.total"] == 6.0
    )
    assert parent.tags["baseline.claims"] == "baseline on digits: 3 of 6 claims hold"
    assert "baseline.claims_protocol" not in parent.tags, "unknown protocol: no tag"
    for gaps, stated, tag in (
        ([], True, "paper"),
        ([], False, "paper_network"),
        (["network", "schedule"], True, "network,schedule"),
    ):
        report["verdicts"]["protocol_gaps"], report["verdicts"]["settings_stated"] = gaps, stated
        driver.after_dataset_saved(dataset_name="baseline.report_claims", data=report, node=CLAIMS)
        assert client.get_run(driver._parent).data.tags["baseline.claims_protocol"] == tag


def test_the_parent_run_is_tagged_with_dataset_protocol_studies_and_commit(tmp_path):
    pipeline = SimpleNamespace(nodes=[EVALUATE, training_node()])
    driver, client = sqlite_driver(tmp_path, pipeline)
    tags = client.get_run(driver._parent).data.tags
    assert (tags["kedro.env"], tags["dataset"], tags["protocol"], tags["studies"]) == (
        "test",
        "digits",
        "test",
        "baseline",
    )
    assert tags["git.commit"] == "unknown", "tmp_path is no git repository: a tag, never an error"
    experiment = client.get_experiment(driver._experiment_id)
    assert experiment.artifact_location == (tmp_path / "mlruns").resolve().as_uri(), (
        "artifacts beside the test's db"
    )


def test_the_git_commit_is_the_projects_head():
    from pathlib import Path

    from calib_pipeline.hooks.run_tags import git_tags

    project = Path(__file__).resolve().parents[1]
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=project, capture_output=True, text=True
    ).stdout.strip()
    tags = git_tags(project)
    assert tags["git.commit"] == head == tags["mlflow.source.git.commit"] and tags["git.dirty"] in (
        "true",
        "false",
    )


def test_a_run_reads_the_inputs_it_does_not_make_at_their_latest_version_when_it_started(tmp_path):
    from kedro.io import DataCatalog, MemoryDataset, Version
    from kedro.pipeline import Pipeline, node

    from calib_pipeline.hooks import OwnVersionsHook
    from calib_pipeline.kedro_datasets import TorchDataset

    earlier, ours, theirs = (
        "2026-11-26T07.00.00.000Z",
        "2026-11-26T08.00.00.000Z",
        "2026-11-26T08.00.00.500Z",
    )
    logits, pinned = str(tmp_path / "logits.pt"), str(tmp_path / "pinned.pt")
    TorchDataset(filepath=logits, version=Version(None, earlier)).save({"run": "earlier"})
    for version in (earlier, ours):
        TorchDataset(filepath=pinned, version=Version(None, version)).save({"run": version})
    catalog = DataCatalog(
        {
            "ce.seed_0.logits": TorchDataset(filepath=logits, version=Version(None, ours)),
            "ce.seed_0.pinned": TorchDataset(
                filepath=pinned, version=Version(earlier, ours)
            ),  # --load-versions
            "never_made": TorchDataset(
                filepath=str(tmp_path / "missing.pt"), version=Version(None, ours)
            ),
            "params:x": MemoryDataset(1),
        }
    )
    pipeline = Pipeline(
        [
            node(
                lambda *a: 0,
                ["ce.seed_0.logits", "ce.seed_0.pinned", "never_made", "params:x"],
                "out",
                name="report",
            )
        ]
    )
    OwnVersionsHook().before_pipeline_run(
        {}, pipeline, catalog
    )  # a missing input is the preflight's to report
    TorchDataset(filepath=logits, version=Version(None, theirs)).save(
        {"run": "theirs"}
    )  # a concurrent run
    assert catalog.load("ce.seed_0.logits") == {"run": "earlier"}
    assert catalog.load("ce.seed_0.pinned") == {"run": earlier}, "a --load-versions pin still wins"
    assert TorchDataset(filepath=logits, version=Version(None, None)).load() == {"run": "theirs"}


def test_a_run_reads_back_the_version_it_saved_not_a_newer_one_of_another_run(tmp_path):
    from kedro.io import DataCatalog, Version
    from kedro.pipeline import Pipeline

    from calib_pipeline.hooks import OwnVersionsHook
    from calib_pipeline.kedro_datasets import TorchDataset

    ours, theirs = "2026-11-26T07.44.08.077Z", "2026-11-26T07.44.08.140Z"
    path = str(tmp_path / "logits.pt")
    catalog = DataCatalog(
        {"ce.seed_0.logits": TorchDataset(filepath=path, version=Version(None, ours))}
    )
    hook = OwnVersionsHook()
    hook.before_pipeline_run({}, Pipeline([]), catalog)
    catalog.save("ce.seed_0.logits", {"run": "ours"})
    TorchDataset(filepath=path, version=Version(None, theirs)).save(
        {"run": "theirs"}
    )  # a concurrent run
    hook.after_dataset_saved("ce.seed_0.logits", None, None)
    assert catalog.load("ce.seed_0.logits") == {"run": "ours"}
    assert TorchDataset(filepath=path, version=Version(None, None)).load() == {"run": "theirs"}, (
        "others see the latest"
    )


@pytest.mark.parametrize(("resumed", "tag"), [(0, None), (1, "resumed"), (2, "reused")])
def test_a_training_reused_or_continued_from_a_stored_state_says_so(tmp_path, resumed, tag):
    """A rerun reuses a finished state (or continues an interrupted one): its nested run must
    not pass for a new training of the same history."""
    driver, client = sqlite_driver(tmp_path)
    node = training_node()
    outputs = dict(OUTPUTS)
    outputs["ce.seed_0.checkpoint"] = {
        **OUTPUTS["ce.seed_0.checkpoint"],
        "resumed_after_epoch": resumed,
        "config": {"training": {"epochs": 2}},
        "hyperparameters": {"gamma": 3.0, "detach_pt": False},
    }
    driver.before_node_run(node=node, catalog=None, inputs={})
    driver.after_node_run(node=node, catalog=None, inputs={}, outputs=outputs)
    for name in outputs:
        driver.after_dataset_saved(dataset_name=name, data=None, node=node)
    (child,) = client.search_runs(
        [driver._experiment_id], filter_string=f"tags.mlflow.parentRunId = '{driver._parent}'"
    )
    assert child.data.tags.get("calib.training") == tag
    assert child.data.tags.get("calib.resumed_after_epoch") == (str(resumed) if resumed else None)
    # the effective hyperparameters (defaults filled in) beside the configured ones
    assert (
        child.data.params["effective.detach_pt"] == "False"
        and child.data.params["effective.gamma"] == "3.0"
    )


def test_the_parent_run_records_the_overrides_and_the_evaluation_settings(tmp_path):
    """Re-scorings of one training under other bins or calibrator definitions log the same
    metric names: the parent run's params tell them apart."""
    settings = {
        "params:evaluation": {"n_bins": 5},
        "params:calibrators": {"ts": {"name": "temperature_fixed", "params": {"temperature": 3.0}}},
    }

    class Catalog(dict):  # `in` and `load`, as Kedro's DataCatalog; no shift group here
        load = dict.__getitem__

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    hook = MlflowTrackingHook()
    hook._project_path, hook._config, hook._env = tmp_path, {}, "test"
    run_params = {
        "pipeline_names": ["baseline"],
        "runtime_params": {"evaluation": {"n_bins": 5}},
    }  # as Kedro 1.x records them
    hook._start(run_params, catalog=Catalog(settings), uri=uri)
    params = mlflow.MlflowClient(tracking_uri=uri).get_run(hook._parent).data.params
    assert params["kedro.params.evaluation.n_bins"] == "5"
    assert params["evaluation.n_bins"] == "5"
    assert params["calibrators.ts.name"] == "temperature_fixed"
    assert params["calibrators.ts.params.temperature"] == "3.0"
    assert not any(key.startswith("shift") for key in params)


@pytest.mark.parametrize(
    "runner",
    [
        "kedro.runner.parallel_runner.ParallelRunner",
        "<kedro.runner.parallel_runner.ParallelRunner object at 0x7f>",
    ],
)
def test_the_parallel_runner_is_refused_before_any_node_runs(runner):
    """Its workers bypass the hooks (own versions, provenance, MLflow, node counting): a
    run under it failed after writing artifacts while reporting that nothing was written."""
    from calib_pipeline.hooks import RunPreflightHook

    pipeline = SimpleNamespace(inputs=lambda: set(), nodes=[])
    with pytest.raises(ValueError, match="--runner=ParallelRunner is not supported"):
        RunPreflightHook().before_pipeline_run(
            run_params={"runner": runner}, pipeline=pipeline, catalog=None
        )
    RunPreflightHook().before_pipeline_run(  # the default and the thread runner pass
        run_params={"runner": "kedro.runner.thread_runner.ThreadRunner"},
        pipeline=pipeline,
        catalog=None,
    )


@pytest.mark.parametrize("load_versions", [None, {"ce.seed_0.logits": "2026-01-01T00.00.00.000Z"}])
def test_kedros_version_mismatch_warning_is_silenced_only_where_own_versions_make_it_moot(
    load_versions,
):
    """Two runs started together made Kedro print 23 warnings of "inconsistencies" although
    each run reads its own saves; with --load-versions the pin wins and the warning stays."""
    import warnings

    from kedro.io import DataCatalog

    from calib_pipeline.hooks import OwnVersionsHook

    pipeline = SimpleNamespace(inputs=lambda: set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # a process (notebook, tests) runs several: an earlier unpinned run must not silence
        # a later pinned one
        OwnVersionsHook().before_pipeline_run({"load_versions": None}, pipeline, DataCatalog())
        OwnVersionsHook().before_pipeline_run(
            {"load_versions": load_versions}, pipeline, DataCatalog()
        )
        warnings.warn(
            "Save version 'a' did not match load version 'b' for x. This is strongly",
            UserWarning,
            stacklevel=2,
        )
    assert len(caught) == (1 if load_versions else 0)


def test_a_load_version_that_was_never_saved_is_not_reported_as_a_stage_to_run():
    from calib_pipeline.hooks import MissingInputsError, RunPreflightHook

    pipeline = SimpleNamespace(inputs=lambda: {"ce.seed_0.logits"}, nodes=[])
    catalog = SimpleNamespace(exists=lambda name: False)
    with pytest.raises(
        MissingInputsError,
        match=r"--load-versions names version\(s\) that were never saved "
        r"\(or were pruned\): ce.seed_0.logits:2026-11-27T07.22.09.694",
    ):
        RunPreflightHook().before_pipeline_run(
            run_params={"load_versions": {"ce.seed_0.logits": "2026-11-27T07.22.09.694"}},
            pipeline=pipeline,
            catalog=catalog,
        )
    with pytest.raises(
        MissingInputsError, match="run the logits stage"
    ):  # no pin: the stage is missing
        RunPreflightHook().before_pipeline_run(run_params={}, pipeline=pipeline, catalog=catalog)


def test_a_methods_studies_are_the_studies_its_runs_are_collected_for():
    from kedro.pipeline import Pipeline, node

    from calib_pipeline.hooks.tracking import studies_of_methods

    def same(runs):
        return runs

    pipeline = Pipeline(
        [
            node(same, "ce.seed_0.model", "ce.runs_for_focal_meta", name="ce.collect_a"),
            node(same, "ce.seed_1.model", "ce.runs_for_focal", name="ce.collect_b"),
            node(same, "ls.seed_0.model", "ls.runs_for_focal", name="ls.collect"),
            node(same, "focal.metrics", "focal.claims", name="focal.report_claims"),
        ]
    )
    assert studies_of_methods(pipeline) == {"ce": ["focal", "focal_meta"], "ls": ["focal"]}
    assert studies_of_methods(Pipeline([])) == {}, "no collection node: no method has a study"
