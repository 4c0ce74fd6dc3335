"""Project hooks: remember the run environment, give nodes the session's run id, and
track runs in MLflow.

MLflow layout, made for the UI's compare and sort views:

- one parent run per ``kedro run``, tagged with the environment, dataset, protocol, the
  studies it evaluates and the git commit; it holds each study's summary metrics
  (``<study>.<method>.test.<metric>.<calibrator>``: clean test accuracy / ECE / NLL, mean
  over seeds), the claims report's verdict counts (``<study>.claims.holds``, ...) and the
  reporting outputs as artifacts: a report folder as the catalog wrote it
  (``<namespace>/<report>/``), the evaluation tables (tidy metrics, reliability bins) as CSV;
- one nested run per (method, seed), opened when its training node starts (per-epoch
  history as it is logged), with its parameters as readable strings, ``final_<metric>``
  = the metrics of the epoch training selected (``selected_epoch``) and, once the study is
  evaluated, the clean per-calibrator metrics ``<split>.<metric>.<calibrator>``
  (``test.ece.ts``, ``test.nll.none``, ``val.ece.ts``). A run whose training this ``kedro run``
  reused (cached checkpoints) gets a nested run of its own for these metrics, tagged
  ``calib.training = reused`` and ``kedro.training_run_id``; a nested run made by a Dask
  worker is found by its tags.

The tracking URI is ``MLFLOW_TRACKING_URI`` when set, else a SQLite file at the
project root; a new experiment keeps its artifacts at ``artifact_location`` (mlflow.yml),
else beside a SQLite file (``mlruns/``). ``CALIB_MLFLOW=off`` disables tracking.

Tracking never costs a result: every hook body is guarded (a failure is one warning and
tracking stops for the run), HTTP backends get a short timeout and one retry, a training
run is logged only after the catalog saved its outputs, credentials in the URI are
masked in every log line, and runs of a process that died (Ctrl-C, kill -9) end
``KILLED`` at exit or on the next start.

Under the Dask runner (``calib_pipeline.runner``) a training node runs in a worker process:
the worker runs a copy of the tracking hook (:meth:`MlflowTrackingHook.for_worker`) that opens
the nested run under the driver's parent run. A tracking server is written to by the worker
itself; a SQLite file only by the driver (SQLite takes one writer at a time and may not even
be on the worker's host): the worker records its calls and the driver replays them
(:meth:`MlflowTrackingHook.merge_worker_report`), with the worker's timestamps and process.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import json
import logging
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
from kedro.framework.hooks import hook_impl

from calib_pipeline.kedro_datasets import read_latest_version_of_now, read_own_version
from calib_pipeline.pipelines.run_info import RUN_INFO, run_info
from calib_pipeline.protocols import PROTOCOL

logger = logging.getLogger(__name__)
# the run's console lines (calib_pipeline.console, conf/logging.yml)
console = logging.getLogger("calib_pipeline.console")

RUN_ENV: dict[str, Any] = {"env": None}
# The environment Kedro runs when none is named (settings.CONFIG_LOADER_ARGS).
DEFAULT_RUN_ENV = "local"


class RunEnvironmentHook:
    """Records the session's configuration loader, so the pipeline registry reads the
    structural lists (studies, methods, seeds) of the session's environment, runtime
    ``--params`` included."""

    @hook_impl
    def after_context_created(self, context) -> None:
        RUN_ENV["env"] = context.env
        RUN_ENV["project_path"] = str(context.project_path)
        RUN_ENV["config_loader"] = context.config_loader


# what makes each cached artifact: a missing one is named with the stage to run first
PRODUCING_STAGE = (
    ("split_", "data_split"),
    (".checkpoint", "training"),
    (".history", "training"),
    (".logits", "logits"),
    (".calibrators", "posthoc"),
    (".shift_logits", "shift"),
    ("shift_sets", "shift"),
    (".metrics", "reporting"),
    (".reliability_bins", "reporting"),
)


STAGE_ORDER = ("data_split", "training", "logits", "shift", "posthoc", "reporting")


def producing_stage(dataset: str) -> str | None:
    """The stage whose nodes write ``dataset`` (None for parameters and raw data)."""
    for marker, stage in PRODUCING_STAGE:
        if dataset.startswith(marker) if marker.endswith("_") else dataset.endswith(marker):
            return stage
    return None


class OwnVersionsHook:
    """A run reads one consistent set of versions: of the inputs it does not make, the
    latest versions at its start; of what it saves, the version it saved -- never a newer
    one that another run saved in the meantime.

    Kedro resolves "latest" per dataset at its first load: with two runs in one project, a
    run's posthoc node could otherwise load the other run's logits (the provenance checks
    then refuse the mix), and a reporting run could combine one method's old logits with
    another's new ones. Before the run this resolves the latest version of each of the
    pipeline's free inputs (:func:`read_latest_version_of_now`); after each save it pins the
    dataset's load version to the run's own save version (:func:`read_own_version`: Kedro's
    per-dataset version cache, ``_cached_load_version``, which Kedro itself fills on the
    first load and clears before the next save -- there is no public setter).
    """

    def __init__(self) -> None:
        self._catalog = None

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline, catalog) -> None:
        self._catalog = catalog
        for name in sorted(pipeline.inputs()):
            read_latest_version_of_now(catalog, name)
        # Kedro warns when a save version differs from a dataset's load version (another run
        # saved meanwhile): moot here, each save re-pins the load version to the run's own.
        # With --load-versions the pin wins over the run's own save, and it warns. Decided per
        # run: a notebook or test process runs several.
        warnings.filters[:] = [f for f in warnings.filters if not _is_version_mismatch_filter(f)]
        # through the public call, which also resets the warnings' "already shown" caches
        action = "default" if run_params.get("load_versions") else "ignore"
        warnings.filterwarnings(action, message=KEDRO_VERSION_MISMATCH)

    @hook_impl
    def after_dataset_saved(self, dataset_name: str, data: Any, node) -> None:
        if self._catalog is not None:
            read_own_version(self._catalog, dataset_name)


KEDRO_VERSION_MISMATCH = r"Save version '.*' did not match load version"


def _is_version_mismatch_filter(entry: tuple) -> bool:
    message = entry[1]
    return getattr(message, "pattern", None) == KEDRO_VERSION_MISMATCH


class RunPreflightHook:
    """Before a run: log the compute it will use, and refuse -- in one line -- a pipeline
    whose cached inputs have not been made (e.g. ``--pipelines=training`` before the split
    it trains on exists) instead of failing deep inside a node."""

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline, catalog) -> None:
        import torch

        device = f"cuda ({torch.cuda.get_device_name(0)}, {torch.cuda.device_count()} visible)" if (
            torch.cuda.is_available()) else "cpu"
        console.info("compute: %s; %d CPU thread(s) for torch", device, torch.get_num_threads())
        _refuse_unsupported_runner(run_params.get("runner"))
        _refuse_dropped_run_file_params(sys.argv)
        missing = [name for name in sorted(pipeline.inputs()) if producing_stage(name) and not catalog.exists(name)]
        pinned = {name: v for name, v in (run_params.get("load_versions") or {}).items() if name in missing}
        if pinned:  # a mistyped or pruned version, not a stage that was never run
            raise MissingInputsError(
                "--load-versions names version(s) that were never saved (or were pruned): "
                + "; ".join(f"{name}:{version}" for name, version in sorted(pinned.items()))
                + "; list the saved ones with catalog.get(name).list_versions() in a notebook or "
                "see the dataset's folder under data/"
            )
        if missing:
            stages = sorted({producing_stage(name) for name in missing}, key=STAGE_ORDER.index)
            raise MissingInputsError(
                f"{len(missing)} input(s) of this run do not exist yet ({', '.join(missing[:3])}"
                f"{', ...' if len(missing) > 3 else ''}): run the {' and '.join(stages)} stage(s) first, "
                f"e.g. kedro run --pipelines={_first_stages(run_params, stages)}, or include them in "
                "--pipelines"
            )
        _refuse_uncollected_runs(pipeline)


# Kedro's ParallelRunner runs nodes in subprocesses: the hooks that pin each run's own
# versions, track MLflow and count finished nodes run there, not here, and its shared-memory
# copies of node inputs lose the pipelines' plain objects (a shift plan arrived as a bare
# `object`) -- a run failed after writing artifacts while reporting that nothing was written.
UNSUPPORTED_RUNNERS = ("ParallelRunner",)


def _refuse_unsupported_runner(runner: Any) -> None:
    """Refuse, before any node runs, a runner the project's guarantees do not hold under."""
    if runner is None:
        return
    name = _describe(runner).rsplit(".", 1)[-1]
    if name in UNSUPPORTED_RUNNERS:
        raise ValueError(
            f"--runner={name} is not supported: its worker processes bypass the hooks that keep "
            "each run's versions, provenance and MLflow tracking; use the default runner, "
            "--runner=ThreadRunner, or --runner=calib_pipeline.runner.DaskRunner to train in "
            "parallel (docs/scaling.md)"
        )


def _option_value(argv: list[str], *names: str) -> str | None:
    """The value of a command-line option given as ``--name=value`` or ``--name value``
    (last one wins, as in click); None when absent."""
    value = None
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                value = argv[i + 1]
            elif arg.startswith(name + "="):
                value = arg[len(name) + 1:]
    return value


def _refuse_dropped_run_file_params(argv: list[str]) -> None:
    """Refuse ``kedro run --config=<file> --params=...`` when the file has params: Kedro
    *replaces* a run file's params with ``--params`` instead of merging them, so the run
    would silently train without the file's network and schedule (e.g. a paper protocol of
    ``paper_runs/`` plus ``--params=seeds=[0]`` would train the env's ResNet-18)."""
    config = _option_value(argv, "--config", "-c")
    if not config or _option_value(argv, "--params") is None:
        return
    try:
        from omegaconf import OmegaConf

        params = (OmegaConf.to_container(OmegaConf.load(config)).get("run") or {}).get("params")
    except (OSError, ValueError, AttributeError):  # Kedro reads the file itself and says so
        return
    if params:
        raise ValueError(
            f"kedro run --config={config} --params=...: Kedro replaces the run file's params "
            f"({', '.join(sorted(params))}) with --params rather than adding to them, so this "
            "run would train without them; put the extra parameters into a copy of the file "
            "instead (docs/models.md, \"Paper protocols\"). Nothing was run."
        )


def _first_stages(run_params: dict[str, Any], stages: list[str]) -> str:
    """The ``--pipelines`` value that makes the missing stages: for a study's own stages
    (``focal.reporting``), the study itself -- only its runs, finished ones reused -- not
    the all-studies stages, which would train every study's methods."""
    names = run_params.get("pipeline_names") or []
    studies = list(dict.fromkeys(name.split(".")[0] for name in names if "." in name))
    if names and len(studies) == len(names):
        return ",".join(studies)
    return ",".join(stages)


# "<method>.runs_for_<study>": a method's runs, handed to a study in memory by the
# <method>.collect_for_<study> node (pipelines/reporting/pipeline.py)
COLLECTED_RUNS = ".runs_for_"


def _refuse_uncollected_runs(pipeline) -> None:
    """Refuse a run that reads a study's in-memory collections without the nodes that make
    them (e.g. ``--namespaces=<study>``: they sit in the methods' namespaces)."""
    held = sorted(name for name in pipeline.inputs() if COLLECTED_RUNS in name)
    if held:
        study = held[0].split(COLLECTED_RUNS, 1)[1]
        raise MissingInputsError(
            f"{len(held)} input(s) of this run are handed over in memory by nodes it leaves out "
            f"({', '.join(held[:3])}{', ...' if len(held) > 3 else ''}): each method's "
            f"collect_for_{study} node runs in the method's namespace, with the study's reporting "
            f"stage. Run e.g. kedro run --pipelines={study}.reporting (without --namespaces={study})"
        )


class MissingInputsError(RuntimeError):
    """A run needs cached artifacts that no earlier run has written."""


class RunInfoHook:
    """Puts the session's run id (its save version), environment and protocol into the
    catalog as the ``run_info`` input before a pipeline runs.

    Training nodes record them in each run's provenance. They get them as an input, not
    from :data:`RUN_ENV`, so that a node run in another process (a Dask worker) or from a
    test's in-memory catalog (which adds ``run_info`` itself) sees the same values.
    """

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline, catalog) -> None:
        env = run_params.get("env") or DEFAULT_RUN_ENV
        # the registry checked the protocol of the session's globals when it built the pipelines
        protocol = RUN_ENV["config_loader"]["globals"][PROTOCOL]
        catalog[RUN_INFO] = run_info(run_params["run_id"], env, protocol)


def _flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), item, out)
    else:
        out[prefix] = str(value)[:500]


# The settings every number of a run's evaluation depends on besides the training: logged on
# the parent run, so re-scorings of one training under other bins or calibrator definitions
# are told apart in the MLflow UI (their metric names are the same).
EVALUATION_GROUPS = ("evaluation", "calibrators", "shift")


def _evaluation_settings(run_params: dict[str, Any], catalog) -> dict[str, str]:
    """``kedro.params.<key>`` for each ``--params`` override and the resolved evaluation
    groups (``evaluation.n_bins``, ``calibrators.ts.name``, ...) as MLflow params."""
    settings: dict[str, str] = {}
    _flatten("kedro.params", dict(run_params.get("runtime_params") or {}), settings)
    for group in EVALUATION_GROUPS:
        if catalog is None or f"params:{group}" not in catalog:
            continue  # a project (or test) without the group: nothing to log
        _flatten(group, catalog.load(f"params:{group}"), settings)
    return settings


CREDENTIALS = re.compile(r"(?<=://)[^/@\s:]+:[^/@\s]+@")
TRACKING_HINT = "results are saved regardless; set CALIB_MLFLOW=off to skip tracking"
# A dead tracking server must cost seconds, not MLflow's default 7 retries x 120 s timeout.
HTTP_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "5",
}


def mask_credentials(text: str) -> str:
    """``scheme://user:password@host`` -> ``scheme://***@host`` anywhere in ``text``."""
    return CREDENTIALS.sub("***@", text)


def _tracked(method: Callable[..., None]) -> Callable[..., None]:
    """Run a hook body only while tracking is on; a tracking error becomes one warning and
    switches tracking off for the rest of the run -- it never fails the run or costs a result."""

    @functools.wraps(method)
    def guarded(self: MlflowTrackingHook, *args: Any, **kwargs: Any) -> None:
        if self._client is None:
            return
        try:
            method(self, *args, **kwargs)
        except Exception as error:  # noqa: BLE001 -- any tracking failure must be survivable
            logger.warning(
                "MLflow tracking failed in %s and is off for the rest of this run (%s): %s",
                method.__name__, TRACKING_HINT, mask_credentials(f"{type(error).__name__}: {error}"),
            )
            if self._owns_parent:  # one try to end the open runs (KILLED), not left RUNNING
                self._end_at_exit()
            else:  # a worker's copy: its own nested runs only; the driver's run goes on
                self._end_children("KILLED")
            self._client = None

    return guarded


class MlflowTrackingHook:
    """One parent run per ``kedro run``; a nested run per training node, opened when the node
    starts and completed after its outputs are saved; report folders as artifacts."""

    def __init__(self) -> None:
        self._client = None
        self._parent: str | None = None
        self._experiment_id = None
        self._catalog = None
        self._env = DEFAULT_RUN_ENV
        self._open_children: dict[str, str] = {}  # node name -> nested run id
        self._pending: dict[str, dict[str, Any]] = {}  # node name -> outputs still being saved
        self._uri: str | None = None
        self._runs: dict[tuple[str, str], str] = {}  # (method, seed) -> nested run id of this run
        self._globals: dict[str, str] = {}  # dataset and protocol of the session's environment
        self.run_location: str | None = None  # "parent run <id> at <uri>" of the last run started
        self._owns_parent = True  # False in a Dask worker's copy: the driver ends the parent

    def _enabled(self) -> bool:
        return os.environ.get("CALIB_MLFLOW", "on").lower() not in ("off", "0", "false")

    @hook_impl
    def after_context_created(self, context) -> None:
        self._project_path = Path(context.project_path)
        self._env = context.env or DEFAULT_RUN_ENV
        from kedro.config import MissingConfigException

        try:
            self._config = context.config_loader.get("mlflow") or {}
        except MissingConfigException:  # no mlflow.yml in this environment
            self._config = {}
        self._globals = _session_globals(context.config_loader)

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline, catalog) -> None:
        self.run_location = None
        if not self._enabled():
            return
        uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{self._project_path / 'mlflow.db'}"
        for key, value in HTTP_DEFAULTS.items():
            os.environ.setdefault(key, value)
        try:
            self._start(run_params, catalog, uri, pipeline)
        except Exception as error:  # noqa: BLE001 -- an unreachable or broken backend
            logger.warning(
                "MLflow tracking is off for this run: %s could not be used (%s): %s",
                mask_credentials(uri), TRACKING_HINT, mask_credentials(f"{type(error).__name__}: {error}"),
            )
            self._client = self._parent = None

    def _start(self, run_params: dict[str, Any], catalog, uri: str, pipeline=None) -> None:
        """Open the parent run (tags: :meth:`_parent_tags`) after ending abandoned runs."""
        import mlflow
        from mlflow.tracking import MlflowClient

        mlflow.set_tracking_uri(uri)
        self._catalog, self._uri = catalog, uri
        name = self._config.get("experiment_name", "calib-pipeline")
        with _backend_lock(uri):  # a fresh SQLite file is migrated by its first client only
            self._client = MlflowClient(tracking_uri=uri)
            experiment = self._client.get_experiment_by_name(name)
            self._experiment_id = (
                experiment.experiment_id if experiment
                else self._client.create_experiment(name, artifact_location=self._artifact_location(uri))
            )
            self._end_abandoned_runs()
        pipelines = run_params.get("pipeline_names") or [run_params.get("pipeline_name") or "__default__"]
        run_name = f"{'+'.join(str(p) for p in pipelines)} [{self._env}]"
        self._parent = self._client.create_run(
            self._experiment_id, run_name=run_name, tags=self._parent_tags(run_params, pipeline),
        ).info.run_id
        atexit.register(self._end_at_exit)
        params: dict[str, str] = {"kedro.env": self._env}
        for key in ("pipeline_names", "namespaces", "node_names", "from_nodes", "to_nodes", "runner"):
            value = run_params.get(key)
            if value:
                params[f"kedro.{key}"] = _describe(value)[:500]
        params.update(_evaluation_settings(run_params, catalog))
        self._log_params(self._parent, params)
        self.run_location = f"parent run {self._parent} at {mask_credentials(uri)}"
        console.info("MLflow: %s", self.run_location)

    def _artifact_location(self, uri: str) -> str | None:
        """Where a new experiment keeps its artifacts: ``artifact_location`` of mlflow.yml,
        else ``mlruns/`` beside a SQLite file (never the working directory), else the server's."""
        if self._config.get("artifact_location"):
            return str(self._config["artifact_location"])
        if uri.startswith("sqlite:///"):
            return (Path(uri[len("sqlite:///") :]).parent / "mlruns").resolve().as_uri()
        return None

    def _parent_tags(self, run_params: dict[str, Any], pipeline) -> dict[str, str]:
        """The parent run's tags: what the UI filters and groups runs by."""
        studies = sorted({n.namespace for n in (pipeline.nodes if pipeline else []) if "evaluation" in n.tags})
        return {
            "kedro.run_id": str(run_params.get("run_id")), "kedro.env": self._env,
            "dataset": self._globals.get("dataset", "unknown"), "protocol": self._globals.get("protocol", "unknown"),
            "studies": ",".join(str(s) for s in studies) or "none",
            **_git_tags(getattr(self, "_project_path", None)), **_owner_tags(),
        }

    def _end_abandoned_runs(self) -> None:
        """Runs left ``RUNNING`` by a process of this host that no longer exists (kill -9,
        power loss) end ``KILLED``, nested runs included."""
        host = socket.gethostname()
        running = self._client.search_runs(
            [self._experiment_id], filter_string=f"attributes.status = 'RUNNING' and tags.`calib.host` = '{host}'",
            max_results=1000,
        )
        for run in running:
            if not _process_alive(int(run.data.tags.get("calib.pid", "0"))):
                self._client.set_terminated(run.info.run_id, "KILLED")
                logger.warning("MLflow: run %s of a process that no longer exists is now KILLED", run.info.run_id)

    def _end_at_exit(self) -> None:
        """Ctrl-C and other exits that bypass Kedro's error hook, or tracking switched off
        after a failure: open runs end ``KILLED`` (each a best-effort call)."""
        if self._client is None:
            return
        self._end_children("KILLED")
        if self._parent:
            with contextlib.suppress(Exception):
                self._client.set_terminated(self._parent, "KILLED")
        self._parent = None

    def end_failed(self) -> None:
        """A run that failed where Kedro's error hook does not see it (refused in a
        ``before_pipeline_run`` hook, an input that failed to load): its open runs end
        ``FAILED``, not ``KILLED`` at exit. Best effort, as all tracking."""
        if self._client is None or self._parent is None:
            return
        with contextlib.suppress(Exception):
            self._finish("FAILED")

    def _end_children(self, status: str) -> None:
        """Best-effort: every open nested run ends ``status``."""
        for run_id in self._open_children.values():
            with contextlib.suppress(Exception):
                self._client.set_terminated(run_id, status)
        self._open_children.clear()

    def _log_params(self, run_id: str, params: dict[str, str]) -> None:
        from mlflow.entities import Param

        items = [Param(k, v) for k, v in params.items()]
        for start in range(0, len(items), 100):
            self._client.log_batch(run_id, params=items[start : start + 100])

    def _log_metrics(self, run_id: str, rows: list[tuple[str, float, int]]) -> None:
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        metrics = [Metric(k, float(v), stamp, step) for k, v, step in rows if pd.notna(v)]
        for start in range(0, len(metrics), 1000):
            self._client.log_batch(run_id, metrics=metrics[start : start + 1000])

    @hook_impl
    @_tracked
    def before_node_run(self, node, catalog, inputs: dict[str, Any]) -> None:
        if self._parent is None or "training" not in node.tags:
            return
        method = node.namespace or node.name
        seed = node.name.rsplit("_", 1)[-1]
        self._open_children[node.name] = self._client.create_run(
            self._experiment_id, run_name=f"{method} seed {seed}",
            tags={"mlflow.parentRunId": self._parent, "method": str(method), "seed": str(seed), **_owner_tags()},
        ).info.run_id
        self._runs[(str(method), str(seed))] = self._open_children[node.name]

    @hook_impl
    @_tracked
    def after_node_run(self, node, catalog, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        if self._parent is None:
            return
        if node.name in self._open_children:
            # logged once every output is saved: a tracking failure can then never lose one
            self._pending[node.name] = {"inputs": inputs, "outputs": outputs, "unsaved": set(outputs)}
        if "reporting" in node.tags:
            self._log_artifacts(node, outputs)

    def _log_training(self, node_name: str, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        run_id = self._open_children[node_name]  # kept open until FINISHED: a failure ends it
        history = next((v for k, v in outputs.items() if k.endswith(".history")), None)
        checkpoint = next((v for k, v in outputs.items() if k.endswith(".checkpoint")), {})
        params: dict[str, str] = {"method": str(checkpoint.get("method")), "seed": str(checkpoint.get("seed"))}
        for name, value in inputs.items():
            if name.startswith("params:"):
                _flatten(name[len("params:") :], value, params)
        _flatten("run", checkpoint.get("config", {}), params)
        # the method's hyperparameters with their defaults filled in: two runs whose configured
        # params agree but whose code defaults differ are told apart in the UI
        _flatten("effective", checkpoint.get("hyperparameters", {}), params)
        self._log_params(run_id, params)
        # imported here: it loads torch, which only a finished training needs
        from calib_pipeline.training.artifacts import training_reuse

        reuse = training_reuse(checkpoint)
        if reuse:  # a finished state reused, or an interrupted one continued: not a new training
            self._client.set_tag(run_id, "calib.training", reuse)
            self._client.set_tag(run_id, "calib.resumed_after_epoch", str(checkpoint["resumed_after_epoch"]))
        rows: list[tuple[str, float, int]] = []
        if isinstance(history, pd.DataFrame) and len(history):
            numeric = history.select_dtypes("number").drop(columns=["epoch", "seed"], errors="ignore")
            for record_epoch, record in zip(history["epoch"], numeric.to_dict("records")):
                rows.extend((k, v, int(record_epoch)) for k, v in record.items())
            position = _selected_row(history, checkpoint.get("selected_epoch"))
            final = numeric.iloc[position].to_dict()
            rows.extend((f"final_{k}", v, int(history["epoch"].iloc[position])) for k, v in final.items())
        rows.append(("selected_epoch", float(checkpoint.get("selected_epoch", 0)), 0))
        self._log_metrics(run_id, rows)
        self._client.set_terminated(run_id, "FINISHED")
        del self._open_children[node_name]

    def _log_artifacts(self, node, outputs: dict[str, Any]) -> None:
        """Log a reporting node's tables and texts (the evaluation tables) to the parent run.

        Report folders (dict outputs) are logged by :meth:`after_dataset_saved` from the
        files the catalog writes, so nothing is rendered twice."""
        from calib_pipeline.reports.common import write_artifacts

        bundle = {
            name.split(".", 1)[-1]: value
            for name, value in outputs.items()
            if isinstance(value, (pd.DataFrame, str))
        }
        if not bundle:
            return
        with tempfile.TemporaryDirectory() as tmp:
            write_artifacts(Path(tmp), bundle)
            self._client.log_artifacts(self._parent, tmp, artifact_path=node.namespace or "")

    @hook_impl
    @_tracked
    def after_dataset_saved(self, dataset_name: str, data: Any, node) -> None:
        if self._parent is None:
            return
        pending = self._pending.get(node.name)
        if pending is not None:
            pending["unsaved"].discard(dataset_name)
            if not pending["unsaved"]:
                del self._pending[node.name]
                self._log_training(node.name, pending["inputs"], pending["outputs"])
        if "reporting" not in node.tags:
            return
        study = dataset_name.split(".", 1)[0]
        if dataset_name.endswith(".metrics") and "evaluation" in node.tags and isinstance(data, pd.DataFrame):
            self._log_evaluation(study, data)
        elif dataset_name.endswith(".report_claims") and isinstance(data, dict):
            self._log_claims(study, data)
        if self._catalog is None:
            return
        folder = getattr(self._catalog[dataset_name], "saved_folder", None)
        if folder is not None:
            stem = dataset_name.split(".", 1)[-1]
            path = f"{node.namespace}/{stem}" if node.namespace else stem
            self._client.log_artifacts(self._parent, str(folder), artifact_path=path)

    def _log_evaluation(self, study: str, table: pd.DataFrame) -> None:
        """A study's tidy metrics: each (method, seed)'s clean per-calibrator metrics on its
        nested run, the study's means over seeds on the parent run."""
        for (method, seed), metrics in comparison_metrics(table).items():
            runs = table[(table["method"] == method) & (table["seed"].astype(str) == seed)]
            training_run = str(runs["run_id"].iloc[0]) if "run_id" in runs and len(runs) else "unknown"
            run_id, made_here = self._nested_run(method, seed, training_run)
            self._log_metrics(run_id, [(name, value, 0) for name, value in metrics.items()])
            if made_here:
                self._client.set_terminated(run_id, "FINISHED")
        self._log_metrics(self._parent, [(k, v, 0) for k, v in study_summary(study, table).items()])

    def _nested_run(self, method: str, seed: str, training_run: str) -> tuple[str, bool]:
        """The nested run of (method, seed) under this parent run, and whether it was made
        now: the one this process opened, else one a Dask worker opened (found by its tags),
        else -- training reused from an earlier ``kedro run`` -- a new one, so that every
        evaluated (method, seed) of a ``kedro run`` is a row of the comparison."""
        if (method, seed) in self._runs:
            return self._runs[(method, seed)], False
        found = self._client.search_runs(
            [self._experiment_id], max_results=1, filter_string=(
                f"tags.mlflow.parentRunId = '{self._parent}' and tags.method = '{method}' and tags.seed = '{seed}'"),
        ) or []
        if found:
            self._runs[(method, seed)] = found[0].info.run_id
            return self._runs[(method, seed)], False
        self._runs[(method, seed)] = self._client.create_run(
            self._experiment_id, run_name=f"{method} seed {seed}", tags={
                "mlflow.parentRunId": self._parent, "method": method, "seed": seed, "calib.training": "reused",
                "kedro.training_run_id": training_run, **_owner_tags()},
        ).info.run_id
        return self._runs[(method, seed)], True

    def _log_claims(self, study: str, report: dict[str, Any]) -> None:
        """The claims report's verdict counts (``<study>.claims.holds``, ...), its summary
        line (tag ``<study>.claims``) and whether the runs followed the paper's protocol (tag
        ``<study>.claims_protocol``: ``paper``; ``paper_network`` where the paper states no
        training settings for the dataset; or the gaps, e.g. ``network,schedule``) on the
        parent run."""
        verdicts = report.get("verdicts")
        if isinstance(verdicts, str):
            verdicts = json.loads(verdicts)
        if not isinstance(verdicts, dict):
            return
        metrics = verdicts.get("metrics") or {}
        self._log_metrics(self._parent, [(f"{study}.{k}", v, 0) for k, v in metrics.items()])
        if verdicts.get("line"):
            self._client.set_tag(self._parent, f"{study}.claims", str(verdicts["line"])[:5000])
        gaps = verdicts.get("protocol_gaps")
        if gaps is not None:
            stated = verdicts.get("settings_stated", True)
            tag = ",".join(gaps) or ("paper" if stated else "paper_network")
            self._client.set_tag(self._parent, f"{study}.claims_protocol", tag)

    @hook_impl
    @_tracked
    def after_pipeline_run(self, run_params, run_result, pipeline, catalog) -> None:
        self._finish("FINISHED")

    @hook_impl
    @_tracked
    def on_pipeline_error(self, error, run_params, pipeline, catalog) -> None:
        self._finish("FAILED")

    def _finish(self, status: str) -> None:
        self._fail_open_children()
        if self._parent is not None:
            self._client.set_terminated(self._parent, status)
            self._parent = None

    def _fail_open_children(self) -> None:
        """Nested runs of nodes that failed or never saved their outputs end ``FAILED``."""
        for run_id in self._open_children.values():
            self._client.set_terminated(run_id, "FAILED")
        self._open_children.clear()
        self._pending.clear()

    def for_worker(self) -> MlflowTrackingHook | None:
        """The node hooks of this run for a Dask worker: a picklable copy that opens nested
        runs under this parent run, writing to a tracking server directly and to a SQLite
        file through this process (see the module docstring); None while tracking is off."""
        if self._client is None or self._parent is None:
            return None
        worker = MlflowTrackingHook()
        worker._owns_parent = False
        worker._parent, worker._experiment_id = self._parent, self._experiment_id
        worker._env = self._env
        worker._client = _RecordedCalls() if _single_writer(self._uri) else _ServerClient(self._uri)
        return worker

    def worker_report(self) -> list[tuple[str, dict[str, Any]]] | None:
        """Called in the worker after its node ran or failed: a nested run whose outputs
        were never saved ends ``FAILED`` (as :meth:`on_pipeline_error` does in one process);
        returns the calls the driver must replay, if this copy recorded them."""
        if self._client is None:
            return None
        try:
            self._fail_open_children()
        except Exception as error:  # noqa: BLE001 -- a dead server must not fail the node
            logger.warning("MLflow tracking failed after a node (%s): %s", TRACKING_HINT,
                           mask_credentials(f"{type(error).__name__}: {error}"))
            return None
        return self._client.calls if isinstance(self._client, _RecordedCalls) else None

    @_tracked
    def merge_worker_report(self, report: list[tuple[str, dict[str, Any]]] | None) -> None:
        """Replay a worker's recorded calls on this process's client (driver side)."""
        if report:
            _RecordedCalls.replay(report, self._client)


# the parent run's summary: few metrics, so that the UI's columns stay readable
SUMMARY_METRICS = ("accuracy", "ece", "nll")
COMPARED_SPLITS = ("test", "val")
NOT_IN_METRIC_NAMES = re.compile(r"[^/\w.\- :]")


def metric_name(*parts: Any) -> str:
    """``parts`` joined by dots, each character MLflow refuses in a metric name (``@``, ...)
    replaced by ``_``: ``("test", "ece", "ts@shifted_val")`` -> ``test.ece.ts_shifted_val``."""
    return NOT_IN_METRIC_NAMES.sub("_", ".".join(str(p) for p in parts))


def _clean(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of the clean (unshifted) splits of a tidy metrics table."""
    from calib_pipeline.reports.common import UNSHIFTED

    rows = table[(table["shift"] == UNSHIFTED) & table["split"].isin(COMPARED_SPLITS)]
    return rows[rows["severity"] == 0] if "severity" in rows else rows


def comparison_metrics(table: pd.DataFrame) -> dict[tuple[str, str], dict[str, float]]:
    """(method, seed) -> its clean per-calibrator metrics, named ``<split>.<metric>.<calibrator>``
    (``test.ece.ts``, ``test.nll.none``, ``val.accuracy.ts``), from a tidy metrics table."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    for row in _clean(table).itertuples(index=False):
        name = metric_name(row.split, row.metric, row.calibrator)
        out.setdefault((str(row.method), str(row.seed)), {})[name] = float(row.value)
    return out


def study_summary(study: str, table: pd.DataFrame) -> dict[str, float]:
    """A study's clean test accuracy, ECE and NLL per (method, calibrator), means over seeds:
    ``<study>.<method>.test.<metric>.<calibrator>``."""
    rows = _clean(table)
    rows = rows[(rows["split"] == "test") & rows["metric"].isin(SUMMARY_METRICS)]
    means = rows.groupby(["method", "metric", "calibrator"], sort=True)["value"].mean()
    return {metric_name(study, m, "test", k, c): float(v) for (m, k, c), v in means.items()}


def _selected_row(history: pd.DataFrame, selected_epoch: Any) -> int:
    """Position of the ``selected_epoch`` row of a training history (the last row when the
    checkpoint names no epoch of the history)."""
    if selected_epoch is not None and "epoch" in history:
        matches = [i for i, epoch in enumerate(history["epoch"]) if int(epoch) == int(selected_epoch)]
        if matches:
            return matches[-1]
    return len(history) - 1


def _session_globals(config_loader) -> dict[str, str]:
    """Dataset name and protocol from the environment's globals.yml; what is missing is left out."""
    try:
        values = config_loader["globals"] or {}
    except Exception:  # noqa: BLE001 -- no globals: the tags say "unknown"
        return {}
    dataset = values.get("dataset")
    found = {"dataset": dataset.get("name") if isinstance(dataset, dict) else dataset, "protocol": values.get(PROTOCOL)}
    return {key: str(value) for key, value in found.items() if value}


def _git_tags(project_path: Path | None) -> dict[str, str]:
    """``git.commit`` (``git rev-parse HEAD`` of the project, also as MLflow's own
    ``mlflow.source.git.commit``) and ``git.dirty`` (uncommitted changes to tracked files);
    ``unknown`` without git or outside a repository -- never an error."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=project_path, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()

    try:
        if project_path is None:
            raise OSError("no project path")
        commit = git("rev-parse", "HEAD")
        dirty = "true" if git("status", "--porcelain", "--untracked-files=no") else "false"
    except (OSError, subprocess.SubprocessError):
        commit = dirty = "unknown"
    return {"git.commit": commit, "mlflow.source.git.commit": commit, "git.dirty": dirty}


def _single_writer(uri: str | None) -> bool:
    """A backend that only one process should write to: a SQLite (or other local) file."""
    return uri is None or uri.startswith(("sqlite:", "file:")) or "://" not in uri


class _ServerClient:
    """The three MLflow calls a worker's node hooks make, sent straight to a tracking server
    through an ``MlflowClient`` created in the worker on first use (clients do not pickle)."""

    def __init__(self, uri: str) -> None:
        self._uri = uri
        self._client = None

    def __getstate__(self) -> dict[str, Any]:
        return {"_uri": self._uri, "_client": None}

    def _connected(self):
        if self._client is None:
            from mlflow.tracking import MlflowClient

            for key, value in HTTP_DEFAULTS.items():  # a worker on another host has its own env
                os.environ.setdefault(key, value)
            self._client = MlflowClient(tracking_uri=self._uri)
        return self._client

    def create_run(self, experiment_id: str, **kwargs: Any):
        return self._connected().create_run(experiment_id, **kwargs)

    def log_batch(self, run_id: str, **kwargs: Any) -> None:
        self._connected().log_batch(run_id, **kwargs)

    def set_terminated(self, run_id: str, status: str | None = None) -> None:
        self._connected().set_terminated(run_id, status)


class _RecordedCalls:
    """Stands in for ``MlflowClient`` in a worker that must not write to the backend: records
    the three calls node hooks make, with the time each was made, for the driver to replay."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def create_run(self, experiment_id: str, run_name: str | None = None, tags: dict | None = None):
        placeholder = f"pending-{uuid.uuid4().hex}"
        self.calls.append(("create_run", {
            "placeholder": placeholder, "experiment_id": experiment_id, "run_name": run_name,
            "tags": tags, "start_time": _now_ms(),
        }))
        return SimpleNamespace(info=SimpleNamespace(run_id=placeholder))  # as MlflowClient's Run

    def log_batch(self, run_id: str, metrics=(), params=()) -> None:
        batch = {"run_id": run_id, "metrics": list(metrics), "params": list(params)}
        self.calls.append(("log_batch", batch))

    def set_terminated(self, run_id: str, status: str | None = None) -> None:
        ended = {"run_id": run_id, "status": status, "end_time": _now_ms()}
        self.calls.append(("set_terminated", ended))

    @staticmethod
    def replay(calls: list[tuple[str, dict[str, Any]]], client) -> None:
        """Make ``calls`` on ``client``, each recorded run id replaced by the one created."""
        run_ids: dict[str, str] = {}
        for method, arguments in calls:
            arguments = dict(arguments)
            if method == "create_run":
                placeholder = arguments.pop("placeholder")
                run_ids[placeholder] = client.create_run(**arguments).info.run_id
            else:
                arguments["run_id"] = run_ids.get(arguments["run_id"], arguments["run_id"])
                getattr(client, method)(**arguments)


def _now_ms() -> int:
    return int(time.time() * 1000)


@contextlib.contextmanager
def _backend_lock(uri: str) -> Iterator[None]:
    """An exclusive lock beside a SQLite tracking file while a process creates its schema and
    experiment: two runs started together otherwise race in MLflow's migrations. Servers
    serialise this themselves."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    lock_path = Path(uri[len("sqlite:///") :]).with_suffix(".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _owner_tags() -> dict[str, str]:
    """Who holds a run open: lets a later start end the runs of a killed process."""
    return {"calib.host": socket.gethostname(), "calib.pid": str(os.getpid())}


def _process_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


OBJECT_REPR = re.compile(r"^<([\w.]+) object at 0x[0-9a-fA-F]+>$")


def _describe(value: Any) -> str:
    """A readable parameter value: a runner by its class (given as the object, or as the
    repr Kedro's session records), lists joined."""
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    if not isinstance(value, str):
        value = repr(value) if "object at 0x" in repr(value) else str(value)
    named = OBJECT_REPR.match(value)
    return named.group(1) if named else value
