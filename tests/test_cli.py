"""The project's `kedro run` (calib_pipeline/cli.py): Kedro's own command, which also refuses
a run file with params together with --params before anything runs."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest
from click.testing import CliRunner
from kedro.framework.cli.project import run as kedro_run
from kedro.framework.cli.utils import find_run_command
from kedro.framework.project import configure_project

from calib_pipeline import cli
from calib_pipeline.settings import project_root

RUN_FILE = "paper_runs/cifar10/dark_side_vgg16_bn.yml"


def invoke(args: list[str]):
    """`kedro run <args>` through the project's command, with the project's session mocked."""
    configure_project("calib_pipeline")
    with mock.patch("calib_pipeline.settings.CalibSession.create") as create:
        result = CliRunner().invoke(cli.run, args, obj=mock.MagicMock())
    return result, create


def test_the_project_run_command_is_kedros_with_the_same_options():
    assert find_run_command("calib_pipeline") is cli.run, (
        "kedro run and python -m calib_pipeline use it"
    )
    assert [p.name for p in cli.run.params] == [p.name for p in kedro_run.params]
    assert cli.cli.get_command(None, "run") is cli.run


@pytest.mark.parametrize(
    "args",
    [
        [f"--config={RUN_FILE}", "--params=seeds=[0]"],
        ["-c", RUN_FILE, "--params", "seeds=[0]"],
        ["--params=seeds=[0]", "--config", RUN_FILE],
    ],
)
def test_a_run_file_with_params_and_params_on_the_command_line_is_refused(monkeypatch, args):
    """Kedro replaces a run file's params with --params: the paper protocol's network and
    schedule would silently be dropped (a ResNet-18 trained on the env's schedule)."""
    monkeypatch.chdir(project_root())
    result, create = invoke(args)
    assert result.exit_code == 2, result.output
    assert (
        f"kedro run --config={RUN_FILE} --params=...: Kedro replaces the run file's params "
        "(methods, model, seeds, training) with --params rather than adding to them"
    ) in " ".join(result.output.split())
    assert "Nothing was run." in result.output
    create.assert_not_called()


@pytest.mark.parametrize(
    "args",
    [
        [f"--config={RUN_FILE}"],  # the file alone
        ["--params=seeds=[0]"],  # --params alone
        ["--config=run_without_params.yml", "--params=seeds=[0]"],
    ],
)
def test_a_run_file_or_params_alone_pass(monkeypatch, tmp_path, args):
    (tmp_path / "run_without_params.yml").write_text("run:\n  env: test\n  pipelines: baseline\n")
    monkeypatch.chdir(tmp_path)
    args = [a.replace(RUN_FILE, str(Path(project_root()) / RUN_FILE)) for a in args]
    result, create = invoke(args)
    assert result.exit_code == 0, result.output
    create.assert_called_once()
