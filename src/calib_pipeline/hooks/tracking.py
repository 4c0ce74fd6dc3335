"""Track runs in MLflow (:class:`MlflowTrackingHook`); the layout and key scheme are
documented in docs/tracking.md.

MLflow layout, made for the UI's compare and sort views:

- one parent run per ``kedro run``, tagged with the environment, dataset, protocol, the
  studies it evaluates, the git commit and the digest of its evaluation settings; it holds
  each study's summary metrics (``<study>.<method>.test.<metric>.<calibrator>``: clean test
  accuracy / ECE / NLL, mean over seeds), the claims report's verdict counts
  (``<study>.claims.holds``, ...) and the reporting outputs as artifacts: a report folder as
  the catalog wrote it (``<namespace>/<report>/``), the evaluation tables (tidy metrics,
  reliability bins) as CSV; a run that fails says why (tag ``calib.failure``); a run of the
  score pipeline alone is tagged with the files it scores (``dataset``), how it splits them
  (``protocol``) and each file's description (``score.<name>``), and holds each file's
  metrics (``score.<name>.<split>.<metric>.<calibrator>``) and bootstrap bounds
  (``....ci_low``, ``....ci_high``); the calibrator arena's report folder is logged as
  ``posthoc_arena/report/``;
- one nested run per trained (method, seed), opened when its training node starts, tagged
  with the studies that read it, environment, dataset, protocol and the training's
  fingerprint, with its parameters as readable strings, its per-epoch history,
  ``final_<metric>`` = the metrics of the epoch training selected (``selected_epoch``) and,
  once the study is evaluated, the clean per-calibrator metrics
  ``<split>.<metric>.<calibrator>`` (``test.ece.ts``, ``test.nll.none``) plus the calibrator
  family's (``test.ece.temperature_scaling``). One row per training: a later ``kedro run``
  that re-scores or reuses a tracked training logs to that training's nested run (found by
  its tags; :meth:`MlflowTrackingHook._scored_run`), unless its evaluation settings differ;
  a nested run made by a Dask worker is found by its tags.

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
the nested run under the driver's parent run, through the clients of
:mod:`calib_pipeline.hooks.mlflow_client` (a server directly; a SQLite file through the
driver, :meth:`MlflowTrackingHook.merge_worker_report`).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import logging
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
from kedro.framework.hooks import hook_impl

from calib_pipeline.hooks.mlflow_client import (
    RecordedCalls,
    backend_lock,
    mask_credentials,
    use_http_defaults,
    worker_client,
)
from calib_pipeline.hooks.preflight import describe
from calib_pipeline.hooks.run_tags import git_tags, owner_tags, process_alive, session_globals
from calib_pipeline.hooks.session import DEFAULT_RUN_ENV
from calib_pipeline.hooks.tracking_metrics import (
    comparison_metrics,
    evaluation_digest,
    evaluation_settings,
    family_members,
    family_metrics,
    flatten,
    metric_name,
    selected_row,
    study_summary,
)
from calib_pipeline.pipelines.artifacts import ARTIFACTS, collected_study, kind_of

logger = logging.getLogger(__name__)
# the run's console lines (calib_pipeline.console, conf/logging.yml)
console = logging.getLogger("calib_pipeline.console")

TRACKING_HINT = "results are saved regardless; set CALIB_MLFLOW=off to skip tracking"
# MLflow's experiment type: a model-training experiment, not a GenAI one. (MLflow 3.17's UI
# takes the type from its "GenAI | Model training" switch instead, which the address's
# ?workflowType=machine_learning sets: `make mlflow-ui` prints that address.)
EXPERIMENT_KIND_TAG, EXPERIMENT_KIND = "mlflow.experimentKind", "custom_model_development"
# A nested run's identity as a training: the configuration fingerprint of its checkpoint
# (the resume key: the same fingerprint is the same training, reused), and the digest of
# the evaluation settings its per-calibrator metrics were scored under.
FINGERPRINT_TAG, EVALUATION_TAG = "calib.fingerprint", "calib.evaluation"
# why a parent run FAILED: the error's type and the first line of its message
FAILURE_TAG = "calib.failure"
# One study's evaluation at a time (ThreadRunner runs studies' nodes in threads): two studies
# scoring one training must find, not both create, its nested run. Module-level: the hook's
# worker copies are pickled.
EVALUATION_LOCK = threading.Lock()


def studies_of_methods(pipeline: Any) -> dict[str, list[str]]:
    """Method -> the studies of ``pipeline`` that read its runs: those its collection
    nodes hand them to (outputs named by ``pipelines.artifacts.collected_runs``)."""
    found: dict[str, set[str]] = {}
    for node in getattr(pipeline, "nodes", []):
        for output in node.outputs:
            study = collected_study(output)
            if study is not None:
                found.setdefault(output.split(".", 1)[0], set()).add(study)
    return {method: sorted(studies) for method, studies in found.items()}


def failure_reason(error: BaseException) -> str:
    """``<ErrorType>: <first line of the message>``, at most a tag's worth of characters."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}".strip()[:5000]


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
                method.__name__,
                TRACKING_HINT,
                mask_credentials(f"{type(error).__name__}: {error}"),
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
        self._scored_runs: dict[tuple[str, str], str] = {}  # (method, seed) -> gets its scores
        self._globals: dict[str, str] = {}  # dataset and protocol of the session's environment
        self._method_studies: dict[str, list[str]] = {}  # method -> the studies reading its runs
        self._kedro_run_id = "unknown"  # Kedro's run id (the session id) of this run
        self._evaluation = ""  # evaluation_digest of this run's settings
        self._families: dict[str, list[str]] = {}  # calibrator family -> member keys, in order
        self._fingerprints: dict[tuple[str, str], str] = {}  # (method, seed) -> of its logits
        self._family_rank: dict[tuple[str, str], int] = {}  # (run id, family) -> member logged
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
        self._globals = session_globals(context.config_loader)

    # last of the project's before_pipeline_run hooks: a run the preflight refuses (missing
    # inputs, a bad --load-versions pin, an unsupported runner) leaves no MLflow run at all
    @hook_impl(trylast=True)
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline, catalog) -> None:
        self.run_location = None
        if not self._enabled():
            return
        uri = (
            os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{self._project_path / 'mlflow.db'}"
        )
        use_http_defaults()
        try:
            self._start(run_params, catalog, uri, pipeline)
        except Exception as error:  # noqa: BLE001 -- an unreachable or broken backend
            logger.warning(
                "MLflow tracking is off for this run: %s could not be used (%s): %s",
                mask_credentials(uri),
                TRACKING_HINT,
                mask_credentials(f"{type(error).__name__}: {error}"),
            )
            self._client = self._parent = None

    def _start(self, run_params: dict[str, Any], catalog, uri: str, pipeline=None) -> None:
        """Open the parent run (tags: :meth:`_parent_tags`) after ending abandoned runs."""
        import mlflow
        from mlflow.tracking import MlflowClient

        mlflow.set_tracking_uri(uri)
        self._catalog, self._uri = catalog, uri
        self._method_studies = studies_of_methods(pipeline)
        self._kedro_run_id = str(run_params.get("run_id"))
        settings = evaluation_settings(run_params, catalog)
        self._evaluation = evaluation_digest(settings)
        if catalog is not None and "params:calibrators" in catalog:
            self._families = family_members(catalog.load("params:calibrators") or {})
        name = self._config.get("experiment_name", "calib-pipeline")
        with backend_lock(uri):  # a fresh SQLite file is migrated by its first client only
            self._client = MlflowClient(tracking_uri=uri)
            self._experiment_id = self._experiment(name, uri)
            self._end_abandoned_runs()
        pipelines = run_params.get("pipeline_names") or [
            run_params.get("pipeline_name") or "__default__"
        ]
        run_name = f"{'+'.join(str(p) for p in pipelines)} [{self._env}]"
        self._parent = self._client.create_run(
            self._experiment_id,
            run_name=run_name,
            tags={**self._parent_tags(run_params, pipeline), EVALUATION_TAG: self._evaluation},
        ).info.run_id
        atexit.register(self._end_at_exit)
        params: dict[str, str] = {"kedro.env": self._env}
        for key in (
            "pipeline_names",
            "namespaces",
            "node_names",
            "from_nodes",
            "to_nodes",
            "runner",
        ):
            value = run_params.get(key)
            if value:
                params[f"kedro.{key}"] = describe(value)[:500]
        params.update(settings)
        self._log_params(self._parent, params)
        self.run_location = f"parent run {self._parent} at {mask_credentials(uri)}"
        console.info("MLflow: %s", self.run_location)

    def _experiment(self, name: str, uri: str) -> str:
        """The id of experiment ``name``, created if missing; either way of the
        :data:`EXPERIMENT_KIND` (an experiment whose kind a user set keeps it)."""
        experiment = self._client.get_experiment_by_name(name)
        if experiment is None:
            return self._client.create_experiment(
                name,
                artifact_location=self._artifact_location(uri),
                tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND},
            )
        if EXPERIMENT_KIND_TAG not in experiment.tags:
            self._client.set_experiment_tag(
                experiment.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND
            )
        return experiment.experiment_id

    def _artifact_location(self, uri: str) -> str | None:
        """Where a new experiment keeps its artifacts: ``artifact_location`` of mlflow.yml,
        else ``mlruns/`` beside a SQLite file (never the working directory), else the server's."""
        if self._config.get("artifact_location"):
            return str(self._config["artifact_location"])
        if uri.startswith("sqlite:///"):
            return (Path(uri[len("sqlite:///") :]).parent / "mlruns").resolve().as_uri()
        return None

    def _parent_tags(self, run_params: dict[str, Any], pipeline) -> dict[str, str]:
        """The parent run's tags: what the UI filters and groups runs by. A run of the score
        pipeline alone is tagged with the files it scores and how it splits them, not with
        the environment's dataset."""
        studies = sorted(
            {n.namespace for n in (pipeline.nodes if pipeline else []) if "evaluation" in n.tags}
        )
        described = self._scored_files_tags(pipeline) or self._globals
        return {
            "kedro.run_id": str(run_params.get("run_id")),
            "kedro.env": self._env,
            "dataset": described.get("dataset", "unknown"),
            "protocol": described.get("protocol", "unknown"),
            "studies": ",".join(str(s) for s in studies) or "none",
            **git_tags(getattr(self, "_project_path", None)),
            **owner_tags(),
        }

    def _scored_files_tags(self, pipeline) -> dict[str, str] | None:
        """``dataset`` and ``protocol`` of a run of the score pipeline alone (the files it
        scores, how val and test are drawn); None for other runs."""
        if not any("score" in n.tags for n in getattr(pipeline, "nodes", [])):
            return None
        # imported here: it loads torch, which only a score run needs
        from calib_pipeline.pipelines.score import score_run_description

        return score_run_description(pipeline, self._catalog)

    def _end_abandoned_runs(self) -> None:
        """Runs left ``RUNNING`` by a process of this host that no longer exists (kill -9,
        power loss) end ``KILLED``, nested runs included."""
        host = socket.gethostname()
        running = self._client.search_runs(
            [self._experiment_id],
            filter_string=f"attributes.status = 'RUNNING' and tags.`calib.host` = '{host}'",
            max_results=1000,
        )
        for run in running:
            if not process_alive(int(run.data.tags.get("calib.pid", "0"))):
                self._client.set_terminated(run.info.run_id, "KILLED")
                logger.warning(
                    "MLflow: run %s of a process that no longer exists is now KILLED",
                    run.info.run_id,
                )

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

    def end_failed(self, error: BaseException | None = None) -> None:
        """A run that failed where Kedro's error hook does not see it (an
        ``after_pipeline_run`` hook that raised): its open runs end ``FAILED``, with the
        reason (:meth:`_finish`), not ``KILLED`` at exit. Best effort, as all tracking."""
        if self._client is None or self._parent is None:
            return
        with contextlib.suppress(Exception):
            self._finish("FAILED", error)

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
            self._experiment_id,
            run_name=f"{method} seed {seed}",
            tags=self._child_tags(str(method), str(seed)),
        ).info.run_id
        self._runs[(str(method), str(seed))] = self._open_children[node.name]

    @hook_impl
    @_tracked
    def after_node_run(
        self, node, catalog, inputs: dict[str, Any], outputs: dict[str, Any]
    ) -> None:
        if self._parent is None:
            return
        if node.name in self._open_children:
            # logged once every output is saved: a tracking failure can then never lose one
            self._pending[node.name] = {
                "inputs": inputs,
                "outputs": outputs,
                "unsaved": set(outputs),
            }
        if "score" in node.tags:
            self._tag_scored_files(outputs)
        if "reporting" in node.tags:
            self._log_artifacts(node, outputs)

    def _tag_scored_files(self, outputs: dict[str, Any]) -> None:
        """``score.<name>`` on the parent run: a scored file's classes, score kind, split
        sizes and their origin (``PredictionsFile.describe``), once its node read it."""
        for name, value in outputs.items():
            if kind_of(name) == "score_predictions" and hasattr(value, "describe"):
                self._client.set_tag(self._parent, name.rsplit(".", 1)[0], value.describe())

    def _log_training(
        self, node_name: str, inputs: dict[str, Any], outputs: dict[str, Any]
    ) -> None:
        run_id = self._open_children[node_name]  # kept open until FINISHED: a failure ends it
        history = next((v for k, v in outputs.items() if k.endswith(".history")), None)
        checkpoint = next((v for k, v in outputs.items() if k.endswith(".checkpoint")), {})
        params: dict[str, str] = {
            "method": str(checkpoint.get("method")),
            "seed": str(checkpoint.get("seed")),
        }
        for name, value in inputs.items():
            if name.startswith("params:"):
                flatten(name[len("params:") :], value, params)
        flatten("run", checkpoint.get("config", {}), params)
        # the method's hyperparameters with their defaults filled in: two runs whose configured
        # params agree but whose code defaults differ are told apart in the UI
        flatten("effective", checkpoint.get("hyperparameters", {}), params)
        self._log_params(run_id, params)
        fingerprint = (checkpoint.get("provenance") or {}).get("fingerprint")
        if fingerprint:  # what a later scoring of this training finds it by
            self._client.set_tag(run_id, FINGERPRINT_TAG, str(fingerprint))
        # imported here: it loads torch, which only a finished training needs
        from calib_pipeline.training.artifacts import training_reuse

        reuse = training_reuse(checkpoint)
        if reuse:  # a finished state reused, or an interrupted one continued: not a new training
            self._client.set_tag(run_id, "calib.training", reuse)
            self._client.set_tag(
                run_id, "calib.resumed_after_epoch", str(checkpoint["resumed_after_epoch"])
            )
        rows: list[tuple[str, float, int]] = []
        if isinstance(history, pd.DataFrame) and len(history):
            numeric = history.select_dtypes("number").drop(
                columns=["epoch", "seed"], errors="ignore"
            )
            for record_epoch, record in zip(history["epoch"], numeric.to_dict("records")):
                rows.extend((k, v, int(record_epoch)) for k, v in record.items())
            position = selected_row(history, checkpoint.get("selected_epoch"))
            final = numeric.iloc[position].to_dict()
            rows.extend(
                (f"final_{k}", v, int(history["epoch"].iloc[position])) for k, v in final.items()
            )
        rows.append(("selected_epoch", float(checkpoint.get("selected_epoch", 0)), 0))
        self._log_metrics(run_id, rows)
        self._client.set_terminated(run_id, "FINISHED")
        del self._open_children[node_name]

    @hook_impl
    @_tracked
    def after_dataset_loaded(self, dataset_name: str, data: Any, node) -> None:
        """Note the training fingerprint of each (method, seed) whose logits a node loads:
        a run that re-scores cached logits finds the training's nested run by it."""
        if self._parent is None or not isinstance(data, dict) or "provenance" not in data:
            return
        fingerprint = (data["provenance"] or {}).get("fingerprint")
        if fingerprint and kind_of(dataset_name) == "logits":
            fields = ARTIFACTS["logits"].fields(dataset_name)
            seed = fields["seed"].removeprefix("seed_")
            self._fingerprints[(fields["method"], seed)] = str(fingerprint)

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
        if "replication" in node.tags and isinstance(data, dict):
            self._log_replication(data)
        elif "reporting" not in node.tags and "posthoc_arena" not in node.tags:
            return
        study = dataset_name.split(".", 1)[0]
        if "score" in node.tags and isinstance(data, pd.DataFrame):
            self._log_score(dataset_name, data)
        elif (
            dataset_name.endswith(".metrics")
            and "evaluation" in node.tags
            and isinstance(data, pd.DataFrame)
        ):
            self._log_evaluation(study, data)
        elif dataset_name.endswith(".report_claims") and isinstance(data, dict):
            self._log_claims(study, data)
        if self._catalog is None:
            return
        folder = getattr(self._catalog[dataset_name], "saved_folder", None)
        if folder is not None:
            stem = dataset_name.split(".", 1)[-1]
            path = f"{node.namespace}/{stem}" if node.namespace else stem
            if "replication" in node.tags:
                path = "replication"
            elif "posthoc_arena" in node.tags:
                path = f"posthoc_arena/{stem}"
            self._client.log_artifacts(self._parent, str(folder), artifact_path=path)

    def _log_evaluation(self, study: str, table: pd.DataFrame) -> None:
        """A study's tidy metrics: each (method, seed)'s clean per-calibrator and
        per-family metrics on the nested run of its training (:meth:`_scored_run`), the
        study's means over seeds on the parent run."""
        with EVALUATION_LOCK:
            self._log_scores(table)
        self._log_metrics(self._parent, [(k, v, 0) for k, v in study_summary(study, table).items()])

    def _log_scores(self, table: pd.DataFrame) -> None:
        """Each (method, seed)'s metrics of ``table`` on its nested run."""
        families = family_metrics(table, self._families)
        for (method, seed), metrics in comparison_metrics(table).items():
            runs = table[(table["method"] == method) & (table["seed"].astype(str) == seed)]
            training_run = (
                str(runs["run_id"].iloc[0]) if "run_id" in runs and len(runs) else "unknown"
            )
            run_id, made_here = self._scored_run(method, seed, training_run)
            rows = [(name, value, 0) for name, value in metrics.items()]
            for family, (member, values) in families.get((method, seed), {}).items():
                if self._takes_family_member(run_id, family, member):
                    self._client.set_tag(run_id, f"calibrator.{family}", member)
                    rows.extend((name, value, 0) for name, value in values.items())
            self._log_metrics(run_id, rows)
            if made_here:
                self._client.set_terminated(run_id, "FINISHED")

    def _log_score(self, dataset_name: str, table: pd.DataFrame) -> None:
        """A scored file's metrics on the parent run: from its tidy table the clean
        per-calibrator metrics of val and test (``score.<name>.test.ece.ts``), from its
        intervals the bootstrap bounds (``score.<name>.test.ece.ts.ci_low``, ``.ci_high``)."""
        kind, prefix = kind_of(dataset_name), dataset_name.rsplit(".", 1)[0]
        rows: list[tuple[str, float, int]] = []
        if kind == "score_metrics":
            for metrics in comparison_metrics(table).values():
                rows.extend((metric_name(prefix, k), v, 0) for k, v in metrics.items())
        elif kind == "score_intervals":
            for row in table.itertuples(index=False):
                for bound in ("low", "high"):
                    name = metric_name(prefix, "test", row.metric, row.calibrator, f"ci_{bound}")
                    rows.append((name, getattr(row, bound), 0))
        self._log_metrics(self._parent, rows)

    def _takes_family_member(self, run_id: str, family: str, member: str) -> bool:
        """Whether ``member`` fills ``family``'s key on ``run_id`` in this run: unless a
        member listed before it in ``calibrators`` did already (a run that several studies
        score with different members keeps the first one's numbers)."""
        rank = self._families[family].index(member)
        if rank > self._family_rank.get((run_id, family), rank):
            return False
        self._family_rank[(run_id, family)] = rank
        return True

    def _scored_run(self, method: str, seed: str, training_run: str) -> tuple[str, bool]:
        """The nested run that gets (method, seed)'s scores, and whether it was made now.

        The training's own nested run: the one this ``kedro run`` trained, else -- the
        training was reused, or this run only re-scores it -- the one that trained it, found
        by method, seed, environment and fingerprint, if its scores were made under the same
        evaluation settings (or none yet): a re-scoring updates it (``calib.scored_by`` names
        this parent run) instead of adding a row. Under other settings its numbers must not
        be replaced by numbers of another definition: then the scores go to a nested run of
        this parent run, tagged ``calib.training = reused`` and linked to it by
        ``calib.training_mlflow_run``."""
        if (method, seed) in self._scored_runs:
            return self._scored_runs[(method, seed)], False
        own = self._own_run(method, seed)
        if own is not None and own.data.tags.get("calib.training") != "reused":
            return self._scored(method, seed, own.info.run_id, own.data.tags), False
        fingerprint = self._fingerprints.get((method, seed))
        earlier = self._training_run(method, seed, fingerprint, own) if fingerprint else None
        if earlier is not None and earlier.data.tags.get(EVALUATION_TAG, self._evaluation) == (
            self._evaluation
        ):
            self._client.set_tag(earlier.info.run_id, "calib.scored_by", self._parent)
            return self._scored(method, seed, earlier.info.run_id, earlier.data.tags), False
        if own is not None:
            target, made_here, tags = own.info.run_id, False, own.data.tags
        else:
            tags = {**self._child_tags(method, seed), "calib.training": "reused"}
            tags["kedro.training_run_id"] = training_run
            if fingerprint:
                tags[FINGERPRINT_TAG] = fingerprint
            target = self._client.create_run(
                self._experiment_id, run_name=f"{method} seed {seed}", tags=tags
            ).info.run_id
            made_here = True
        if earlier is not None:
            self._client.set_tag(target, "calib.training_mlflow_run", earlier.info.run_id)
        return self._scored(method, seed, target, tags), made_here

    def _scored(self, method: str, seed: str, run_id: str, tags: dict[str, str]) -> str:
        """Record ``run_id`` (with ``tags``) as (method, seed)'s nested run in this run: the
        digest of the evaluation settings its scores are made under, and the family members
        its earlier scores hold (a later member never replaces an earlier-listed one)."""
        self._client.set_tag(run_id, EVALUATION_TAG, self._evaluation)
        for family, members in self._families.items():
            if tags.get(f"calibrator.{family}") in members:
                rank = members.index(tags[f"calibrator.{family}"])
                self._family_rank[(run_id, family)] = rank
        self._scored_runs[(method, seed)] = run_id
        return run_id

    def _own_run(self, method: str, seed: str):
        """The nested run of (method, seed) under this parent run: the one this process
        opened, else one a Dask worker opened (found by its tags); None if neither."""
        if (method, seed) in self._runs:
            return self._client.get_run(self._runs[(method, seed)])
        found = self._client.search_runs(
            [self._experiment_id],
            max_results=1,
            filter_string=(
                f"tags.mlflow.parentRunId = '{self._parent}' and tags.method = '{method}' and "
                f"tags.seed = '{seed}'"
            ),
        )
        return found[0] if found else None

    def _training_run(self, method: str, seed: str, fingerprint: str, other=None):
        """The earliest finished nested run of the training (method, seed, environment,
        fingerprint) that trained it -- not a run that reused it, not ``other`` -- or None."""
        candidates = self._client.search_runs(
            [self._experiment_id],
            max_results=50,
            order_by=["attributes.start_time ASC"],
            filter_string=(
                "attributes.status = 'FINISHED' and "
                f"tags.method = '{method}' and tags.seed = '{seed}' and "
                f"tags.`kedro.env` = '{self._env}' and tags.`{FINGERPRINT_TAG}` = '{fingerprint}'"
            ),
        )
        return next(
            (
                run
                for run in candidates
                if run.data.tags.get("calib.training") != "reused"
                and (other is None or run.info.run_id != other.info.run_id)
            ),
            None,
        )

    def _fold_reused_trainings(self) -> None:
        """Delete this run's nested runs of trainings it reused from an earlier tracked run
        (same fingerprint) that hold no scores of their own: the earlier run is the
        training's row, updated by this run's scores (:meth:`_scored_run`)."""
        reused = self._client.search_runs(
            [self._experiment_id],
            max_results=5000,
            filter_string=(
                f"tags.mlflow.parentRunId = '{self._parent}' and tags.`calib.training` = 'reused'"
            ),
        )
        for run in reused:
            tags = run.data.tags
            if EVALUATION_TAG in tags or FINGERPRINT_TAG not in tags:
                continue
            earlier = self._training_run(tags["method"], tags["seed"], tags[FINGERPRINT_TAG], run)
            if earlier is not None:
                self._client.set_tag(earlier.info.run_id, "calib.reused_by", self._parent)
                self._client.delete_run(run.info.run_id)

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

    def _log_replication(self, report: dict[str, Any]) -> None:
        """The replication report's overall verdict counts (``replication.holds``, ...) and
        its overall line (tag ``replication``) on the parent run."""
        metrics = report.get("metrics")
        if isinstance(metrics, dict):
            self._log_metrics(self._parent, [(k, float(v), 0) for k, v in metrics.items()])
        summary = report.get("summary")
        if isinstance(summary, str) and summary:
            self._client.set_tag(
                self._parent, "replication", summary.splitlines()[0].strip("*")[:5000]
            )

    @hook_impl
    @_tracked
    def after_pipeline_run(self, run_params, run_result, pipeline, catalog) -> None:
        self._finish("FINISHED")

    @hook_impl
    @_tracked
    def on_pipeline_error(self, error, run_params, pipeline, catalog) -> None:
        self._finish("FAILED", error)

    def _finish(self, status: str, error: BaseException | None = None) -> None:
        """End the open nested runs (``FAILED``) and the parent run (``status``); a failed
        parent says why: tag ``calib.failure`` (the error's type and first line), also as
        the run's description in the UI."""
        self._fail_open_children()
        if self._parent is None:
            return
        with contextlib.suppress(Exception):  # a duplicate left behind is no lost result
            self._fold_reused_trainings()
        if error is not None:
            reason = failure_reason(error)
            self._client.set_tag(self._parent, FAILURE_TAG, reason)
            self._client.set_tag(self._parent, "mlflow.note.content", f"Failed: {reason}")
        self._client.set_terminated(self._parent, status)
        self._parent = None

    def _fail_open_children(self) -> None:
        """Nested runs of nodes that failed or never saved their outputs end ``FAILED``."""
        for run_id in self._open_children.values():
            self._client.set_terminated(run_id, "FAILED")
        self._open_children.clear()
        self._pending.clear()

    def _child_tags(self, method: str, seed: str) -> dict[str, str]:
        """A nested run's tags: its run, and what the UI filters on to compare runs of one
        environment -- the studies that read it, env, protocol and dataset."""
        return {
            "mlflow.parentRunId": self._parent,
            "method": method,
            "seed": seed,
            "kedro.training_run_id": self._kedro_run_id,
            "studies": ",".join(self._method_studies.get(method, [])) or "none",
            "kedro.env": self._env,
            "dataset": self._globals.get("dataset", "unknown"),
            "protocol": self._globals.get("protocol", "unknown"),
            **owner_tags(),
        }

    def for_worker(self) -> MlflowTrackingHook | None:
        """The node hooks of this run for a Dask worker: a picklable copy that opens nested
        runs under this parent run, writing to a tracking server directly and to a SQLite
        file through this process (see the module docstring); None while tracking is off."""
        if self._client is None or self._parent is None:
            return None
        worker = MlflowTrackingHook()
        worker._owns_parent = False
        worker._parent, worker._experiment_id = self._parent, self._experiment_id
        worker._env, worker._globals = self._env, dict(self._globals)
        worker._kedro_run_id = self._kedro_run_id
        worker._method_studies = dict(self._method_studies)
        worker._client = worker_client(self._uri)
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
            logger.warning(
                "MLflow tracking failed after a node (%s): %s",
                TRACKING_HINT,
                mask_credentials(f"{type(error).__name__}: {error}"),
            )
            return None
        return self._client.calls if isinstance(self._client, RecordedCalls) else None

    @_tracked
    def merge_worker_report(self, report: list[tuple[str, dict[str, Any]]] | None) -> None:
        """Replay a worker's recorded calls on this process's client (driver side)."""
        if report:
            RecordedCalls.replay(report, self._client)
