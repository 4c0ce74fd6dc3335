"""The fault suite, tracking: the MLflow database replaced by a non-database mid-run. The
run finishes with every result; the console says once that tracking is off, and MLflow's
own SQLAlchemy tracebacks (once hundreds of lines on the console) go to the log file."""

from __future__ import annotations

import time

import pytest

from tests.test_faults import start

pytestmark = pytest.mark.slow


def test_a_database_replaced_mid_run_costs_one_console_warning_and_no_result(tmp_path):
    data_dir, database = tmp_path / "data", tmp_path / "m.db"
    process = start(data_dir, f"sqlite:///{database}", "--pipelines=baseline")
    checkpoints = data_dir / "06_models" / "test"
    deadline = time.monotonic() + 300
    while not list(checkpoints.glob("*/seed_0/checkpoint.pt/*/checkpoint.pt")):
        assert process.poll() is None and time.monotonic() < deadline, "no training finished"
        time.sleep(0.05)
    database.unlink()
    database.write_text("not a database")
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 0, output[-3000:]
    assert "Traceback" not in output and "SQLAlchemy" not in output, output[:3000]
    warnings = [
        line for line in output.splitlines() if line.startswith("WARNING MLflow tracking failed")
    ]
    assert len(warnings) == 1 and "is off for the rest of this run" in warnings[0]
    assert len(output.splitlines()) <= 40
    assert list((data_dir / "08_reporting" / "test" / "baseline" / "summary").iterdir())
    (log,) = (data_dir / "logs").glob("*.log")
    assert "SQLAlchemy" in log.read_text()  # the details are kept, in the run's log
