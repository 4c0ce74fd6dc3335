"""Quiet by default: `kedro run` prints a header, one line per node and a summary, each
warning once, and a failure's cause first in a few lines; the run's log file has the rest
(Kedro's dataset lines, tracebacks)."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from calib_pipeline.console import ConsoleFilter, ConsoleHook, failure_report, node_result

NODE_LINE = re.compile(r"^\[\s*(\d+)/(\d+)\] (\S+)  \d+\.\d s")


def record(name: str, level: int, message: str) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, message, None, None)


def test_a_warning_is_shown_once_and_its_repeats_are_counted():
    console = ConsoleFilter()
    posthoc = "calib_pipeline.calibration.posthoc"
    first = record(posthoc, logging.WARNING, "temperature_grid_ece: T = 0.1 is at a grid bound")
    assert console.filter(first)
    assert console.filter(first), "the same record at a second console handler is shown there too"
    assert not console.filter(record(posthoc, logging.WARNING, first.msg)) and console.repeats == 1
    assert console.filter(record(posthoc, logging.WARNING, "another text"))
    assert console.filter(
        record("calib_pipeline.console", logging.INFO, "[1/2] ce.train_seed_0  0.1 s")
    )


def test_kedros_own_failure_lines_are_left_to_the_log_file_and_its_resume_suggestion_kept():
    console = ConsoleFilter()
    failed = "Node ce.train_seed_0: train() failed with error:\nboom"
    assert not console.filter(record("kedro.pipeline.node", logging.ERROR, failed))
    resume = (
        "There are 21 nodes that have not run.\nYou can resume the pipeline run from the nearest "
        "nodes with persisted inputs by adding the following argument to your previous command:\n  "
        '--from-nodes "a.train,b.train"'
    )
    assert not console.filter(record("kedro.runner.sequential_runner", logging.WARNING, resume))
    assert console.resume_from == "a.train,b.train"
    other = record("kedro.io.data_catalog", logging.WARNING, "Replacing dataset 'x'")
    assert console.filter(other), "other Kedro warnings show"


def test_a_failure_report_starts_with_the_cause_and_is_short():
    failure = {"node": "ce.train_seed_0"}
    report = failure_report(
        ValueError("lr must be positive, got -1"),
        failure,
        2,
        "ce.train_seed_0",
        Path("/data/logs/run.log"),
    ).splitlines()
    assert report[0] == "FAILED ValueError: lr must be positive, got -1"
    assert report[1] == "  where: node ce.train_seed_0, after 2 node(s) finished"
    assert 'resume with the same command plus --from-nodes "ce.train_seed_0"' in report[2]
    assert report[-1] == "  traceback: /data/logs/run.log" and len(report) == 4
    message = "\n".join(f"line {i}" for i in range(100))
    long = failure_report(RuntimeError(message), None, 0, None, None).splitlines()
    assert long[0] == "FAILED RuntimeError: line 0" and len(long) <= 16
    assert "more lines in the log file" in " ".join(long) and "before any node ran" in " ".join(
        long
    )


def test_a_training_line_gives_the_selected_epoch_not_the_last():
    history = pd.DataFrame(
        {"epoch": [1, 2, 3], "val_accuracy": [0.5, 0.9, 0.8], "test_accuracy": [0.4, 0.88, 0.7]}
    )
    outputs = {"ce.seed_0.checkpoint": {"selected_epoch": 2}, "ce.seed_0.history": history}
    # accuracy as every report shows it: by its name, in %
    selected = "epoch 2 of 3 selected: val Accuracy 90.00%, test Accuracy 88.00%"
    assert node_result(outputs) == selected
    # a rerun says when it did not train (docs/reliability.md: it "says so")
    reused = {**outputs, "ce.seed_0.checkpoint": {"selected_epoch": 2, "resumed_after_epoch": 3}}
    assert node_result(reused) == f"{selected} (reused: trained earlier)"
    resumed = {**outputs, "ce.seed_0.checkpoint": {"selected_epoch": 2, "resumed_after_epoch": 1}}
    assert node_result(resumed).endswith("(resumed after epoch 1)")
    claims = {"verdicts": {"line": "focal on digits: 2 of 18 paper claims hold"}}
    assert (
        node_result({"focal.report_claims": claims}) == "focal on digits: 2 of 18 paper claims hold"
    )
    assert node_result({"ce.seed_0.logits": {}}) == ""


def test_a_node_line_comes_once_all_its_outputs_are_saved(tmp_path, caplog):
    hook = ConsoleHook(lambda: tmp_path)
    hook._total = 2
    node = SimpleNamespace(name="ce.logits_seed_0")
    with caplog.at_level(logging.INFO, logger="calib_pipeline.console"):
        hook.before_dataset_loaded(node)
        hook.after_node_run(node, {"ce.seed_0.logits": {}, "ce.seed_0.features": {}})
        hook.after_dataset_saved("ce.seed_0.logits", node)
        assert not caplog.records, "one output is still being saved"
        hook.after_dataset_saved("ce.seed_0.features", node)
    lines = [r.getMessage() for r in caplog.records]
    assert (
        len(lines) == 1
        and NODE_LINE.match(lines[0])
        and lines[0].startswith("[1/2] ce.logits_seed_0  ")
    )


def test_an_input_that_fails_to_load_is_reported_at_its_node_not_as_nothing_written(
    tmp_path, capsys
):
    """Kedro calls on_node_error only around a node's function: a corrupt input file fails
    while loading, after other nodes may have saved -- never 'nothing was written'."""
    hook = ConsoleHook(lambda: tmp_path)
    hook._total = 3
    done = SimpleNamespace(name="ce.posthoc_seed_0")
    hook.before_dataset_loaded(done)
    hook.before_node_run(done)
    hook.after_node_run(done, {})
    broken = SimpleNamespace(name="ls.posthoc_seed_0")
    hook.before_dataset_loaded(broken)
    hook._report_uncaught(ValueError, ValueError("cannot read ls.seed_0.logits"), None)
    report = capsys.readouterr().err
    assert (
        "where: node ls.posthoc_seed_0 while loading its inputs, after 1 node(s) finished" in report
    )
    assert "nothing was written" not in report
    before = ConsoleHook(lambda: tmp_path)  # e.g. the preflight refuses missing inputs
    before._report_uncaught(ValueError, ValueError("split_standard does not exist yet"), None)
    assert (
        "where: before any node ran (building or checking the pipelines); nothing was written"
        in capsys.readouterr().err
    )


def test_a_worker_copy_reports_its_node_line_to_the_driver(tmp_path, caplog):
    hook = ConsoleHook(lambda: tmp_path)
    hook._total = 1
    worker = hook.for_worker()
    node = SimpleNamespace(name="ce.train_seed_0")
    worker.before_node_run()
    worker.after_node_run(node, {})
    with caplog.at_level(logging.INFO, logger="calib_pipeline.console"):
        hook.merge_worker_report(worker.worker_report())
    assert caplog.records[0].getMessage().startswith("[1/1] ce.train_seed_0  ")
    assert "(process " in caplog.records[0].getMessage()


def test_a_run_still_open_at_exit_says_where_it_stopped(tmp_path, capsys):
    hook = ConsoleHook(lambda: tmp_path)
    hook._open_log("run")
    hook._total, hook._done = 5, 2
    hook._interrupted_at_exit()  # what atexit calls after Ctrl-C (the CLI has printed "Aborted!")
    assert capsys.readouterr().err.startswith(
        "INTERRUPTED after 2 of 5 node(s): the same command continues"
    )
    assert "INTERRUPTED after 2 of 5" in (tmp_path / "run.log").read_text()
    hook._interrupted_at_exit()
    assert not capsys.readouterr().err, "said once; a finished run says nothing"


# -- `kedro run`, as a user runs it ------------------------------------------------------------


def console_lines(result) -> list[str]:
    return (result.stdout + result.stderr).splitlines()


def run_log(data_dir: Path) -> str:
    logs = sorted((data_dir / "logs").glob("*.log"))
    assert len(logs) == 1, f"one log file per run: {logs}"
    return logs[0].read_text()


@pytest.mark.slow
def test_a_run_prints_a_line_per_node_and_where_its_outputs_are_and_logs_the_rest(tmp_path):
    from tests.test_end_to_end import kedro

    data_dir = tmp_path / "data"
    result = kedro("--pipelines=baseline", data_dir=data_dir, tracking=f"sqlite:///{tmp_path}/m.db")
    lines = console_lines(result)
    nodes = [NODE_LINE.match(line) for line in lines if NODE_LINE.match(line)]
    assert nodes, "\n".join(lines)
    total = int(nodes[0].group(2))
    assert [int(n.group(1)) for n in nodes] == list(range(1, total + 1)), (
        "one line per node, in order"
    )
    assert len(lines) <= total + 12, "\n".join(lines)
    assert not [line for line in lines if "Loading data from" in line or "Saving data to" in line]
    assert not [line for line in lines if "Traceback" in line or "WARNING" in line], "\n".join(
        lines
    )
    assert "ce.train_seed_0" in " ".join(lines) and "selected: val Accuracy" in " ".join(lines)
    summary = " ".join(lines[-4:])
    assert f"reports: {data_dir}/08_reporting/test/baseline/" in summary and "summary" in summary
    assert "MLflow: parent run" in summary and f"log: {data_dir}/logs/" in summary
    log = run_log(data_dir)
    assert "Loading data from raw_data" in log and "Running node: train_seed_0" in log
    assert "ce seed 0: val Accuracy" in log and "ts learned" in log, (
        "the project's INFO messages stay in the log"
    )


@pytest.mark.slow
def test_a_failing_node_prints_its_cause_first_in_a_few_lines_and_the_traceback_goes_to_the_log(
    tmp_path,
):
    from tests.test_end_to_end import kedro

    data_dir = tmp_path / "data"
    blocked = data_dir / "06_models" / "test" / "resume" / "ce" / "seed_0"
    blocked.parent.mkdir(parents=True)
    blocked.write_text("a file where ce's resume folder must go")  # its training cannot start
    result = kedro(
        "--pipelines=baseline",
        data_dir=data_dir,
        tracking=f"sqlite:///{tmp_path}/m.db",
        check=False,
    )
    assert result.returncode != 0
    report = result.stderr.splitlines()
    assert (
        report[0].startswith("FAILED NotADirectoryError: ") and "resume/ce/seed_0" in report[0]
    ), result.stderr
    assert report[1].startswith("  where: node ce.train_seed_0")
    assert len(report) <= 5 and report[-1].startswith(f"  traceback: {data_dir}/logs/")
    assert len(console_lines(result)) <= 12, "\n".join(console_lines(result))
    assert "Traceback" not in result.stdout + result.stderr
    log = run_log(data_dir)
    assert "Traceback (most recent call last)" in log and "checkpoint.py" in log
    assert "failed with error" in log, "Kedro's own report of the failure is in the log"


def test_the_run_header_names_kedros_default_env_when_none_is_given():
    from calib_pipeline.console import _describe_context

    globals_ = {"globals": {"dataset": {"name": "digits"}, "protocol": "digits"}}
    described = _describe_context(SimpleNamespace(env=None, config_loader=globals_))
    assert described == {"env": "local", "describe": " (dataset digits, protocol digits)"}
    assert _describe_context(SimpleNamespace(env="test", config_loader=globals_))["env"] == "test"


def test_a_run_refused_outside_kedros_error_hook_ends_its_mlflow_run_failed(tmp_path, capsys):
    """A run refused in a before_pipeline_run hook (missing inputs, an unsupported runner)
    never reaches Kedro's on_pipeline_error: its parent run ended KILLED at exit."""
    import mlflow

    from calib_pipeline.hooks import MlflowTrackingHook

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    tracking = MlflowTrackingHook()
    tracking._project_path, tracking._config, tracking._env = tmp_path, {}, "test"
    tracking._start({"pipeline_names": ["baseline"]}, catalog=None, uri=uri)
    parent = tracking._parent
    hook = ConsoleHook(lambda: tmp_path, tracking=tracking)
    hook._report_uncaught(ValueError, ValueError("1 input(s) of this run do not exist yet"), None)
    assert mlflow.MlflowClient(tracking_uri=uri).get_run(parent).info.status == "FAILED"
    tracking._end_at_exit()  # what atexit does next: it must not turn FAILED into KILLED
    assert mlflow.MlflowClient(tracking_uri=uri).get_run(parent).info.status == "FAILED"
    assert "nothing was written" in capsys.readouterr().err
