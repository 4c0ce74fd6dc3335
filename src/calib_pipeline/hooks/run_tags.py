"""The tags that say where a tracked run comes from: the environment's dataset and protocol,
the git commit, and the host and process that hold it open (so that a later start can end
the runs of a process that died)."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

from calib_pipeline.protocols import PROTOCOL


def session_globals(config_loader) -> dict[str, str]:
    """Dataset name and protocol from the environment's globals.yml; what is missing is left out."""
    try:
        values = config_loader["globals"] or {}
    except Exception:  # noqa: BLE001 -- no globals: the tags say "unknown"
        return {}
    dataset = values.get("dataset")
    found = {
        "dataset": dataset.get("name") if isinstance(dataset, dict) else dataset,
        "protocol": values.get(PROTOCOL),
    }
    return {key: str(value) for key, value in found.items() if value}


def git_tags(project_path: Path | None) -> dict[str, str]:
    """``git.commit`` (``git rev-parse HEAD`` of the project, also as MLflow's own
    ``mlflow.source.git.commit``) and ``git.dirty`` (uncommitted changes to tracked files);
    ``unknown`` without git or outside a repository -- never an error."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=project_path, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()

    try:
        if project_path is None:
            raise OSError("no project path")
        commit = git("rev-parse", "HEAD")
        dirty = "true" if git("status", "--porcelain", "--untracked-files=no") else "false"
    except (OSError, subprocess.SubprocessError):
        commit = dirty = "unknown"
    return {"git.commit": commit, "mlflow.source.git.commit": commit, "git.dirty": dirty}


def owner_tags() -> dict[str, str]:
    """Who holds a run open: lets a later start end the runs of a killed process."""
    return {"calib.host": socket.gethostname(), "calib.pid": str(os.getpid())}


def process_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True
