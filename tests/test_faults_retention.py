"""The fault suite, retention during a run: `python -m calib_pipeline.retention --keep 1
--apply` while a `kedro run` writes into the same folder never leaves a kept report without
the tables it was made from, and never touches the running run's versions."""

from __future__ import annotations

import time

import pytest

from calib_pipeline.retention import active_versions, main
from tests.test_end_to_end import kedro, versions
from tests.test_faults import start

pytestmark = pytest.mark.slow


def test_a_prune_during_a_run_keeps_every_kept_reports_inputs_and_the_runs_versions(tmp_path):
    data_dir, tracking = tmp_path / "data", f"sqlite:///{tmp_path}/m.db"
    kedro("--pipelines=baseline", data_dir=data_dir, tracking=tracking)
    kedro("--pipelines=baseline", data_dir=data_dir, tracking=tracking)
    study = data_dir / "08_reporting" / "test" / "baseline"
    finished = versions(study / "metrics.parquet")

    process = start(data_dir, tracking, "--pipelines=baseline")
    deadline = time.monotonic() + 300
    running: set[str] = set()
    # prune once the run has written its new metrics table, before (or while) it writes the
    # reports: its half-written version is the newest one then
    while time.monotonic() < deadline:
        assert process.poll() is None, "the run ended before the prune"
        running = active_versions(data_dir) - set(finished)
        if running and set(running) & set(versions(study / "metrics.parquet")):
            break
        time.sleep(0.02)
    assert main(["--keep", "1", "--data", str(data_dir), "--no-mlflow", "--apply"]) == 0
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output[-3000:]

    (version,) = running
    for table in ("metrics.parquet", "reliability_bins.parquet"):
        kept = versions(study / table)
        assert version in kept, f"the running run's {table} was pruned"
    for report in (
        p for p in study.iterdir() if p.name not in ("metrics.parquet", "reliability_bins.parquet")
    ):
        for kept_report in versions(report):
            made_from = [v for v in versions(study / "metrics.parquet") if v <= kept_report]
            assert made_from and made_from[-1] == kept_report, (report.name, kept_report)
    assert finished[0] not in versions(study / "metrics.parquet"), "the oldest run was pruned"
