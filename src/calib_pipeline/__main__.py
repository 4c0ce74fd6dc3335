"""``python -m calib_pipeline [kedro run options]``: the project's ``kedro run``."""

from __future__ import annotations

import sys
from pathlib import Path

from kedro.framework.cli.utils import find_run_command
from kedro.framework.project import configure_project


def main(args: list[str] | None = None) -> None:
    """Run the pipelines as ``kedro run`` would, with the same options."""
    package_name = Path(__file__).parent.name
    configure_project(package_name)
    run = find_run_command(package_name)
    # prog_name is the click context's info_name, which Kedro's --config callback reads as
    # the run file's section: "run", as under `kedro run`
    run.main(args=sys.argv[1:] if args is None else args, prog_name="run")


if __name__ == "__main__":
    main()
