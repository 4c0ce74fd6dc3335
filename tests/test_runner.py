"""The Dask runner: which nodes run where, dependency order, in-memory data and versions
across processes, worker hooks, logs, failures, cluster choice -- on a local cluster of
two worker processes shared by the module's tests (the nodes below run in them)."""

from __future__ import annotations

import logging
import os
import sys
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

import distributed
import pytest
from kedro.framework.hooks import hook_impl
from kedro.framework.hooks.manager import _create_hook_manager
from kedro.io import DataCatalog, MemoryDataset, Version
from kedro.pipeline import Pipeline, node

from calib_pipeline import runner as runner_module
from calib_pipeline.kedro_datasets import TorchDataset
from calib_pipeline.runner import DaskRunner, local_cluster

SAVE_VERSION = "2026-11-26T10.00.00.000Z"


@pytest.fixture(scope="module")
def cluster():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as local:
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


def log_from_task(value: int) -> int:
    logging.getLogger("calib_pipeline.test_runner").info("trained %d in process %d", value, os.getpid())
    return value


def test_nodes_run_in_dependency_order_and_in_memory_data_crosses_processes(cluster):
    pipeline = Pipeline([
        node(double, "params:base", "numbers", name="double"),  # driver
        node(square_with_pid, "numbers", ["squares", "training_pid"], name="square", tags=["training"]),
        node(plan, "squares", "shift_plan", name="plan", tags=["shift"]),  # worker to worker
        node(report, ["shift_plan", "training_pid"], "result", name="report"),  # back on the driver
    ])
    catalog = DataCatalog(datasets={"params:base": MemoryDataset(3)})
    total, training_pid, report_pid = run(pipeline, catalog, cluster)["result"].load()
    assert total == 3 * 3 + 6 * 6
    assert report_pid == os.getpid() and training_pid != os.getpid(), "training ran in a worker process"


def test_independent_nodes_run_concurrently(cluster, tmp_path):
    pipeline = Pipeline([
        node(wait_for_partner, ["params:folder", "params:a", "params:b"], "pid_a", name="a", tags=["training"]),
        node(wait_for_partner, ["params:folder", "params:b", "params:a"], "pid_b", name="b", tags=["training"]),
    ])
    catalog = DataCatalog(datasets={
        "params:folder": MemoryDataset(str(tmp_path)), "params:a": MemoryDataset("a"), "params:b": MemoryDataset("b"),
    })
    outputs = run(pipeline, catalog, cluster)
    assert outputs["pid_a"].load() != outputs["pid_b"].load(), "two workers, one task each"


def test_a_failing_node_fails_the_run_with_its_own_error_and_worker_traceback(cluster, tmp_path):
    downstream = TorchDataset(filepath=str(tmp_path / "after.pt"))
    pipeline = Pipeline([
        node(failing_training, "params:value", "trained", name="train", tags=["training"]),
        node(read_model_file, "trained", "after", name="after"),
    ])
    catalog = DataCatalog(datasets={"params:value": MemoryDataset(1), "after": downstream})
    with pytest.raises(ValueError, match="unknown calibrator 'tsx'") as raised:
        run(pipeline, catalog, cluster)
    frames = [frame.name for frame in traceback.extract_tb(raised.value.__traceback__)]
    assert frames[-2:] == ["failing_training", "_check_calibrator"], "the worker's frames, up to the raise"
    assert not downstream.exists(), "nothing downstream of the failure runs"


def test_outputs_share_the_session_save_version_and_the_driver_loads_the_new_ones(cluster, tmp_path):
    def versioned(name: str) -> TorchDataset:
        return TorchDataset(filepath=str(tmp_path / name), version=Version(None, SAVE_VERSION))

    old = tmp_path / "model.pt" / "2000-01-01T00.00.00.000Z" / "model.pt"
    TorchDataset(filepath=str(old)).save({"weights": -1})
    catalog = DataCatalog(datasets={"params:value": MemoryDataset(7), "model": versioned("model.pt"),
                                    "other": versioned("other.pt")})
    assert catalog.load("model") == {"weights": -1}  # the driver now holds "latest" = the old version
    pipeline = Pipeline([
        node(train_model_file, "params:value", "model", name="train", tags=["training"]),
        node(train_model_file, "params:value", "other", name="logits", tags=["logits"]),
        node(read_model_file, "model", "seen", name="read"),
    ])
    assert run(pipeline, catalog, cluster)["seen"].load() == 7, "the worker's version, not a cached one"
    assert sorted(p.name for p in (tmp_path / "model.pt").iterdir()) == ["2000-01-01T00.00.00.000Z", SAVE_VERSION]
    assert [p.name for p in (tmp_path / "other.pt").iterdir()] == [SAVE_VERSION]


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
    hook_manager = _create_hook_manager()
    hook_manager.register(hooks)
    pipeline = Pipeline([
        node(double, "params:base", "numbers", name="double"),
        node(square_with_pid, "numbers", ["squares", "training_pid"], name="square", tags=["training"]),
    ])
    outputs = run(pipeline, DataCatalog(datasets={"params:base": MemoryDataset(2)}), cluster, hook_manager)
    assert hooks.local == ["double"], "the driver's hooks see the driver's nodes"
    assert hooks.reports == [[("square", outputs["training_pid"].load())]]


def test_log_records_of_a_task_are_logged_by_the_driver(cluster, caplog):
    pipeline = Pipeline([node(log_from_task, "params:value", "done", name="train", tags=["training"])])
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
        n_workers=1, threads_per_worker=2, processes=True, resources={"GPU": 1}, dashboard_address=":0"
    ) as one_gpu:
        pipeline = Pipeline([
            node(timed_sleep, "params:seconds", "first", name="first", tags=["training"]),
            node(timed_sleep, "params:seconds", "second", name="second", tags=["training"]),
        ])
        outputs = run(pipeline, DataCatalog(datasets={"params:seconds": MemoryDataset(0.5)}), one_gpu.scheduler_address)
    (start_a, end_a), (start_b, end_b) = sorted([outputs["first"].load(), outputs["second"].load()])
    assert start_b >= end_a, "two threads but one GPU: the tasks ran one after the other"


@pytest.mark.parametrize(("workers", "message"), [(0, "at least 1"), (1.5, "whole number"), ("2", "whole number")])
def test_bad_worker_counts_are_refused(workers, message):
    with pytest.raises(ValueError, match=message):
        DaskRunner(workers=workers)


def test_workers_cannot_size_an_existing_cluster_named_by_dask_config(monkeypatch):
    import dask

    with dask.config.set({"scheduler-address": "tcp://scheduler:8786"}):
        with pytest.raises(ValueError, match="attaches to the cluster at tcp://scheduler:8786"):
            DaskRunner(workers=2)


def test_local_cluster_has_one_single_threaded_worker_per_gpu_each_declaring_it(monkeypatch):
    made = []
    monkeypatch.setattr(runner_module, "visible_gpu_count", lambda: 4)
    monkeypatch.setitem(sys.modules, "dask_cuda", SimpleNamespace(LocalCUDACluster=lambda **kw: made.append(kw)))
    local_cluster(None, needed=10)
    local_cluster(None, needed=2)  # two remote nodes: two GPUs are enough
    local_cluster(3, needed=10)
    assert made == [
        {"n_workers": 4, "threads_per_worker": 1, "resources": {"GPU": 1}},
        {"n_workers": 2, "threads_per_worker": 1, "resources": {"GPU": 1}},
        {"n_workers": 3, "threads_per_worker": 1, "resources": {"GPU": 1}},
    ]


def test_gpus_without_dask_cuda_fail_with_the_install_command(monkeypatch):
    monkeypatch.setattr(runner_module, "visible_gpu_count", lambda: 2)
    monkeypatch.setitem(sys.modules, "dask_cuda", None)  # as if not installed
    with pytest.raises(RuntimeError, match=r"2 GPU\(s\) are visible but dask-cuda is not installed: pip install -e '.\[gpu\]'"):
        local_cluster(None, needed=1)
