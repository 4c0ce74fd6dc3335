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


def overview_of(monkeypatch, project: Path, capsys) -> str:
    """What a bare ``python -m calib_pipeline`` prints for the project folder ``project``."""
    from calib_pipeline.__main__ import main

    monkeypatch.setattr("calib_pipeline.settings.project_root", lambda: str(project))
    main([])
    return " ".join(capsys.readouterr().out.split())


@pytest.fixture
def project_with_an_env_only_study(tmp_path) -> Path:
    """A copy of the project's conf with ``conf/lab``: base's studies plus ``lab_only``."""
    import shutil

    shutil.copytree(Path(project_root()) / "conf", tmp_path / "conf")
    (tmp_path / "conf" / "lab").mkdir()
    (tmp_path / "conf" / "lab" / "globals.yml").write_text("protocol: lab\n")
    (tmp_path / "conf" / "lab" / "parameters_studies.yml").write_text(
        "studies:\n  lab_only:\n    description: a study of this env alone\n    methods: [ce]\n"
    )
    return tmp_path


def test_a_bare_invocation_lists_studies_stages_envs_and_runners_from_the_code(
    monkeypatch, capsys, project_with_an_env_only_study
):
    """Nothing runs; every name comes from conf/ and the code, so a new env's study shows."""
    from calib_pipeline.pipelines.artifacts import STAGE_ORDER

    with mock.patch("calib_pipeline.settings.CalibSession.create") as create:
        shown = overview_of(monkeypatch, project_with_an_env_only_study, capsys)
    create.assert_not_called()
    assert "lab_only [only --env=lab] a study of this env alone" in shown
    assert "baseline [only --env=test]" in shown
    assert "focal_meta Towards Unbiased Calibration" in shown  # in every env: no mark
    stages = shown[shown.index("Stages") : shown.index("Environments")]
    assert sorted(STAGE_ORDER, key=lambda stage: stages.find(f" {stage} ")) == list(STAGE_ORDER)
    assert " score Score a user's own predictions files " in stages
    assert "lab digits, protocol lab" in shown
    assert "local digits, protocol digits (the default)" in shown
    assert "test digits, protocol test" in shown
    assert " base " not in shown  # base is read under every env, never run alone
    assert "calib_pipeline.runner.DaskRunner Run a Kedro pipeline on a Dask" in shown
    assert "SequentialRunner" in shown and "ThreadRunner" in shown


def test_an_env_whose_configuration_cannot_be_read_is_named_with_its_fault(
    monkeypatch, capsys, project_with_an_env_only_study
):
    (project_with_an_env_only_study / "conf" / "lab" / "globals.yml").write_text("protocol: [\n")
    shown = overview_of(monkeypatch, project_with_an_env_only_study, capsys)
    assert "lab its configuration cannot be read:" in shown
    assert "test digits, protocol test" in shown  # the others are still listed


def test_the_run_help_ends_with_what_there_is_to_run():
    result = CliRunner().invoke(cli.run, ["--help"])
    assert result.exit_code == 0, result.output
    shown = " ".join(result.output.split())
    assert "--pipelines TEXT" in shown  # Kedro's options stay
    assert "baseline [only --env=test]" in shown
    assert "calib_pipeline.runner.DaskRunner" in shown
    assert "kedro studies --env=<env>" in shown


def test_studies_lists_an_envs_own_studies_with_their_methods_seeds_and_reports():
    result = CliRunner().invoke(cli.cli, ["studies", "--env=test"])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("--env=test: digits, protocol test; 8 studies")
    block = result.output[result.output.index("\nbaseline: ") :]
    assert "  methods (3): ce, ls_epsilon_0p05, focal_gamma_3" in block
    assert "  seeds: 0\n" in block
    assert "  reports: summary, reliability, shift_tables, shift_figures, claims" in block
    assert "  run: kedro run --env=test --pipelines=baseline" in block


def test_studies_of_the_default_env_and_of_an_unknown_env(monkeypatch):
    monkeypatch.delenv("KEDRO_ENV", raising=False)
    default = CliRunner().invoke(cli.cli, ["studies"])
    assert default.exit_code == 0, default.output
    assert default.output.startswith("--env=local: digits, protocol digits; 7 studies")
    assert "\nbaseline:" not in default.output
    unknown = CliRunner().invoke(cli.cli, ["studies", "--env=tset"])
    assert unknown.exit_code == 2
    assert "--env=tset: no folder" in unknown.output and "Nothing was run." in unknown.output


def test_python_m_calib_pipeline_dispatches_a_project_command(capsys):
    from calib_pipeline.__main__ import main

    with pytest.raises(SystemExit) as exited:
        main(["studies", "--env=test"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("--env=test: digits, protocol test")
