"""Kedro project settings."""

import fcntl
import os
import time
from pathlib import Path
from typing import Any

from kedro.config import OmegaConfigLoader
from kedro.framework.session import KedroSession
from kedro.io.core import generate_timestamp
from omegaconf.resolvers import oc

# MLflow otherwise gives its logger a console handler of its own, which printed a store's
# SQLAlchemy tracebacks (hundreds of lines) on the console before the tracking hook's one
# warning; conf/logging.yml sends MLflow's records to the run's log file instead. Set before
# anything imports mlflow.
os.environ.setdefault("MLFLOW_CONFIGURE_LOGGING", "false")

from calib_pipeline.console import ConsoleHook
from calib_pipeline.hooks import (
    DEFAULT_RUN_ENV,
    LatestReportsHook,
    MlflowTrackingHook,
    OwnVersionsHook,
    RunInfoHook,
    RunPreflightHook,
    SessionConfigHook,
)


def project_root() -> str:
    """The project folder, independent of the working directory (notebooks run from
    ``notebooks/``, tests from anywhere)."""
    candidate = Path(__file__).resolve().parents[2]
    if (candidate / "pyproject.toml").exists():
        return str(candidate)
    return str(Path.cwd())


def data_root() -> str:
    """Where generated data goes: ``CALIB_DATA_DIR`` when set (tests use a temporary
    folder), else ``<project>/data``."""
    return os.environ.get("CALIB_DATA_DIR") or str(Path(project_root()) / "data")


#: Where save versions are claimed: ``<data>/.save_versions/<version>/``; a running run holds
#: ``RUN_LOCK`` in its claim locked, so retention leaves a run's versions alone while it writes.
SAVE_VERSION_CLAIMS, RUN_LOCK = ".save_versions", "running.lock"
# the open lock files of this process's claims: the OS releases them when it exits
_HELD_CLAIMS: list[Any] = []


def claim_save_version(proposed: str | None = None) -> str:
    """A save version (Kedro's timestamp format, so "latest" still sorts) that no other
    process writing to this data folder holds: ``proposed`` if it is free, else a new one.

    Kedro stamps a session with the current millisecond; two runs started together can
    get the same stamp and then write into, or fail on, each other's version folders.
    Each version is claimed by creating ``<data>/.save_versions/<version>`` (``mkdir`` is
    atomic, also on shared file systems); a taken one is skipped. The claim's ``RUN_LOCK``
    stays locked by this process until it exits (``calib_pipeline.retention`` skips it).
    """
    claims = Path(data_root()) / SAVE_VERSION_CLAIMS
    claims.mkdir(parents=True, exist_ok=True)
    version = proposed or generate_timestamp()
    while True:
        try:
            (claims / version).mkdir()
        except FileExistsError:
            time.sleep(0.001)
            version = generate_timestamp()
            continue
        lock = open(claims / version / RUN_LOCK, "a+")  # noqa: SIM115 -- held until exit
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        _HELD_CLAIMS.append(lock)
        return version


class CalibSession(KedroSession):
    """Kedro's session with a claimed session id (:func:`claim_save_version`): the id is the
    save version of every versioned dataset the run writes. ``SESSION_CLASS`` below makes
    ``kedro run``, ``python -m calib_pipeline``, ``kedro catalog`` and ``%reload_kedro``
    create it; ``KedroSession.create`` itself (in a test) keeps Kedro's plain timestamp."""

    def __init__(self, session_id: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(claim_save_version(session_id), *args, **kwargs)


SESSION_CLASS = CalibSession

# kedro-viz registers hooks that rewrite .viz/*.json in the working directory on every run,
# also when CALIB_DATA_DIR points elsewhere: a run writes only under its data folder
# (`kedro viz` then shows no dataset statistics; the pipelines and layers are the same).
DISABLE_HOOKS_FOR_PLUGINS = ("kedro-viz",)


def log_folder() -> str:
    """Where each run's log file goes: ``<data>/logs/<run id>.log`` (docs/logging.md)."""
    return str(Path(data_root()) / "logs")


TRACKING = MlflowTrackingHook()
# the session's configuration, read by pipeline_registry.register_pipelines (its docstring)
SESSION_CONFIG = SessionConfigHook()
HOOKS = (
    SESSION_CONFIG,
    RunInfoHook(),
    RunPreflightHook(),
    OwnVersionsHook(),
    LatestReportsHook(),
    TRACKING,
    ConsoleHook(log_folder, tracking=TRACKING),
)

CONFIG_LOADER_CLASS = OmegaConfigLoader
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": DEFAULT_RUN_ENV,
    "merge_strategy": {"parameters": "soft", "globals": "soft", "catalog": "soft"},
    "config_patterns": {
        "mlflow": ["mlflow*", "mlflow*/**"],
        # globals_*.yml: what the paper envs share (conf/base/globals_paper_envs.yml)
        "globals": ["globals.yml", "globals_*.yml"],
    },
    "custom_resolvers": {"project_root": project_root, "data_root": data_root, "oc.env": oc.env},
}


def config_loader(env: str | None, project_path: str | Path | None = None) -> OmegaConfigLoader:
    """The configuration of ``env`` (over base), read the same way the Kedro session does."""
    return CONFIG_LOADER_CLASS(
        conf_source=str(Path(project_path or project_root()) / "conf"),
        env=env,
        **CONFIG_LOADER_ARGS,
    )


def load_parameters(env: str | None, project_path: str | Path | None = None) -> dict[str, Any]:
    """Parameters of ``env`` merged over base, read the same way the Kedro session does."""
    return config_loader(env, project_path)["parameters"]
