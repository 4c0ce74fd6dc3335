"""The project's ``kedro run``: Kedro's own command -- its options and behaviour -- with the
refusals that only the command line can make, and a help that lists what there is to run
(studies, stages, environments, runners), read from the configuration and the code; and
``kedro studies``, the studies of one environment.

Kedro loads a project's ``cli.py`` and lets its commands override the built-in ones
(Kedro's docs, "how to add or modify CLI commands"); ``python -m calib_pipeline`` finds the
same commands (``find_run_command``; ``__main__``).
"""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path
from types import ModuleType
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


def refuse_bad_runner_params(runner: str | None, runner_params: dict[str, Any] | None) -> None:
    """``--runner-params`` the runner refuses (``workers=0``, ``tasks_per_gpu=0``, a name it
    does not take), in one line: Kedro builds the runner outside any handler, and its
    refusal would be a 30-line traceback."""
    if not runner_params:
        return
    runner_class = load_obj(runner or "SequentialRunner", "kedro.runner")
    try:
        runner_class(**runner_params)
    except (TypeError, ValueError) as error:
        raise click.UsageError(f"--runner-params: {error}. Nothing was run.") from None


def environment_names(conf: Path) -> list[str]:
    """The environments: the folders of ``conf``, sorted."""
    return sorted(p.name for p in conf.iterdir() if p.is_dir() and not p.name.startswith("."))


def refuse_unknown_env(env: str | None, conf: Path) -> None:
    """An ``--env`` without a ``conf/<env>`` folder, in one line with the existing ones."""
    if env and not (conf / env).is_dir():
        envs = environment_names(conf)
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
    refuse_bad_runner_params(options.get("runner"), options.get("runner_params"))
    refuse_unknown_env(options.get("env"), Path(project_root()) / "conf")
    try:
        return kedro_run.callback(**options)
    except ValueError as error:
        if not str(error).startswith(NO_NAMESPACE):
            raise
        valid = _namespaces(options.get("pipelines"))
        raise ValueError(f"{error}; the namespaces of this run are {', '.join(valid)}") from None


def first_phrase(module: ModuleType) -> str:
    """The first phrase of ``module``'s docstring (up to its first ``:``, ``;`` or ``.``)."""
    doc = " ".join((module.__doc__ or "").split("\n\n")[0].split())
    ends = [i for i in (doc.find(": "), doc.find("; "), doc.find(". ")) if i > 0]
    return doc[: min(ends)] if ends else doc.rstrip(".")


def environment_overview(conf: Path, env: str) -> tuple[str, dict[str, str]]:
    """``env``'s dataset and protocol in words, and its studies (name -> description)."""
    from calib_pipeline.settings import config_loader

    try:
        loader = config_loader(env, conf.parent)
        globals_, studies = loader["globals"], loader["parameters"]["studies"]
    except Exception as error:  # noqa: BLE001 -- the listing names the fault and goes on
        return f"its configuration cannot be read: {error}", {}
    words = f"{globals_['dataset']['name']}, protocol {globals_['protocol']}"
    return words, {name: _described(study or {}) for name, study in studies.items()}


def _described(study: dict) -> str:
    """A study's description, marked when it runs by its name only (``on_request``)."""
    description = study.get("description", "")
    return f"(run by name only) {description}".strip() if study.get("on_request") else description


def write_overview(formatter: click.HelpFormatter) -> None:
    """What there is to run: every environment's studies (those of only some environments
    marked), the stages (``pipelines.artifacts.STAGE_ORDER``, described by their modules),
    the environments (the ``conf`` folders) and the runners."""
    from calib_pipeline.hooks import DEFAULT_RUN_ENV
    from calib_pipeline.pipelines.artifacts import STAGE_ORDER
    from calib_pipeline.settings import project_root

    conf = Path(project_root()) / "conf"
    envs = [env for env in environment_names(conf) if env != "base"]  # base: under every env
    overviews = {env: environment_overview(conf, env) for env in envs}
    studies: dict[str, str] = {}
    for _, env_studies in overviews.values():
        for name, description in env_studies.items():
            studies.setdefault(name, description)
    rows = []
    for name, description in studies.items():
        having = [env for env in envs if name in overviews[env][1]]
        only = "" if len(having) == len(envs) else f"[only --env={','.join(having)}] "
        rows.append((name, only + description))
    with formatter.section("Studies (--pipelines=<study>: every stage of one comparison)"):
        formatter.write_dl(rows)
    stages = [(stage, first_phrase(stage_modules()[stage])) for stage in STAGE_ORDER]
    with formatter.section("Stages (--pipelines=<stage> for every study, <study>.<stage> for one)"):
        formatter.write_dl(stages)
    with formatter.section("Environments (--env=<env>: dataset, protocol)"):
        formatter.write_dl(
            [
                (env, overviews[env][0] + (" (the default)" if env == DEFAULT_RUN_ENV else ""))
                for env in envs
            ]
        )
    with formatter.section(
        "Runners (--runner=<runner>; default SequentialRunner; docs/scaling.md)"
    ):
        formatter.write_dl([(runner, runner_description(runner)) for runner in RUNNERS])


def stage_modules() -> dict[str, ModuleType]:
    """Each stage's package under ``pipelines/``, by stage name."""
    from calib_pipeline.pipelines import (
        data_split,
        logits,
        posthoc,
        posthoc_arena,
        replication,
        reporting,
        score,
        shift,
        training,
    )

    packages = (
        data_split,
        training,
        logits,
        shift,
        posthoc,
        reporting,
        replication,
        score,
        posthoc_arena,
    )
    return {package.__name__.rsplit(".", 1)[-1]: package for package in packages}


def runner_description(runner: str) -> str:
    """What the project's own runner does (its module's first phrase); Kedro's runners go
    without one (their docstrings describe the class, not the use)."""
    module = load_obj(runner, "kedro.runner").__module__
    return first_phrase(sys.modules[module]) if module.startswith(f"{__package__}.") else ""


class OverviewCommand(click.Command):
    """A command whose help ends with :func:`write_overview`."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        write_overview(formatter)
        formatter.write_paragraph()
        formatter.write_text(f"One environment's studies in detail: {STUDIES_USAGE}.")


STUDIES_USAGE = "kedro studies --env=<env> (or python -m calib_pipeline studies --env=<env>)"

run = OverviewCommand(
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


@cli.command("studies")
@click.option("--env", "-e", default=None, help="The environment (default: KEDRO_ENV, else local).")
def studies(env: str | None) -> None:
    """The studies of one environment, as its pipeline registry builds them: each one's
    methods (the namespaces of its runs), seeds and reports."""
    from calib_pipeline.hooks import DEFAULT_RUN_ENV
    from calib_pipeline.pipelines.config import parse_structure
    from calib_pipeline.settings import config_loader, project_root

    refuse_unknown_env(env, Path(project_root()) / "conf")
    env = env or os.environ.get("KEDRO_ENV") or DEFAULT_RUN_ENV
    loader = config_loader(env)
    parameters = loader["parameters"]
    structure = parse_structure(parameters)
    dataset, protocol = loader["globals"]["dataset"]["name"], loader["globals"]["protocol"]
    click.echo(f"--env={env}: {dataset}, protocol {protocol}; {len(structure.studies)} studies")
    for name, study in structure.studies.items():
        description = _described(parameters["studies"][name] or {})
        click.echo(f"\n{name}: {description}".rstrip(": "))
        click.echo(f"  methods ({len(study.methods)}): {', '.join(study.methods)}")
        click.echo(f"  seeds: {', '.join(map(str, study.seeds))}")
        click.echo(f"  reports: {', '.join(study.reports)}")
        click.echo(f"  run: kedro run --env={env} --pipelines={name}")
