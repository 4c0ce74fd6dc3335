"""The MLflow client side of tracking: short HTTP timeouts, masked credentials, a lock for
SQLite files, and the clients a Dask worker's copy of the tracking hook writes through.

A tracking server is written to by the worker itself (:class:`ServerClient`); a SQLite file
only by the driver (SQLite takes one writer at a time and may not even be on the worker's
host): the worker records its calls (:class:`RecordedCalls`) and the driver replays them,
with the worker's timestamps. Both implement :data:`WORKER_CALLS`, every ``MlflowClient``
call the tracking hook makes for a node that runs in a worker.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

CREDENTIALS = re.compile(r"(?<=://)[^/@\s:]+:[^/@\s]+@")
# A dead tracking server must cost seconds, not MLflow's default 7 retries x 120 s timeout.
HTTP_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "5",
}
# What the tracking hook calls for a training, logits or shift node (the nodes the Dask
# runner sends to workers): open the nested run, log its params and metrics, tag a reused
# or resumed training, end the run.
WORKER_CALLS = ("create_run", "log_batch", "set_tag", "set_terminated")


def mask_credentials(text: str) -> str:
    """``scheme://user:password@host`` -> ``scheme://***@host`` anywhere in ``text``."""
    return CREDENTIALS.sub("***@", text)


def use_http_defaults() -> None:
    """Set :data:`HTTP_DEFAULTS` in this process's environment, where not set already."""
    for key, value in HTTP_DEFAULTS.items():
        os.environ.setdefault(key, value)


def single_writer(uri: str | None) -> bool:
    """A backend that only one process should write to: a SQLite (or other local) file."""
    return uri is None or uri.startswith(("sqlite:", "file:")) or "://" not in uri


@contextlib.contextmanager
def backend_lock(uri: str) -> Iterator[None]:
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


def worker_client(uri: str | None) -> ServerClient | RecordedCalls:
    """The client of a worker's copy of the tracking hook for the backend at ``uri``."""
    return RecordedCalls() if single_writer(uri) else ServerClient(uri)


class ServerClient:
    """The :data:`WORKER_CALLS`, sent straight to a tracking server through an
    ``MlflowClient`` created in the worker on first use (clients do not pickle)."""

    def __init__(self, uri: str) -> None:
        self._uri = uri
        self._client = None

    def __getstate__(self) -> dict[str, Any]:
        return {"_uri": self._uri, "_client": None}

    def _connected(self):
        if self._client is None:
            from mlflow.tracking import MlflowClient

            use_http_defaults()  # a worker on another host has its own environment
            self._client = MlflowClient(tracking_uri=self._uri)
        return self._client

    def create_run(self, experiment_id: str, **kwargs: Any):
        return self._connected().create_run(experiment_id, **kwargs)

    def log_batch(self, run_id: str, **kwargs: Any) -> None:
        self._connected().log_batch(run_id, **kwargs)

    def set_tag(self, run_id: str, key: str, value: Any) -> None:
        self._connected().set_tag(run_id, key, value)

    def set_terminated(self, run_id: str, status: str | None = None) -> None:
        self._connected().set_terminated(run_id, status)


class RecordedCalls:
    """Stands in for ``MlflowClient`` in a worker that must not write to the backend: records
    the :data:`WORKER_CALLS`, with the time each was made, for the driver to replay."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def create_run(self, experiment_id: str, run_name: str | None = None, tags: dict | None = None):
        placeholder = f"pending-{uuid.uuid4().hex}"
        self.calls.append(
            (
                "create_run",
                {
                    "placeholder": placeholder,
                    "experiment_id": experiment_id,
                    "run_name": run_name,
                    "tags": tags,
                    "start_time": _now_ms(),
                },
            )
        )
        return SimpleNamespace(info=SimpleNamespace(run_id=placeholder))  # as MlflowClient's Run

    def log_batch(self, run_id: str, metrics=(), params=()) -> None:
        batch = {"run_id": run_id, "metrics": list(metrics), "params": list(params)}
        self.calls.append(("log_batch", batch))

    def set_tag(self, run_id: str, key: str, value: Any) -> None:
        self.calls.append(("set_tag", {"run_id": run_id, "key": key, "value": value}))

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
