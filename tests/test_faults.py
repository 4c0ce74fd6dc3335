"""The fault suite: `kedro run --env=test` killed, rerun, and run twice at once.

Each case runs real `kedro run` subprocesses, as a user's shell would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import mlflow
import pandas as pd
import pytest

from tests.test_end_to_end import KEDRO, PROJECT, kedro, versions

pytestmark = pytest.mark.slow


def environment(data_dir: Path, tracking: str) -> dict[str, str]:
    return {
        **os.environ,
        "DO_NOT_TRACK": "1",
        "KEDRO_DISABLE_TELEMETRY": "true",
        "CALIB_DATA_DIR": str(data_dir),
        "MLFLOW_TRACKING_URI": tracking,
        "PYTHONWARNINGS": "ignore",
    }


def start(data_dir: Path, tracking: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [KEDRO, "run", "--env=test", *args],
        cwd=PROJECT,
        env=environment(data_dir, tracking),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: kill -9 reaches every child
    )


def latest_table(data_dir: Path, study: str) -> pd.DataFrame:
    folder = data_dir / "08_reporting" / "test" / study / "metrics.parquet"
    table = pd.read_parquet(folder / versions(folder)[-1] / "metrics.parquet")
    return table.drop(columns=["run_id"], errors="ignore")  # the run id differs by design


def test_kill_9_during_training_then_rerun_equals_an_uninterrupted_run(tmp_path):
    reference = tmp_path / "reference"
    kedro("--pipelines=baseline", data_dir=reference, tracking=f"sqlite:///{tmp_path}/ref.db")

    data_dir = tmp_path / "killed"
    process = start(data_dir, f"sqlite:///{tmp_path}/killed.db", "--pipelines=baseline")
    resume = data_dir / "06_models" / "test" / "resume"
    deadline = time.monotonic() + 300
    while not list(resume.glob("*/*/*/latest.pt")) and time.monotonic() < deadline:
        assert process.poll() is None, "the run ended before it could be killed"
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGKILL)  # as kill -9: no handler, no cleanup
    process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL
    assert not (data_dir / "08_reporting" / "test" / "baseline" / "metrics.parquet").exists()

    kedro("--pipelines=baseline", data_dir=data_dir, tracking=f"sqlite:///{tmp_path}/killed.db")
    pd.testing.assert_frame_equal(
        latest_table(data_dir, "baseline"), latest_table(reference, "baseline")
    )
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path}/killed.db")
    experiment = client.get_experiment_by_name("calib-pipeline")
    statuses = sorted(
        r.info.status
        for r in client.search_runs([experiment.experiment_id])
        if "mlflow.parentRunId" not in r.data.tags
    )
    assert statuses == ["FINISHED", "KILLED"], "the killed run's parent is ended on the next start"


def test_two_runs_started_together_both_complete_with_distinct_versions(tmp_path):
    data_dir = tmp_path / "data"
    tracking = f"sqlite:///{tmp_path}/mlflow.db"  # a fresh database: both race to create it
    runs = [start(data_dir, tracking, "--pipelines=focal_meta") for _ in range(2)]
    outputs = [run.communicate(timeout=600)[0] for run in runs]
    for run, output in zip(runs, outputs):
        assert run.returncode == 0, output[-3000:]
    metrics = data_dir / "08_reporting" / "test" / "focal_meta" / "metrics.parquet"
    assert len(versions(metrics)) == 2, "each run writes its own version"
    first, second = (pd.read_parquet(metrics / v / "metrics.parquet") for v in versions(metrics))
    pd.testing.assert_frame_equal(
        first.drop(columns=["run_id"], errors="ignore"),
        second.drop(columns=["run_id"], errors="ignore"),
    )
    client = mlflow.MlflowClient(tracking_uri=tracking)
    experiment = client.get_experiment_by_name("calib-pipeline")
    all_runs = client.search_runs([experiment.experiment_id], max_results=1000)
    parents = [r for r in all_runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 2 and {p.info.status for p in parents} == {"FINISHED"}
    children = [r for r in all_runs if "mlflow.parentRunId" in r.data.tags]
    rows = Counter((c.data.tags["method"], c.data.tags["seed"]) for c in children)
    # a training both runs made is two rows; one that a run reused from the other is one
    assert len(rows) == 12 and set(rows.values()) <= {1, 2}
    assert {c.info.status for c in children} == {"FINISHED"}
    assert not any("WARNING" in o and "MLflow tracking" in o for o in outputs), (
        "tracking stayed on in both"
    )
