"""Cause-first refusals of the command line, each naming the valid choices (issue 34's
unclear messages): a mistyped runner, environment or namespace, and probabilities that are
logits in a predictions file."""

from __future__ import annotations

import numpy as np
import pytest

from calib_pipeline.calibration.predictions import load_predictions
from tests.test_end_to_end import kedro

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ("--runner=calib_pipeline.runner.DaskRunnr", "--pipelines=baseline"),
            "--runner=calib_pipeline.runner.DaskRunnr: no such runner; use one of "
            "SequentialRunner, ThreadRunner, calib_pipeline.runner.DaskRunner",
        ),
        (
            (
                "--runner=calib_pipeline.runner.DaskRunner",
                "--runner-params=tasks_per_gpu=0",
                "--pipelines=baseline",
            ),
            "--runner-params: tasks_per_gpu must be a whole number >= 1, got 0. Nothing was run.",
        ),
        (
            ("--namespaces=nosuch", "--pipelines=baseline"),
            "namespaces: ['nosuch']; the namespaces of this run are baseline, ce, "
            "focal_gamma_3, ls_epsilon_0p05",
        ),
    ],
)
def test_a_mistyped_choice_is_refused_in_a_few_lines_with_the_valid_ones(tmp_path, args, expected):
    result = kedro(*args, data_dir=tmp_path, tracking=f"sqlite:///{tmp_path}/m.db", check=False)
    output = result.stdout + result.stderr
    assert result.returncode != 0 and expected in output
    assert "Traceback" not in output and len(output.splitlines()) <= 8, output


def test_a_mistyped_environment_lists_the_environments(tmp_path):
    import os
    import subprocess

    from tests.test_end_to_end import KEDRO, PROJECT

    env = {
        **os.environ,
        "DO_NOT_TRACK": "1",
        "CALIB_DATA_DIR": str(tmp_path),
        "CALIB_MLFLOW": "off",
    }
    result = subprocess.run(
        [KEDRO, "run", "--env=tset"],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode != 0
    assert (
        "--env=tset: no folder" in result.stderr
        and "the environments are base, cifar10" in result.stderr
    )
    assert "Traceback" not in result.stderr


def test_probabilities_out_of_range_in_a_file_advise_the_files_names_not_an_argument(tmp_path):
    path = tmp_path / "mine.npz"
    logits = np.random.default_rng(0).normal(size=(20, 3))
    labels = np.arange(20) % 3
    np.savez(path, val_probs=logits, val_labels=labels, test_probs=logits, test_labels=labels)
    with pytest.raises(ValueError, match="name them val_logits and test_logits") as refused:
        load_predictions(path)
    assert "inputs=" not in str(refused.value)


def test_python_m_calib_pipeline_reads_a_run_file_as_kedro_run_does(tmp_path):
    """``python -m calib_pipeline --config=<file>`` once failed with KeyError: Kedro reads the
    file's section named after the command, which was the program name."""
    import os
    import subprocess
    import sys

    from tests.test_end_to_end import PROJECT

    run_file = tmp_path / "run.yml"
    run_file.write_text("run:\n  env: test\n  pipelines: data_split\n")
    env = {
        **os.environ,
        "DO_NOT_TRACK": "1",
        "CALIB_DATA_DIR": str(tmp_path),
        "CALIB_MLFLOW": "off",
    }
    result = subprocess.run(
        [sys.executable, "-m", "calib_pipeline", f"--config={run_file}"],
        cwd=PROJECT, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "kedro run data_split, env test" in result.stdout
