"""The Dask runner: which nodes run where, dependency order, in-memory data and versions
across processes, worker hooks, logs, failures, cluster choice -- on a local cluster of
two worker processes shared by the module's tests (the nodes below run in them); then
`kedro run --runner=calib_pipeline.runner.DaskRunner` end to end against the sequential runner."""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

import distributed
import pytest
from kedro.framework.hooks import hook_impl
from kedro.io import DataCatalog, MemoryDataset, Version
from kedro.pipeline import Pipeline, node

from calib_pipeline import runner as runner_module
from calib_pipeline.kedro_compat import create_hook_manager
from calib_pipeline.kedro_datasets import TorchDataset
from calib_pipeline.runner import DaskRunner, local_cluster

SAVE_VERSION = "2026-11-26T10.00.00.000Z"


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
    ) as local:
        yield local.scheduler_address


def run(pipeline: Pipeline, catalog: DataCatalog, address: str, hook_manager=None) -> dict:
    return DaskRunner(address=address).run(pipeline, catalog, hook_manager)


# Node functions: importable, so the workers run them by reference.
def double(value: int) -> list[int]:
    return [value, 2 * value]


def square_with_pid(values: list[int]) -> tuple[list[int], int]:
    return [v * v for v in values], os.getpid()


def plan(values: list[int]) -> dict[str, int]:
    return {"total": sum(values)}


def report(plan: dict[str, int], training_pid: int) -> tuple[int, int, int]:
    return plan["total"], training_pid, os.getpid()


def wait_for_partner(folder: str, me: str, partner: str) -> int:
    """Returns once ``partner`` has started too: only concurrent tasks can both finish."""
    Path(folder, me).touch()
    deadline = time.monotonic() + 60
    while not Path(folder, partner).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{partner} never started while {me} ran")
        time.sleep(0.05)
    return os.getpid()


def timed_sleep(seconds: float) -> tuple[float, float]:
    start = time.monotonic()
    time.sleep(seconds)
    return start, time.monotonic()


def _check_calibrator(name: str) -> None:
    raise ValueError(f"unknown calibrator {name!r}")


def failing_training(value: int) -> int:
    _check_calibrator("tsx")
    return value


def train_model_file(value: int) -> dict[str, int]:
    return {"weights": value}


def read_model_file(model: dict[str, int]) -> int:
    return model["weights"]


ANOTHER_RUN = "2099-01-01T00.00.00.000Z"  # a run started after ours: its version is "latest"


def save_as_another_run(path: str, after: object) -> str:
    """A concurrent run saving a newer version of the model while ours is between stages."""
    TorchDataset(filepath=path, version=Version(None, ANOTHER_RUN)).save({"weights": -99})
    return "saved"


def read_model_after(model: dict[str, int], saved: str) -> int:
    return model["weights"]


def log_from_task(value: int) -> int:
    logging.getLogger("calib_pipeline.test_runner").info(
        "trained %d in process %d", value, os.getpid()
    )
    return value


def test_nodes_run_in_dependency_order_and_in_memory_data_crosses_processes(cluster):
    pipeline = Pipeline(
        [
            node(double, "params:base", "numbers", name="double"),  # driver
            node(
                square_with_pid,
                "numbers",
                ["squares", "training_pid"],
                name="square",
                tags=["training"],
            ),
            node(plan, "squares", "shift_plan", name="plan", tags=["shift"]),  # worker to worker
            node(
                report, ["shift_plan", "training_pid"], "result", name="report"
            ),  # back on the driver
        ]
    )
    catalog = DataCatalog(datasets={"params:base": MemoryDataset(3)})
    total, training_pid, report_pid = run(pipeline, catalog, cluster)["result"].load()
    assert total == 3 * 3 + 6 * 6
    assert report_pid == os.getpid() and training_pid != os.getpid(), (
        "training ran in a worker process"
    )


def test_independent_nodes_run_concurrently(cluster, tmp_path):
    pipeline = Pipeline(
        [
            node(
                wait_for_partner,
                ["params:folder", "params:a", "params:b"],
                "pid_a",
                name="a",
                tags=["training"],
            ),
            node(
                wait_for_partner,
                ["params:folder", "params:b", "params:a"],
                "pid_b",
                name="b",
                tags=["training"],
            ),
        ]
    )
    catalog = DataCatalog(
        datasets={
            "params:folder": MemoryDataset(str(tmp_path)),
            "params:a": MemoryDataset("a"),
            "params:b": MemoryDataset("b"),
        }
    )
    outputs = run(pipeline, catalog, cluster)
    assert outputs["pid_a"].load() != outputs["pid_b"].load(), "two workers, one task each"


def test_a_failing_node_fails_the_run_with_its_own_error_and_worker_traceback(cluster, tmp_path):
    downstream = TorchDataset(filepath=str(tmp_path / "after.pt"))
    pipeline = Pipeline(
        [
            node(failing_training, "params:value", "trained", name="train", tags=["training"]),
            node(read_model_file, "trained", "after", name="after"),
        ]
    )
    catalog = DataCatalog(datasets={"params:value": MemoryDataset(1), "after": downstream})
    with pytest.raises(ValueError, match="unknown calibrator 'tsx'") as raised:
        run(pipeline, catalog, cluster)
    frames = [frame.name for frame in traceback.extract_tb(raised.value.__traceback__)]
    assert frames[-2:] == ["failing_training", "_check_calibrator"], (
        "the worker's frames, up to the raise"
    )
    assert not downstream.exists(), "nothing downstream of the failure runs"


def test_a_run_whose_cluster_lost_every_worker_fails_instead_of_waiting_for_ever(tmp_path):
    """Workers the scheduler dropped (seen on an overloaded machine: "Scheduler was unaware of
    this worker; shutting down") are not restarted by their nannies: without the timeout
    the run's tasks wait for ever."""
    pipeline = Pipeline(
        [node(timed_sleep, "params:seconds", "slept", name="slow", tags=["training"])]
    )
    catalog = DataCatalog(datasets={"params:seconds": MemoryDataset(60)})
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0"
    ) as local:
        started = time.monotonic()
        closer = threading.Timer(2.0, local.scale, args=(0,))  # every worker closed
        closer.start()
        runner = DaskRunner(address=local.scheduler_address, no_worker_timeout=3)
        with pytest.raises(
            RuntimeError, match=r"no worker for 3 s while 1 task\(s\) wait \(slow\)"
        ):
            runner.run(pipeline, catalog)
        closer.join()
    assert time.monotonic() - started < 45, "failed after the timeout, before the 60 s task ends"


@pytest.mark.parametrize("timeout", [0, -1, "soon"])
def test_bad_no_worker_timeouts_are_refused(timeout):
    with pytest.raises(ValueError, match="no_worker_timeout must be seconds > 0"):
        DaskRunner(address="tcp://scheduler:8786", no_worker_timeout=timeout)


def test_outputs_share_the_session_save_version_and_the_driver_loads_the_new_ones(
    cluster, tmp_path
):
    def versioned(name: str) -> TorchDataset:
        return TorchDataset(filepath=str(tmp_path / name), version=Version(None, SAVE_VERSION))

    old = tmp_path / "model.pt" / "2000-01-01T00.00.00.000Z" / "model.pt"
    TorchDataset(filepath=str(old)).save({"weights": -1})
    catalog = DataCatalog(
        datasets={
            "params:value": MemoryDataset(7),
            "model": versioned("model.pt"),
            "other": versioned("other.pt"),
        }
    )
    assert catalog.load("model") == {
        "weights": -1
    }  # the driver now holds "latest" = the old version
    pipeline = Pipeline(
        [
            node(train_model_file, "params:value", "model", name="train", tags=["training"]),
            node(train_model_file, "params:value", "other", name="logits", tags=["logits"]),
            node(read_model_file, "model", "seen", name="read"),
        ]
    )
    assert run(pipeline, catalog, cluster)["seen"].load() == 7, (
        "the worker's version, not a cached one"
    )
    assert sorted(p.name for p in (tmp_path / "model.pt").iterdir()) == [
        "2000-01-01T00.00.00.000Z",
        SAVE_VERSION,
    ]
    assert [p.name for p in (tmp_path / "other.pt").iterdir()] == [SAVE_VERSION]


def test_a_run_reads_its_own_versions_not_newer_ones_another_run_saved_meanwhile(cluster, tmp_path):
    path = str(tmp_path / "model.pt")
    catalog = DataCatalog(
        datasets={
            "params:value": MemoryDataset(7),
            "params:path": MemoryDataset(path),
            "model": TorchDataset(filepath=path, version=Version(None, SAVE_VERSION)),
        }
    )
    pipeline = Pipeline(
        [
            node(train_model_file, "params:value", "model", name="train", tags=["training"]),
            node(save_as_another_run, ["params:path", "model"], "saved", name="other_run"),
            node(
                read_model_after,
                ["model", "saved"],
                "seen_in_worker",
                name="logits",
                tags=["logits"],
            ),
            node(read_model_after, ["model", "saved"], "seen_in_driver", name="report"),
        ]
    )
    outputs = run(pipeline, catalog, cluster)
    assert (outputs["seen_in_worker"].load(), outputs["seen_in_driver"].load()) == (7, 7)
    assert sorted(p.name for p in (tmp_path / "model.pt").iterdir()) == [SAVE_VERSION, ANOTHER_RUN]

    # a later run that does not make the model reads the latest version, whoever saved it
    later = DataCatalog(
        datasets={
            "saved": MemoryDataset("saved"),
            "model": TorchDataset(filepath=path, version=Version(None, "2100-01-01T00.00.00.000Z")),
        }
    )
    reader = Pipeline(
        [node(read_model_after, ["model", "saved"], "seen", name="logits", tags=["logits"])]
    )
    assert run(reader, later, cluster)["seen"].load() == -99


def test_inputs_of_earlier_runs_are_read_at_the_versions_latest_when_the_run_started(
    cluster, tmp_path
):
    from calib_pipeline.hooks import OwnVersionsHook

    path = str(tmp_path / "model.pt")
    TorchDataset(filepath=path, version=Version(None, "2026-11-25T10.00.00.000Z")).save(
        {"weights": 5}
    )
    catalog = DataCatalog(
        datasets={
            "params:path": MemoryDataset(path),
            "model": TorchDataset(filepath=path, version=Version(None, SAVE_VERSION)),
        }
    )
    pipeline = Pipeline(
        [
            node(save_as_another_run, ["params:path", "params:path"], "saved", name="other_run"),
            node(
                read_model_after,
                ["model", "saved"],
                "seen_in_worker",
                name="logits",
                tags=["logits"],
            ),
            node(read_model_after, ["model", "saved"], "seen_in_driver", name="report"),
        ]
    )
    OwnVersionsHook().before_pipeline_run({}, pipeline, catalog)  # as the session calls it
    outputs = run(pipeline, catalog, cluster)
    assert (outputs["seen_in_worker"].load(), outputs["seen_in_driver"].load()) == (5, 5)


class WorkerSideHook:
    """Runs in the worker: notes each node it saw and the process it saw it in."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []

    @hook_impl
    def before_node_run(self, node) -> None:
        self.seen.append((node.name, os.getpid()))

    def worker_report(self) -> list[tuple[str, int]]:
        return self.seen


class DriverSideHook:
    def __init__(self) -> None:
        self.local: list[str] = []
        self.reports: list = []

    @hook_impl
    def before_node_run(self, node) -> None:
        self.local.append(node.name)

    def for_worker(self) -> WorkerSideHook:
        return WorkerSideHook()

    def merge_worker_report(self, report) -> None:
        self.reports.append(report)


def test_hooks_with_a_worker_copy_see_remote_nodes_in_the_worker_and_report_to_the_driver(cluster):
    hooks = DriverSideHook()
    hook_manager = create_hook_manager()
    hook_manager.register(hooks)
    pipeline = Pipeline(
        [
            node(double, "params:base", "numbers", name="double"),
            node(
                square_with_pid,
                "numbers",
                ["squares", "training_pid"],
                name="square",
                tags=["training"],
            ),
        ]
    )
    outputs = run(
        pipeline, DataCatalog(datasets={"params:base": MemoryDataset(2)}), cluster, hook_manager
    )
    assert hooks.local == ["double"], "the driver's hooks see the driver's nodes"
    assert hooks.reports == [[("square", outputs["training_pid"].load())]]


def test_log_records_of_a_task_are_logged_by_the_driver(cluster, caplog):
    pipeline = Pipeline(
        [node(log_from_task, "params:value", "done", name="train", tags=["training"])]
    )
    with caplog.at_level(logging.INFO, logger="calib_pipeline"):
        run(pipeline, DataCatalog(datasets={"params:value": MemoryDataset(5)}), cluster)
    messages = [r.getMessage() for r in caplog.records if r.name == "calib_pipeline.test_runner"]
    assert len(messages) == 1 and messages[0].startswith("trained 5 in process ")
    assert not messages[0].endswith(f" {os.getpid()}")


def test_a_pipeline_without_remote_nodes_needs_no_cluster():
    pipeline = Pipeline([node(double, "params:base", "numbers", name="double")])
    catalog = DataCatalog(datasets={"params:base": MemoryDataset(4)})
    nowhere = "tcp://127.0.0.1:9"  # nothing listens there: connecting would fail
    assert run(pipeline, catalog, nowhere)["numbers"].load() == [4, 8]


def test_each_task_holds_one_gpu_where_workers_declare_gpus():
    with distributed.LocalCluster(
        n_workers=1,
        threads_per_worker=2,
        processes=True,
        resources={"GPU": 1},
        dashboard_address=":0",
    ) as one_gpu:
        pipeline = Pipeline(
            [
                node(timed_sleep, "params:seconds", "first", name="first", tags=["training"]),
                node(timed_sleep, "params:seconds", "second", name="second", tags=["training"]),
            ]
        )
        outputs = run(
            pipeline,
            DataCatalog(datasets={"params:seconds": MemoryDataset(0.5)}),
            one_gpu.scheduler_address,
        )
    (_start_a, end_a), (start_b, _end_b) = sorted(
        [outputs["first"].load(), outputs["second"].load()]
    )
    assert start_b >= end_a, "two threads but one GPU: the tasks ran one after the other"


@pytest.mark.parametrize(
    ("workers", "message"), [(0, "at least 1"), (1.5, "whole number"), ("2", "whole number")]
)
def test_bad_worker_counts_are_refused(workers, message):
    with pytest.raises(ValueError, match=message):
        DaskRunner(workers=workers)


def test_workers_cannot_size_an_existing_cluster_named_by_dask_config(monkeypatch):
    import dask

    with (
        dask.config.set({"scheduler-address": "tcp://scheduler:8786"}),
        pytest.raises(ValueError, match="attaches to the cluster at tcp://scheduler:8786"),
    ):
        DaskRunner(workers=2)


def test_local_cluster_has_one_single_threaded_worker_per_gpu_each_declaring_it(monkeypatch):
    made = []
    monkeypatch.setattr(runner_module, "visible_gpu_count", lambda: 4)
    monkeypatch.setitem(
        sys.modules, "dask_cuda", SimpleNamespace(LocalCUDACluster=lambda **kw: made.append(kw))
    )
    local_cluster(None, needed=10)
    local_cluster(None, needed=2)  # two remote nodes: two GPUs are enough
    local_cluster(3, needed=10)
    assert made == [
        {"n_workers": 4, "threads_per_worker": 1, "resources": {"GPU": 1}},
        {"n_workers": 2, "threads_per_worker": 1, "resources": {"GPU": 1}},
        {"n_workers": 3, "threads_per_worker": 1, "resources": {"GPU": 1}},
    ]


def visible_devices() -> str:
    return os.environ.get("CUDA_VISIBLE_DEVICES", "none")


def test_tasks_per_gpu_starts_worker_processes_that_share_each_gpu(monkeypatch):
    """One "GPU" (the count is faked: the workers only need their environment), two tasks on
    it: two single-threaded processes, each seeing the parent's first visible GPU and
    declaring one GPU slot. (Dealing over several GPUs: the test below.)"""
    monkeypatch.setattr(runner_module, "visible_gpu_count", lambda: 1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")  # the id the parent sees
    with (
        local_cluster(None, needed=10, tasks_per_gpu=2) as cluster,
        distributed.Client(cluster) as client,
    ):
        client.wait_for_workers(2)
        seen = client.run(visible_devices)
        workers = client.scheduler_info()["workers"].values()
        assert sorted(seen.values()) == ["3", "3"]
        assert [w["resources"] for w in workers] == [{"GPU": 1}] * 2
        assert {w["nthreads"] for w in workers} == {1}
        assert len({w["id"] for w in workers}) == 2


def test_tasks_per_gpu_never_starts_more_workers_than_the_run_has_tasks(monkeypatch):
    made = []
    monkeypatch.setattr(runner_module, "visible_gpu_count", lambda: 2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(distributed, "SpecCluster", lambda workers, scheduler: made.append(workers))
    local_cluster(None, needed=3, tasks_per_gpu=4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")  # the ids the parent sees
    local_cluster(None, needed=10, tasks_per_gpu=2)
    envs = [
        [spec["options"]["env"]["CUDA_VISIBLE_DEVICES"] for spec in specs.values()]
        for specs in made
    ]
    assert envs[0] == ["0", "1", "0"], "three tasks: dealt over both GPUs"
    assert envs[1] == ["3", "5", "3", "5"], "the parent's ids, two tasks per GPU"
    with pytest.raises(ValueError, match=r"workers=9 exceeds 2 GPU\(s\) x tasks_per_gpu=4"):
        local_cluster(9, needed=20, tasks_per_gpu=4)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tasks_per_gpu": 0}, "tasks_per_gpu must be a whole number >= 1, got 0"),
        ({"tasks_per_gpu": 1.5}, "tasks_per_gpu must be a whole number >= 1, got 1.5"),
        (
            {"tasks_per_gpu": 2, "address": "tcp://scheduler:8786"},
            "tasks_per_gpu=2 sizes the local cluster, but the run attaches",
        ),
    ],
)
def test_bad_tasks_per_gpu_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        DaskRunner(**options)


def test_tasks_per_gpu_without_a_gpu_says_how_to_size_a_cpu_cluster(monkeypatch):
    monkeypatch.setattr(runner_module, "visible_gpu_count", lambda: 0)
    with pytest.raises(ValueError, match=r"no GPU is visible \(on CPUs, size the cluster with"):
        local_cluster(None, needed=4, tasks_per_gpu=2)


def test_a_local_cluster_slow_to_shut_down_is_a_warning_not_a_failed_run(caplog):
    """Seen on a loaded machine: every node finished, then the nanny's kill timed out and
    the complete run was reported as failed."""

    def close():
        raise TimeoutError

    with caplog.at_level(logging.WARNING, logger="calib_pipeline.runner"):
        runner_module.shut_down(SimpleNamespace(close=close))
    assert "did not shut down in time" in caplog.text and "results are complete" in caplog.text

    def broken():
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        runner_module.shut_down(SimpleNamespace(close=broken))


def test_gpus_without_dask_cuda_fail_with_the_install_command(monkeypatch):
    monkeypatch.setattr(runner_module, "visible_gpu_count", lambda: 2)
    monkeypatch.setitem(sys.modules, "dask_cuda", None)  # as if not installed
    with pytest.raises(
        RuntimeError,
        match=r"2 GPU\(s\) are visible but dask-cuda is not installed: pip install -e '.\[gpu\]'",
    ):
        local_cluster(None, needed=1)


# End to end: `kedro run --runner=calib_pipeline.runner.DaskRunner` on conf/test, as a user runs it.
DASK = ("--runner=calib_pipeline.runner.DaskRunner", "--runner-params=workers=2")
TIMINGS = {"seconds", "final_seconds"}  # wall-clock metrics differ between any two runs
VERSION = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}\.\d{2}\.\d{2}\.\d{3}Z$")


@pytest.fixture(scope="module")
def baseline_runs(tmp_path_factory):
    """The baseline study run by the sequential runner and by the Dask runner (2 CPU workers)."""
    from tests.test_end_to_end import kedro

    root = tmp_path_factory.mktemp("runners")
    runs = {}
    for name, runner in (("sequential", ()), ("dask", DASK)):
        data_dir, tracking = root / name, f"sqlite:///{root}/{name}.db"
        result = kedro("--pipelines=baseline", *runner, data_dir=data_dir, tracking=tracking)
        runs[name] = SimpleNamespace(
            data=data_dir, tracking=tracking, output=result.stdout + result.stderr
        )
    return runs


def saved_versions(data_dir: Path) -> dict[str, set[str]]:
    """Artifact folder (relative) -> the save versions under it."""
    found: dict[str, set[str]] = {}
    for folder in data_dir.rglob("*"):
        if (
            folder.is_dir()
            and VERSION.match(folder.name)
            and folder.parent.name != ".save_versions"
        ):
            found.setdefault(str(folder.parent.relative_to(data_dir)), set()).add(folder.name)
    return found


def nested_runs(tracking: str) -> tuple[object, dict[str, object]]:
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=tracking)
    runs = client.search_runs([client.get_experiment_by_name("calib-pipeline").experiment_id])
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    children = {
        r.data.tags["method"]: r
        for r in runs
        if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id
    }
    assert len(children) == len(runs) - 1, "every other run is nested under the parent"
    return parent, children


@pytest.mark.slow
def test_a_dask_run_scores_exactly_as_the_sequential_run(baseline_runs):
    # Exact, not to a tolerance: the same code, seeds and data on the same CPU kernels with the
    # same thread count (conf/test pins torch to one thread; Dask workers run one) perform the
    # same float operations in the same order. Any difference is a real one -- another split,
    # a stale version, a missed input -- which a tolerance would hide.
    import pandas as pd

    from tests.test_faults import latest_table

    dask = latest_table(baseline_runs["dask"].data, "baseline")
    pd.testing.assert_frame_equal(
        dask, latest_table(baseline_runs["sequential"].data, "baseline"), check_exact=True
    )
    assert len(dask) > 0 and set(dask["method"]) == {"ce", "ls_epsilon_0p05", "focal_gamma_3"}


@pytest.mark.slow
def test_every_artifact_of_a_dask_run_is_saved_under_the_runs_one_version(baseline_runs):
    dask = saved_versions(baseline_runs["dask"].data)
    assert dask.keys() == saved_versions(baseline_runs["sequential"].data).keys(), (
        "the same artifacts"
    )
    assert any("shift_logits.pt" in folder for folder in dask) and any(
        "checkpoint.pt" in folder for folder in dask
    )
    assert len(set().union(*dask.values())) == 1, (
        f"one save version across workers and driver: {dask}"
    )


@pytest.mark.slow
def test_mlflow_shows_a_dask_run_as_the_sequential_run_with_training_in_worker_processes(
    baseline_runs,
):
    parent, children = nested_runs(baseline_runs["dask"].tracking)
    reference_parent, reference = nested_runs(baseline_runs["sequential"].tracking)
    assert (
        parent.info.status == "FINISHED"
        and parent.data.params["kedro.runner"] == "calib_pipeline.runner.DaskRunner"
    )
    assert sorted(children) == sorted(reference) == ["ce", "focal_gamma_3", "ls_epsilon_0p05"]
    for method, child in children.items():
        assert child.info.status == "FINISHED" and child.info.run_name == f"{method} seed 0"
        assert child.data.params == reference[method].data.params
        metrics = {k: v for k, v in child.data.metrics.items() if k not in TIMINGS}
        assert metrics == {
            k: v for k, v in reference[method].data.metrics.items() if k not in TIMINGS
        }
        assert child.data.tags["calib.pid"] != parent.data.tags["calib.pid"], (
            "trained in a worker process"
        )
    assert reference[method].data.tags["calib.pid"] == reference_parent.data.tags["calib.pid"]
    run_log = next((baseline_runs["dask"].data / "logs").glob("*.log")).read_text()
    assert "ce seed 0: val Accuracy" in run_log, "worker logs reach the driver (and its run log)"
    node_lines = [
        line
        for line in baseline_runs["dask"].output.splitlines()
        if re.match(r"\[\s*\d+/\d+\] ", line)
    ]
    assert any("ce.train_seed_0" in line and "(process " in line for line in node_lines), (
        "a worker's node line"
    )
    names = [re.match(r"\[\s*\d+/\d+\] (\S+)", line).group(1) for line in node_lines]
    assert len(names) == len(set(names)) == int(node_lines[-1].split("]")[0].split("/")[1]), (
        "one line per node"
    )


@pytest.fixture
def mlflow_server(tmp_path):
    """A tracking server on a free local port, as a cluster would use one."""
    import socket
    import subprocess
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{tmp_path}/server.db",
            "--artifacts-destination",
            str(tmp_path / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    uri, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 180
    while True:
        try:
            urllib.request.urlopen(f"{uri}/health", timeout=2)
            break
        except OSError:
            assert server.poll() is None and time.monotonic() < deadline, (
                "the MLflow server did not start"
            )
            time.sleep(0.5)
    yield uri
    os.killpg(server.pid, signal.SIGTERM)
    server.wait(timeout=30)


@pytest.mark.slow
def test_a_node_failing_in_a_worker_fails_kedro_run_with_its_error_and_traceback(
    tmp_path, mlflow_server
):
    from tests.test_end_to_end import kedro

    blocked = tmp_path / "data" / "06_models" / "test" / "resume" / "ce" / "seed_0"
    blocked.parent.mkdir(parents=True)
    blocked.write_text("a file where ce's resume folder must go")  # its training cannot start
    result = kedro(
        "--pipelines=baseline",
        *DASK,
        data_dir=tmp_path / "data",
        tracking=mlflow_server,
        check=False,
    )
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0
    assert result.stderr.startswith("FAILED NotADirectoryError") and "resume/ce/seed_0" in output
    assert "where: node ce.train_seed_0 on " in output, (
        "the failure report names the node and its worker"
    )
    run_log = next((tmp_path / "data" / "logs").glob("*.log")).read_text()
    # the first write into the run's resume folder: its configuration record
    assert "checkpoint.py" in run_log and "in save_record" in run_log, (
        "the worker's traceback, down to the failing call"
    )
    assert not (tmp_path / "data" / "08_reporting").exists(), "nothing downstream ran"
    # with a tracking server the worker wrote its nested run itself, under the driver's parent run
    parent, children = nested_runs(mlflow_server)
    assert parent.info.status == "FAILED" and children["ce"].info.status == "FAILED"
    assert children["ce"].data.tags["calib.pid"] != parent.data.tags["calib.pid"]


def test_a_task_dask_reruns_after_its_worker_was_lost_does_not_save_twice(cluster, tmp_path):
    """Dask recomputes a finished task whose worker died before the driver collected it;
    its outputs are already saved at the run's version, so the rerun does not run the node
    again (saving again would fail the healthy run). Simulated: the outputs exist at the
    run's version before the task runs."""

    def versioned(name: str) -> TorchDataset:
        return TorchDataset(filepath=str(tmp_path / name), version=Version(None, SAVE_VERSION))

    versioned("model.pt").save({"weights": 7})  # the first attempt's save
    catalog = DataCatalog(
        datasets={"params:value": MemoryDataset(99), "model": versioned("model.pt")}
    )
    pipeline = Pipeline(
        [
            node(train_model_file, "params:value", "model", name="train", tags=["training"]),
            node(read_model_file, "model", "seen", name="read"),
        ]
    )
    assert run(pipeline, catalog, cluster)["seen"].load() == 7, "the first attempt's result, kept"

    partial = DataCatalog(
        datasets={"params:value": MemoryDataset(1), "a": versioned("a.pt"), "b": versioned("b.pt")}
    )
    versioned("a.pt").save({"weights": 1})  # died between its two saves
    both = Pipeline(
        [
            node(
                lambda v: (train_model_file(v), train_model_file(v)),
                "params:value",
                ["a", "b"],
                name="train_ab",
                tags=["training"],
            )
        ]
    )
    with pytest.raises(
        Exception,
        match=r"node train_ab ran again after its worker was lost, but its "
        r"earlier attempt in this run saved only \['a'\]",
    ):
        run(both, partial, cluster)
