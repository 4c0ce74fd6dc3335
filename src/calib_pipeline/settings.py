"""Kedro project settings."""

import os
from pathlib import Path
from typing import Any

from kedro.config import OmegaConfigLoader
from omegaconf.resolvers import oc

from calib_pipeline.hooks import MlflowTrackingHook, RunEnvironmentHook


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


HOOKS = (RunEnvironmentHook(), MlflowTrackingHook())

CONFIG_LOADER_CLASS = OmegaConfigLoader
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
    "merge_strategy": {"parameters": "soft", "globals": "soft", "catalog": "soft"},
    "config_patterns": {"mlflow": ["mlflow*", "mlflow*/**"]},
    "custom_resolvers": {"project_root": project_root, "data_root": data_root, "oc.env": oc.env},
}


def load_parameters(env: str | None, project_path: str | Path | None = None) -> dict[str, Any]:
    """Parameters of ``env`` merged over base, read the same way the Kedro session does."""
    loader = CONFIG_LOADER_CLASS(
        conf_source=str(Path(project_path or project_root()) / "conf"),
        env=env,
        **CONFIG_LOADER_ARGS,
    )
    return loader["parameters"]
