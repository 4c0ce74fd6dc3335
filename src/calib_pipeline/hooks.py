"""Project hooks: remember the run environment, and track runs in MLflow.

MLflow layout: one parent run per ``kedro run``; one nested run per
(method, seed) training node with its parameters, per-epoch history and final
metrics; reporting outputs (tables, figures) as artifacts of the parent run: a report
folder is logged as the catalog wrote it (``<namespace>/<report>/``), the evaluation
tables (tidy metrics, reliability bins) as CSV.
The tracking URI is ``MLFLOW_TRACKING_URI`` when set, else a SQLite file at the
project root. ``CALIB_MLFLOW=off`` disables tracking.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
from kedro.framework.hooks import hook_impl

logger = logging.getLogger(__name__)

RUN_ENV: dict[str, Any] = {"env": None}


class RunEnvironmentHook:
    """Records the session's configuration loader, so the pipeline registry reads the
    structural lists (studies, methods, seeds) of the session's environment, runtime
    ``--params`` included."""

    @hook_impl
    def after_context_created(self, context) -> None:
        RUN_ENV["env"] = context.env
        RUN_ENV["project_path"] = str(context.project_path)
        RUN_ENV["config_loader"] = context.config_loader


def _flatten(prefix: str, value: Any, out: dict[str, str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), item, out)
    else:
        out[prefix] = str(value)[:500]


class MlflowTrackingHook:
    def __init__(self) -> None:
        self._client = None
        self._parent = None
        self._experiment_id = None
        self._catalog = None

    def _enabled(self) -> bool:
        return os.environ.get("CALIB_MLFLOW", "on").lower() not in ("off", "0", "false")

    @hook_impl
    def after_context_created(self, context) -> None:
        self._project_path = Path(context.project_path)
        from kedro.config import MissingConfigException

        try:
            self._config = context.config_loader.get("mlflow") or {}
        except MissingConfigException:  # no mlflow.yml in this environment
            self._config = {}

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline, catalog) -> None:
        if not self._enabled():
            return
        import mlflow
        from mlflow.tracking import MlflowClient

        uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{self._project_path / 'mlflow.db'}"
        mlflow.set_tracking_uri(uri)
        self._client = MlflowClient(tracking_uri=uri)
        self._catalog = catalog
        name = self._config.get("experiment_name", "calib-pipeline")
        experiment = self._client.get_experiment_by_name(name)
        self._experiment_id = (
            experiment.experiment_id if experiment else self._client.create_experiment(name)
        )
        pipelines = run_params.get("pipeline_names") or [run_params.get("pipeline_name") or "__default__"]
        run_name = f"{'+'.join(str(p) for p in pipelines)} [{run_params.get('env') or 'local'}]"
        self._parent = self._client.create_run(
            self._experiment_id,
            run_name=run_name,
            tags={"kedro.run_id": str(run_params.get("run_id")), "kedro.env": str(run_params.get("env"))},
        )
        params: dict[str, str] = {}
        for key in ("env", "pipeline_names", "namespaces", "node_names", "from_nodes", "to_nodes", "runner"):
            if run_params.get(key):
                params[f"kedro.{key}"] = str(run_params[key])[:500]
        self._log_params(self._parent.info.run_id, params)
        logger.info("MLflow: parent run %s at %s", self._parent.info.run_id, uri)

    def _log_params(self, run_id: str, params: dict[str, str]) -> None:
        from mlflow.entities import Param

        items = [Param(k, v) for k, v in params.items()]
        for start in range(0, len(items), 100):
            self._client.log_batch(run_id, params=items[start : start + 100])

    def _log_metrics(self, run_id: str, rows: list[tuple[str, float, int]]) -> None:
        import time

        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        metrics = [Metric(k, float(v), stamp, step) for k, v, step in rows if pd.notna(v)]
        for start in range(0, len(metrics), 1000):
            self._client.log_batch(run_id, metrics=metrics[start : start + 1000])

    @hook_impl
    def after_node_run(self, node, catalog, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        if self._parent is None:
            return
        if "training" in node.tags:
            self._log_training(node, inputs, outputs)
        if "reporting" in node.tags:
            self._log_artifacts(node, outputs)

    def _log_training(self, node, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        history = next((v for k, v in outputs.items() if k.endswith(".history")), None)
        checkpoint = next((v for k, v in outputs.items() if k.endswith(".checkpoint")), {})
        method, seed = checkpoint.get("method", node.namespace), checkpoint.get("seed")
        child = self._client.create_run(
            self._experiment_id,
            run_name=f"{method} seed {seed}",
            tags={"mlflow.parentRunId": self._parent.info.run_id, "method": str(method), "seed": str(seed)},
        )
        run_id = child.info.run_id
        params: dict[str, str] = {"method": str(method), "seed": str(seed)}
        for name, value in inputs.items():
            if name.startswith("params:"):
                _flatten(name[len("params:") :], value, params)
        _flatten("run", checkpoint.get("config", {}), params)
        self._log_params(run_id, params)
        rows: list[tuple[str, float, int]] = []
        if isinstance(history, pd.DataFrame) and len(history):
            numeric = history.select_dtypes("number").drop(columns=["epoch", "seed"], errors="ignore")
            for record_epoch, record in zip(history["epoch"], numeric.to_dict("records")):
                rows.extend((k, v, int(record_epoch)) for k, v in record.items())
            final = numeric.iloc[-1].to_dict()
            rows.extend((f"final_{k}", v, int(history["epoch"].iloc[-1])) for k, v in final.items())
        rows.append(("selected_epoch", float(checkpoint.get("selected_epoch", 0)), 0))
        self._log_metrics(run_id, rows)
        self._client.set_terminated(run_id, "FINISHED")

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
            self._client.log_artifacts(self._parent.info.run_id, tmp, artifact_path=node.namespace or "")

    @hook_impl
    def after_dataset_saved(self, dataset_name: str, data: Any, node) -> None:
        if self._parent is None or "reporting" not in node.tags or self._catalog is None:
            return
        folder = getattr(self._catalog[dataset_name], "saved_folder", None)
        if folder is not None:
            stem = dataset_name.split(".", 1)[-1]
            path = f"{node.namespace}/{stem}" if node.namespace else stem
            self._client.log_artifacts(self._parent.info.run_id, str(folder), artifact_path=path)

    @hook_impl
    def after_pipeline_run(self, run_params, run_result, pipeline, catalog) -> None:
        if self._parent is not None:
            self._client.set_terminated(self._parent.info.run_id, "FINISHED")
            self._parent = None

    @hook_impl
    def on_pipeline_error(self, error, run_params, pipeline, catalog) -> None:
        if self._parent is not None:
            self._client.set_terminated(self._parent.info.run_id, "FAILED")
            self._parent = None
