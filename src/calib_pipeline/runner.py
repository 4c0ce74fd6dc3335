"""Run a Kedro pipeline on a Dask.distributed cluster: the heavy per-run nodes (training,
logits, shift logits) as tasks on the cluster's workers, one GPU each; the cheap ones on
the driver, the ``kedro run`` process.

    kedro run --pipelines=focal_meta --runner=calib_pipeline.runner.DaskRunner
    kedro run ... --runner-params=workers=2                       # size of the local cluster
    kedro run ... --runner-params=tasks_per_gpu=4                 # 4 tasks share each GPU
    kedro run ... --runner-params=address=tcp://scheduler:8786    # an existing cluster
    DASK_SCHEDULER_ADDRESS=tcp://scheduler:8786 kedro run ...     # the same, from Dask's config

Without an address the runner starts a local cluster for the run: one worker process per
visible GPU (dask-cuda's ``LocalCUDACluster``: each worker sees its own GPU through
``CUDA_VISIBLE_DEVICES``), else CPU worker processes; one thread each. When the workers
declare a ``GPU`` resource, every task asks for ``GPU=1``. ``docs/scaling.md`` covers
clusters, SLURM, shared storage and MLflow servers.

How a run crosses processes:

- **Data.** Every task gets the session's catalog, pickled once by the driver (cloudpickle),
  so a worker saves under the session's save version -- one version per ``kedro run`` -- to
  the same (shared) storage, and loads what other nodes of the run saved there at that
  version (never a newer one another run saved in the meantime); inputs made by earlier
  runs are read at the versions that were latest when the run started. In-memory datasets made
  during the run (``shift_sets``) stay on the cluster as Dask futures and travel from worker to
  worker; the driver sees each once, when its task is collected, and keeps it only if a node of its
  own reads it.
- **Hooks.** Hooks that offer ``for_worker()`` (the MLflow hook) give the driver a picklable
  copy that runs the node and dataset hooks of a remote node in its worker; what the copy's
  ``worker_report()`` returns after the node comes back to the driver hook's
  ``merge_worker_report()``. Other hooks see the driver's nodes only.
- **Logs.** A task's ``kedro`` and ``calib_pipeline`` log records are sent to the driver
  (on a Dask event topic of this run) and logged there as if the node had run locally.
- **Errors.** A failing node fails the run with its own exception and worker-side
  traceback; the tasks still queued are cancelled and a local cluster is shut down. What
  finished stays saved, and a rerun continues every interrupted training from its
  per-epoch resume checkpoint.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import socket
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import chain
from time import monotonic, perf_counter
from typing import Any

import cloudpickle
import pluggy
from kedro.io import CatalogProtocol, DatasetError
from kedro.pipeline import Pipeline
from kedro.pipeline.node import Node
from kedro.runner import AbstractRunner, SequentialRunner
from kedro.runner.task import Task

from calib_pipeline.kedro_compat import create_hook_manager
from calib_pipeline.kedro_datasets import read_own_version, saved_at_save_version

# Dask logs every scheduler and worker event at INFO, into Kedro's handlers: WARNING unless
# the user's Dask config says otherwise, read by this process and inherited by local workers.
os.environ.setdefault("DASK_DISTRIBUTED__LOGGING__DISTRIBUTED", "warning")
try:
    import dask
    import distributed
    from tblib import pickling_support
except ImportError as missing:  # the distributed path is an optional extra
    raise ImportError(
        "calib_pipeline.runner.DaskRunner needs Dask.distributed: pip install -e '.[dask]' "
        "(or '.[gpu]', which adds dask-cuda for one worker per GPU)"
    ) from missing

logger = logging.getLogger(__name__)

# Nodes with one of these tags are tasks on the cluster; the rest run on the driver.
REMOTE_TAGS = frozenset({"training", "logits", "shift"})
# Loggers whose records a task sends to the driver.
FORWARDED_LOGGERS = ("kedro", "calib_pipeline")
GPU = "GPU"
# How long a run waits while its cluster has no worker at all, and how often it looks.
NO_WORKER_TIMEOUT = 120.0
POLL_SECONDS = 2.0
LOCALHOST = "127.0.0.1"


class DaskRunner(AbstractRunner):
    """Runs the training, logits and shift nodes of a pipeline as Dask tasks, concurrently
    where the pipeline allows, and every other node on the driver, in dependency order."""

    def __init__(
        self,
        address: str | None = None,
        workers: int | None = None,
        is_async: bool = False,
        no_worker_timeout: float = NO_WORKER_TIMEOUT,
        tasks_per_gpu: int = 1,
    ) -> None:
        """
        Args:
            address: the scheduler of an existing cluster (``tcp://host:8786``); default
                Dask's ``scheduler-address`` setting (``DASK_SCHEDULER_ADDRESS``), else a
                local cluster is started for the run.
            workers: worker processes of the local cluster; default ``tasks_per_gpu`` per
                visible GPU, else one per CPU core, and never more than the run has remote
                nodes.
            is_async: load and save a node's datasets in threads (Kedro's ``--async``).
            no_worker_timeout: seconds the cluster may have no worker while tasks wait before
                the run fails (its tasks would otherwise wait for ever: a local cluster whose
                workers the scheduler dropped, an attached one whose jobs ended).
            tasks_per_gpu: worker processes that share each GPU of the local cluster, one
                task each: for small models that leave a GPU mostly idle (docs/scaling.md
                says where it pays). Processes, not threads: a training sets torch's
                process-wide settings (threads, deterministic kernels).
        """
        super().__init__(is_async=is_async)
        self._address = address or dask.config.get("scheduler-address", None)
        if workers is not None and (type(workers) is not int or workers < 1):
            raise ValueError(f"workers must be a whole number of at least 1, got {workers!r}")
        if workers is not None and self._address:
            raise ValueError(
                f"workers={workers} sizes the local cluster, but the run attaches to the cluster "
                f"at {self._address}, whose workers are started there (dask worker, dask-jobqueue)"
            )
        self._workers = workers
        if not isinstance(no_worker_timeout, (int, float)) or not no_worker_timeout > 0:
            raise ValueError(f"no_worker_timeout must be seconds > 0, got {no_worker_timeout!r}")
        self._no_worker_timeout = float(no_worker_timeout)
        if type(tasks_per_gpu) is not int or tasks_per_gpu < 1:
            raise ValueError(f"tasks_per_gpu must be a whole number >= 1, got {tasks_per_gpu!r}")
        if tasks_per_gpu > 1 and self._address:
            raise ValueError(
                f"tasks_per_gpu={tasks_per_gpu} sizes the local cluster, but the run attaches to "
                f"the cluster at {self._address}: start several workers per GPU there"
            )
        self._tasks_per_gpu = tasks_per_gpu

    def _get_executor(self, max_workers: int) -> None:
        """Dask schedules the tasks: AbstractRunner's executor loop is not used."""
        return None

    def _run(
        self,
        pipeline: Pipeline,
        catalog: CatalogProtocol,
        hook_manager: Any = None,
        run_id: str | None = None,
    ) -> None:
        remote = [node for node in pipeline.nodes if is_remote(node)]
        if not remote:  # nothing heavy: a cluster would only cost its start-up
            logger.info("Dask: no training, logits or shift node to distribute; running here")
            SequentialRunner(is_async=self._is_async)._run(pipeline, catalog, hook_manager, run_id)
            return
        with cluster_client(
            self._address, self._workers, len(remote), self._tasks_per_gpu
        ) as client:
            run = _DistributedRun(
                client,
                pipeline,
                catalog,
                hook_manager,
                run_id,
                self._is_async,
                no_worker_timeout=self._no_worker_timeout,
            )
            try:
                run.execute()
            except Exception:
                self._suggest_resume_scenario(pipeline, run.done, catalog)
                raise


def is_remote(node: Node) -> bool:
    """Whether ``node`` is a task on the cluster (heavy, one per run) or runs on the driver."""
    return bool(REMOTE_TAGS & set(node.tags))


def visible_gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


def local_cluster(
    workers: int | None, needed: int, tasks_per_gpu: int = 1
) -> distributed.LocalCluster | distributed.SpecCluster:
    """One worker process per visible GPU (dask-cuda), or ``tasks_per_gpu`` of them sharing
    each GPU, else one per CPU core; one thread each, at most ``needed`` of them unless
    ``workers`` says how many."""
    gpus = visible_gpu_count()
    if tasks_per_gpu > 1:
        if not gpus:
            raise ValueError(
                f"tasks_per_gpu={tasks_per_gpu} shares GPUs between tasks, but no GPU is visible "
                "(on CPUs, size the cluster with workers=N)"
            )
        return shared_gpu_cluster(gpus, tasks_per_gpu, workers or min(gpus * tasks_per_gpu, needed))
    if gpus:
        try:
            from dask_cuda import LocalCUDACluster
        except ImportError as missing:
            raise RuntimeError(
                f"{gpus} GPU(s) are visible but dask-cuda is not installed: "
                "pip install -e '.[gpu]' (or hide the GPUs, CUDA_VISIBLE_DEVICES=, for CPU workers)"
            ) from missing
        return LocalCUDACluster(
            n_workers=workers or min(gpus, needed), threads_per_worker=1, resources={GPU: 1}
        )
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return distributed.LocalCluster(
        n_workers=workers or min(cores or 1, needed), threads_per_worker=1, processes=True
    )


def shared_gpu_cluster(gpus: int, tasks_per_gpu: int, workers: int) -> distributed.SpecCluster:
    """``workers`` single-threaded worker processes dealt round-robin over the visible GPUs,
    at most ``tasks_per_gpu`` per GPU; each sees only its GPU (``CUDA_VISIBLE_DEVICES``, set
    by its nanny before the process starts) and declares one ``GPU`` slot, so each runs one
    task at a time. (dask-cuda's ``LocalCUDACluster`` starts one worker per GPU.)"""
    if workers > gpus * tasks_per_gpu:
        raise ValueError(f"workers={workers} exceeds {gpus} GPU(s) x tasks_per_gpu={tasks_per_gpu}")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    ids = [d.strip() for d in visible.split(",") if d.strip()][:gpus] or [
        str(index) for index in range(gpus)
    ]
    specs = {}
    for index in range(workers):
        gpu = ids[index % gpus]
        specs[f"gpu-{gpu}-task-{index // gpus}"] = {
            "cls": distributed.Nanny,
            "options": {
                "nthreads": 1,
                "resources": {GPU: 1},
                "env": {"CUDA_VISIBLE_DEVICES": gpu},
                "host": LOCALHOST,
            },
        }
    # on the loopback interface, as LocalCluster does: no name lookup of this host's address
    scheduler = {
        "cls": distributed.Scheduler,
        "options": {"dashboard_address": ":0", "host": LOCALHOST},
    }
    return distributed.SpecCluster(workers=specs, scheduler=scheduler)


@contextlib.contextmanager
def cluster_client(
    address: str | None, workers: int | None, needed: int, tasks_per_gpu: int = 1
) -> Iterator[distributed.Client]:
    """A client of the cluster at ``address`` (left running afterwards), or of a local
    cluster started here and shut down when the run ends."""
    if address:
        with distributed.Client(address) as client:
            if not client.scheduler_info()["workers"]:
                logger.info("Dask: waiting for the first worker of %s", address)
                client.wait_for_workers(1)
            workers_now = len(client.scheduler_info()["workers"])
            logger.info("Dask: attached to %s (%d workers)", address, workers_now)
            yield client
        return
    started = perf_counter()
    cluster = local_cluster(workers, needed, tasks_per_gpu)
    try:
        with distributed.Client(cluster) as client:
            info = client.scheduler_info()["workers"].values()
            kind = "GPU" if any(GPU in w.get("resources", {}) for w in info) else "CPU"
            # the dashboard's pages need bokeh (the gpu extra brings it): no dead link otherwise
            has_dashboard = importlib.util.find_spec("bokeh") is not None
            dashboard = f"; dashboard {client.dashboard_link}" if has_dashboard else ""
            logger.info(
                "Dask: local cluster of %d %s worker(s) started in %.1f s%s",
                len(info),
                kind,
                perf_counter() - started,
                dashboard,
            )
            yield client
    finally:
        shut_down(cluster)


def shut_down(cluster: distributed.deploy.Cluster) -> None:
    """Close a local cluster after the run. A shutdown that times out (a worker process slow
    to exit on a loaded machine) is a warning, not a failure: every node has finished, and
    an exception here would report a complete run as failed."""
    try:
        cluster.close()
    except TimeoutError:
        logger.warning(
            "Dask: the local cluster did not shut down in time (a worker process slow to exit); "
            "the run's results are complete (check for left-over dask worker processes if the "
            "machine stays busy)"
        )


@dataclass
class NodeOutcome:
    """What a task sends back: where it ran, its in-memory outputs, the reports of its
    worker hooks, and the node's exception (with its worker-side traceback) if it failed."""

    node: str
    pid: int
    host: str
    memory_outputs: dict[str, Any] = field(default_factory=dict)
    reports: list[Any] = field(default_factory=list)
    error: BaseException | None = None

    def fail(self, error: Exception) -> None:
        """Keep ``error`` with its traceback (tblib makes tracebacks picklable); an exception
        that cannot be pickled is sent as a RuntimeError naming it."""
        try:
            pickling_support.install(error)
            cloudpickle.dumps(error)
        except Exception:  # noqa: BLE001 -- any unpicklable exception still reaches the driver
            named = RuntimeError(f"{type(error).__qualname__}: {error}")
            error = named.with_traceback(error.__traceback__)
            pickling_support.install(error)
        self.error = error


@dataclass(frozen=True)
class TaskContext:
    """What every task of a run needs besides its node; sent with each task, so each task
    unpickles its own catalog and hook copies (and a rerun task after a lost worker has
    everything again)."""

    catalog_snapshot: bytes  # the session's catalog: its save version, parameters, run_info
    hooks: tuple[Any, ...]  # the driver's hooks' worker copies
    run_id: str | None
    is_async: bool
    log_topic: str
    log_levels: dict[str, int]


def run_node_on_worker(
    node: Node,
    context: TaskContext,
    shared_inputs: dict[str, NodeOutcome],
    saved_this_run: frozenset[str] = frozenset(),
) -> NodeOutcome:
    """The Dask task of one node: load its inputs from the session's catalog (and its
    in-memory inputs from the tasks that made them), run it with the worker hooks, save
    its outputs. An input in ``saved_this_run`` is read at the run's save version (another
    run may have saved a newer one since); other inputs at the version the driver's catalog
    fixed at the start of the run (``OwnVersionsHook``), or else their latest. Never
    raises: a failure is part of the outcome, so the hooks' reports of a failed node reach
    the driver too."""
    outcome = NodeOutcome(node=node.name, pid=os.getpid(), host=socket.gethostname())
    with _logs_sent_to_driver(context.log_topic, context.log_levels):
        try:
            catalog = cloudpickle.loads(context.catalog_snapshot)
            for name in node.inputs:
                if name in shared_inputs:
                    catalog.get(name).save(shared_inputs[name].memory_outputs[name])
                elif name in saved_this_run:
                    read_own_version(catalog, name)  # never a newer version of another run
                # an input of earlier runs: the version the driver fixed at the run's start
            if _saved_by_an_earlier_attempt(node, catalog):
                outcome.reports = [None for _ in context.hooks]
                return outcome
            hook_manager = create_hook_manager()
            for hook in context.hooks:
                hook_manager.register(hook)
            Task(
                node=node,
                catalog=catalog,
                is_async=context.is_async,
                hook_manager=hook_manager,
                run_id=context.run_id,
            ).execute()
            outcome.memory_outputs = {
                name: catalog.get(name).load() for name in node.outputs if _in_memory(catalog, name)
            }
        except Exception as error:  # noqa: BLE001 -- reported to the driver, which raises it
            outcome.fail(error)
        outcome.reports = [getattr(hook, "worker_report", _no_report)() for hook in context.hooks]
    return outcome


def _saved_by_an_earlier_attempt(node: Node, catalog: CatalogProtocol) -> bool:
    """Whether an earlier attempt of this task in this run saved all the node's outputs.

    Dask recomputes a finished task whose worker is lost before the driver collected its
    result (the driver may be busy running one of its own nodes); the rerun would save
    at the run's version again, which Kedro refuses. Every output already saved at that
    version: the node is not run again. Only some of them: the earlier attempt died
    between its saves, and the error says how to go on.
    """
    outputs = [name for name in node.outputs if not _in_memory(catalog, name)]
    saved = [name for name in outputs if saved_at_save_version(catalog, name)]
    if not saved:
        return False
    if len(saved) < len(outputs) or len(outputs) < len(node.outputs):
        raise DatasetError(
            f"node {node.name} ran again after its worker was lost, but its earlier attempt "
            f"in this run saved only {saved} of its outputs {list(node.outputs)}; rerun the "
            "command (a new run saves under a new version; finished trainings are reused)"
        )
    logger.warning(
        "node %s: its outputs %s were saved by an earlier attempt in this run (its worker was "
        "lost before the driver collected the result); not run again",
        node.name,
        saved,
    )
    return True


def _no_report() -> None:
    return None


def _in_memory(catalog: CatalogProtocol, name: str) -> bool:
    """Datasets that live in a process's memory (``MemoryDataset``, parameters)."""
    dataset = catalog.get(name, fallback_to_runtime_pattern=True)
    return bool(getattr(dataset, "_EPHEMERAL", False))


class _DriverLogHandler(logging.Handler):
    """Sends the records of one task's thread to the driver as Dask events (the worker may
    run other tasks, of this run or another, in other threads)."""

    def __init__(self, topic: str) -> None:
        super().__init__()
        self._topic = topic
        self._thread = threading.get_ident()

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread != self._thread:
            return
        try:
            if record.exc_info:
                record.exc_text = logging.Formatter().formatException(record.exc_info)
            attributes = {key: _portable(value) for key, value in record.__dict__.items()}
            attributes.update(msg=record.getMessage(), args=None, exc_info=None)
            attributes.pop("message", None)
            distributed.get_worker().log_event(self._topic, attributes)
        except Exception:  # noqa: BLE001 -- logging must never fail the task
            self.handleError(record)


def _portable(value: Any) -> Any:
    """A log record attribute as something Dask's messages carry (msgpack types)."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, (list, tuple)):
        return [_portable(item) for item in value]
    return str(value)


@contextlib.contextmanager
def _logs_sent_to_driver(topic: str, levels: dict[str, int]) -> Iterator[None]:
    """While a task runs, its records of the forwarded loggers go to the driver -- only
    there: a local cluster's workers share the driver's terminal, and would repeat them."""
    handler = _DriverLogHandler(topic)
    for name, level in levels.items():
        forwarded = logging.getLogger(name)
        forwarded.setLevel(level)  # as on the driver (a worker's default is WARNING)
        forwarded.propagate = False
        forwarded.addHandler(handler)
    try:
        yield
    finally:
        for name in levels:
            logging.getLogger(name).removeHandler(handler)


def _worker_copies(hook_manager: Any) -> list[tuple[Any, Any]]:
    """(driver hook, its worker copy) for every hook that offers one; the copy runs the
    node and dataset hooks of remote nodes in the worker."""
    if not isinstance(hook_manager, pluggy.PluginManager):  # Kedro's null manager: no hooks
        return []
    offering = [hook for hook in hook_manager.get_plugins() if hasattr(hook, "for_worker")]
    copies = [(hook, hook.for_worker()) for hook in offering]
    return [(hook, copy) for hook, copy in copies if copy is not None]


def _log_on_driver(event: tuple[float, dict[str, Any]]) -> None:
    _, attributes = event
    record = logging.makeLogRecord(attributes)
    logging.getLogger(record.name).handle(record)


class _DistributedRun:
    """One pipeline run on a cluster: submits each remote node once its inputs exist, runs
    the driver's nodes in between, and collects the tasks as they finish."""

    def __init__(
        self,
        client: distributed.Client,
        pipeline: Pipeline,
        catalog: CatalogProtocol,
        hook_manager: Any,
        run_id: str | None,
        is_async: bool,
        *,
        no_worker_timeout: float = NO_WORKER_TIMEOUT,
    ) -> None:
        self.client, self.pipeline, self.catalog = client, pipeline, catalog
        self.hook_manager, self.run_id, self.is_async = hook_manager, run_id, is_async
        self.no_worker_timeout = no_worker_timeout
        self.done: set[Node] = set()
        self._in_flight: dict[distributed.Future, Node] = {}
        self._local_ready: list[Node] = []
        self._shared: dict[str, distributed.Future] = {}  # in-memory dataset -> future holding it
        self._saved: set[str] = set()  # persisted datasets this run has saved (at its version)
        self._load_counts = Counter(chain.from_iterable(n.inputs for n in pipeline.nodes))
        self._position = {node: index for index, node in enumerate(pipeline.nodes)}  # topological
        self._memory = {n for nd in pipeline.nodes for n in nd.outputs if _in_memory(catalog, n)}
        self._read_on_driver = {n for nd in pipeline.nodes if not is_remote(nd) for n in nd.inputs}
        self._read_on_driver |= pipeline.outputs()
        workers = client.scheduler_info()["workers"].values()
        self._resources = {GPU: 1} if any(GPU in w.get("resources", {}) for w in workers) else None
        self._hook_copies = _worker_copies(hook_manager)
        self._context = TaskContext(
            catalog_snapshot=cloudpickle.dumps(catalog),
            hooks=tuple(copy for _, copy in self._hook_copies),
            run_id=run_id,
            is_async=is_async,
            log_topic=f"calib-pipeline-logs-{run_id}-{uuid.uuid4().hex[:8]}",
            log_levels={
                name: logging.getLogger(name).getEffectiveLevel() for name in FORWARDED_LOGGERS
            },
        )

    def execute(self) -> None:
        """Run every node of the pipeline; raises the first failure, after cancelling the
        tasks still queued."""
        todo = set(self.pipeline.nodes)
        dependencies = self.pipeline.node_dependencies
        self.client.subscribe_topic(self._context.log_topic, _log_on_driver)
        try:
            while todo or self._in_flight or self._local_ready:
                for future in [f for f in self._in_flight if f.done()]:
                    self._collect(future)
                ready = sorted(
                    (n for n in todo if dependencies[n] <= self.done), key=self._position.get
                )
                todo.difference_update(ready)
                for node in ready:
                    if is_remote(node):
                        self._submit(node)
                    else:
                        self._local_ready.append(node)
                if self._local_ready:
                    self._run_on_driver(self._local_ready.pop(0))
                elif self._in_flight:
                    self._wait_for_a_task()
                elif todo:
                    names = sorted(n.name for n in todo)
                    raise RuntimeError(f"nodes {names} can never run: their inputs are never made")
        finally:
            if self._in_flight:  # a node failed, or the run was interrupted
                self.client.cancel(list(self._in_flight))
            self.client.unsubscribe_topic(self._context.log_topic)

    def _wait_for_a_task(self) -> None:
        """Until a task in flight finishes; fails the run once the cluster has had no worker
        for ``no_worker_timeout`` seconds (its tasks would wait for ever)."""
        without_workers_since = None
        while True:
            try:
                distributed.wait(
                    list(self._in_flight), timeout=POLL_SECONDS, return_when="FIRST_COMPLETED"
                )
                return
            except TimeoutError:
                pass
            if self.client.scheduler_info()["workers"]:
                without_workers_since = None
                continue
            without_workers_since = without_workers_since or monotonic()
            if monotonic() - without_workers_since >= self.no_worker_timeout:
                waiting = sorted(node.name for node in self._in_flight.values())
                raise RuntimeError(
                    f"the Dask cluster has had no worker for {self.no_worker_timeout:.0f} s while "
                    f"{len(waiting)} task(s) wait ({', '.join(waiting[:3])}"
                    f"{', ...' if len(waiting) > 3 else ''}): its workers were lost (the log's "
                    "distributed warnings say why; a worker killed for memory, or dropped by "
                    "the scheduler on an overloaded machine). What finished is saved; rerun to "
                    "continue (runner option no_worker_timeout=<seconds> waits longer)"
                )

    def _submit(self, node: Node) -> None:
        shared = {name: self._shared_input(name) for name in node.inputs if name in self._memory}
        saved_this_run = frozenset(n for n in node.inputs if n in self._saved)
        future = self.client.submit(
            run_node_on_worker,
            node,
            self._context,
            shared,
            saved_this_run,
            key=f"{node.name}-{uuid.uuid4().hex[:8]}",
            pure=False,
            resources=self._resources,
            priority=self._position[node],  # later stages first: a run's results arrive early
        )
        self._in_flight[future] = node

    def _shared_input(self, name: str) -> distributed.Future:
        """The future holding an in-memory input on the cluster; one a driver node made is
        sent to the cluster once."""
        if name not in self._shared:
            made_here = NodeOutcome(
                node="driver",
                pid=os.getpid(),
                host=socket.gethostname(),
                memory_outputs={name: self.catalog.get(name).load()},
            )
            self._shared[name] = self.client.scatter(made_here, hash=False)
        return self._shared[name]

    def _collect(self, future: distributed.Future) -> None:
        node = self._in_flight.pop(future)
        outcome: NodeOutcome = future.result()  # a lost worker or a cancelled task raises here
        for (plugin, _), report in zip(self._hook_copies, outcome.reports):
            if hasattr(plugin, "merge_worker_report"):
                plugin.merge_worker_report(report)
        if outcome.error is not None:
            # the log file's record; the console's failure report names the node and worker
            logger.info("Node %s failed on %s (process %d)", node.name, outcome.host, outcome.pid)
            raise outcome.error
        for name in node.outputs:
            if name not in self._memory:
                read_own_version(self.catalog, name)  # the worker's, not another run's
                self._saved.add(name)
                continue
            if name in self._read_on_driver:
                self.catalog.get(name).save(outcome.memory_outputs[name])
            self._shared[name] = future
        logger.info("Completed node %s on %s (process %d)", node.name, outcome.host, outcome.pid)
        self._completed(node)

    def _run_on_driver(self, node: Node) -> None:
        Task(
            node=node,
            catalog=self.catalog,
            is_async=self.is_async,
            hook_manager=self.hook_manager,
            run_id=self.run_id,
        ).execute()
        for name in node.outputs:
            if name not in self._memory:
                read_own_version(self.catalog, name)  # also without OwnVersionsHook
                self._saved.add(name)
        logger.info("Completed node %s", node.name)
        self._completed(node)

    def _completed(self, node: Node) -> None:
        self.done.add(node)
        logger.info("Completed %d out of %d tasks", len(self.done), len(self.pipeline.nodes))
        AbstractRunner._release_datasets(node, self.catalog, self._load_counts, self.pipeline)
        for name in [n for n in self._shared if self._load_counts[n] < 1]:
            del self._shared[name]  # the cluster may free it: every reader has run
