"""What a session's hooks hand to the rest of the project: its configuration, for the
pipeline registry (:class:`SessionConfigHook`), and its run id, environment and protocol,
for the nodes (:class:`RunInfoHook`)."""

from __future__ import annotations

import os
from typing import Any

from kedro.framework.hooks import hook_impl

from calib_pipeline.pipelines.run_info import RUN_INFO, run_info
from calib_pipeline.protocols import PROTOCOL

# The environment Kedro runs when none is named (settings.CONFIG_LOADER_ARGS).
DEFAULT_RUN_ENV = "local"


class SessionConfigHook:
    """The configuration loader and environment of the latest session, runtime ``--params``
    included, for the pipeline registry: it reads the structural lists (studies, methods,
    seeds) from them.

    ``register_pipelines()`` takes no arguments and Kedro offers no public way to reach the
    session from it (kedro-org/kedro#3093); ``after_context_created`` is the documented point
    where a session's context -- and so its configuration -- is known, and Kedro builds the
    pipelines only after it (``session.run``, ``%reload_kedro``). The project registers one
    instance, ``settings.SESSION_CONFIG``.
    """

    def __init__(self) -> None:
        self._config_loader = None
        self._env: str | None = None

    @hook_impl
    def after_context_created(self, context) -> None:
        self._config_loader = context.config_loader
        self._env = context.env

    def current(self, make_loader) -> tuple[Any, str]:
        """The session's loader and environment; before any session (a plain script), the
        loader ``make_loader(env)`` makes for ``KEDRO_ENV`` (default: local)."""
        if self._config_loader is not None:
            return self._config_loader, self._env or DEFAULT_RUN_ENV
        env = os.environ.get("KEDRO_ENV") or DEFAULT_RUN_ENV
        return make_loader(env), env


class RunInfoHook:
    """Puts the session's run id (its save version), environment and protocol into the
    catalog as the ``run_info`` input before a pipeline runs.

    Training nodes record them in each run's provenance. They get them as an input, not
    from a hook's state, so that a node run in another process (a Dask worker) or from a
    test's in-memory catalog (which adds ``run_info`` itself) sees the same values.
    """

    def __init__(self) -> None:
        self._config_loader = None

    @hook_impl
    def after_context_created(self, context) -> None:
        self._config_loader = context.config_loader

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline, catalog) -> None:
        env = run_params.get("env") or DEFAULT_RUN_ENV
        # the registry checked the protocol of the session's globals when it built the pipelines
        protocol = self._config_loader["globals"][PROTOCOL]
        catalog[RUN_INFO] = run_info(run_params["run_id"], env, protocol)
