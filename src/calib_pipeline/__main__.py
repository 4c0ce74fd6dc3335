"""``python -m calib_pipeline [kedro run options]``: the project's ``kedro run``;
``python -m calib_pipeline studies --env=<env>``: the project's ``kedro studies``; bare,
what there is to run (studies, stages, environments, runners)."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from kedro.framework.cli.utils import find_run_command
from kedro.framework.project import configure_project

PROG = "python -m calib_pipeline"


def main(args: list[str] | None = None) -> None:
    """Run the pipelines as ``kedro run`` would, with the same options; run a project
    command named first (``studies``); without arguments, say what there is to run."""
    args = sys.argv[1:] if args is None else args
    package_name = Path(__file__).parent.name
    configure_project(package_name)
    from calib_pipeline import cli

    if not args:
        print_overview()
        return
    if args[0] in cli.cli.commands:
        cli.cli.main(args=args, prog_name=PROG)
        return
    run = find_run_command(package_name)
    # prog_name is the click context's info_name, which Kedro's --config callback reads as
    # the run file's section: "run", as under `kedro run`
    run.main(args=args, prog_name="run")


def print_overview() -> None:
    """What a bare ``python -m calib_pipeline`` prints instead of running everything."""
    from calib_pipeline import cli

    formatter = click.HelpFormatter()
    formatter.write_text(
        f"Usage: {PROG} [kedro run options] (the same as kedro run; --help lists them), "
        f"e.g. {PROG} --pipelines=focal_meta --env=test"
    )
    cli.write_overview(formatter)
    formatter.write_paragraph()
    formatter.write_text(f"One environment's studies in detail: {cli.STUDIES_USAGE}.")
    click.echo(formatter.getvalue(), nl=False)


if __name__ == "__main__":
    main()
