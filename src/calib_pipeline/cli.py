"""The project's ``kedro run``: Kedro's own command -- its options, help and behaviour --
with one refusal that only the command line can make.

Kedro loads a project's ``cli.py`` and lets its commands override the built-in ones
(Kedro's docs, "how to add or modify CLI commands"); ``python -m calib_pipeline`` finds the
same command (``find_run_command``).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource
from kedro.framework.cli.project import run as kedro_run
from kedro.framework.cli.utils import CONTEXT_SETTINGS
from kedro.utils import load_obj

GIVEN = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
RUN_FILE = "calib_pipeline.run_file"  # the --config path, kept in the click context's meta


def refuse_dropped_run_file_params(ctx: click.Context) -> None:
    """Refuse ``kedro run --config=<file> --params=...`` when the file has params: Kedro
    *replaces* a run file's params with ``--params`` instead of merging them, so the run
    would silently train without the file's network and schedule (e.g. a paper protocol of
    ``paper_runs/`` plus ``--params=seeds=[0]`` would train the env's ResNet-18).

    Kedro reads the file's ``run:`` section into the command's defaults (``default_map``);
    ``--params`` given on the command line (or by environment) takes their place."""
    config = ctx.meta.get(RUN_FILE)
    file_params = (ctx.default_map or {}).get("params") if config else None
    if not file_params or ctx.get_parameter_source("params") not in GIVEN:
        return
    shown = os.path.relpath(config)
    raise click.UsageError(
        f"kedro run --config={config if shown.startswith('..') else shown} --params=...: "
        f"Kedro replaces the run file's params ({', '.join(sorted(file_params))}) with --params "
        "rather than adding to them, so this run would train without them; put the extra "
        'parameters into a copy of the file instead (docs/models.md, "Paper protocols"). '
        "Nothing was run."
    )


def _remembering_run_file(option: click.Option) -> click.Option:
    """Kedro's ``--config`` option, which also keeps the file's path in ``ctx.meta``: Kedro's
    callback returns a value of the file rather than its path."""
    kedro_callback = option.callback
    remembering = copy.copy(option)

    def remember(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        ctx.meta[RUN_FILE] = value
        return kedro_callback(ctx, param, value)

    remembering.callback = remember
    return remembering


# the runners the project's guarantees hold under (hooks/preflight.py refuses ParallelRunner)
RUNNERS = ("SequentialRunner", "ThreadRunner", "calib_pipeline.runner.DaskRunner")
NO_NAMESPACE = "Pipeline does not contain nodes with the following namespaces"


def refuse_unknown_runner(runner: str | None) -> None:
    """A ``--runner`` that cannot be imported, in one line with the valid ones (Kedro's own
    failure is a 30-line traceback of its loader)."""
    if not runner:
        return
    try:
        load_obj(runner, "kedro.runner")  # as Kedro resolves it
    except (ImportError, AttributeError, ValueError):
        raise click.UsageError(
            f"--runner={runner}: no such runner; use one of {', '.join(RUNNERS)} "
            "(docs/scaling.md). Nothing was run."
        ) from None


def refuse_unknown_env(env: str | None, conf: Path) -> None:
    """An ``--env`` without a ``conf/<env>`` folder, in one line with the existing ones."""
    if env and not (conf / env).is_dir():
        envs = sorted(p.name for p in conf.iterdir() if p.is_dir() and not p.name.startswith("."))
        raise click.UsageError(
            f"--env={env}: no folder {conf / env}; the environments are {', '.join(envs)}. "
            "Nothing was run."
        )


def _namespaces(pipeline_names: Any) -> list[str]:
    from kedro.framework.project import pipelines

    names = [n for n in (pipeline_names or ["__default__"]) if n in pipelines]
    nodes = [node for name in names for node in pipelines[name].nodes]
    return sorted({node.namespace.split(".")[0] for node in nodes if node.namespace})


def _checked_run(**options: Any) -> Any:
    from calib_pipeline.settings import project_root

    refuse_dropped_run_file_params(click.get_current_context())
    refuse_unknown_runner(options.get("runner"))
    refuse_unknown_env(options.get("env"), Path(project_root()) / "conf")
    try:
        return kedro_run.callback(**options)
    except ValueError as error:
        if not str(error).startswith(NO_NAMESPACE):
            raise
        valid = _namespaces(options.get("pipelines"))
        raise ValueError(f"{error}; the namespaces of this run are {', '.join(valid)}") from None


run = click.Command(
    name="run",
    callback=_checked_run,
    params=[_remembering_run_file(p) if p.name == "config" else p for p in kedro_run.params],
    help=kedro_run.help,
    short_help=kedro_run.short_help,
    context_settings=kedro_run.context_settings,
)


@click.group(context_settings=CONTEXT_SETTINGS, name=__file__)
def cli() -> None:
    """Project commands (they override Kedro's built-in ones of the same name)."""


cli.add_command(run)
