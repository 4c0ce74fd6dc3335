"""What ``kedro run`` prints, and the run's log file.

The console (``conf/logging.yml``) gets a short header, one line per node and a summary of
where the outputs are -- all through the ``calib_pipeline.console`` logger -- plus every
warning and error once. Everything else goes to the run's log file,
``<data>/logs/<run id>.log`` (the run id is the save version of the run's artifacts): Kedro's
dataset and node lines, the project's INFO and DEBUG messages, repeated warnings and full
tracebacks.

A failure prints its cause first, in a few lines -- exception type and message, where it
happened, a hint -- on stderr; the traceback goes to the log file; the exit code stays
non-zero.

:class:`ConsoleHook` does this from Kedro's hooks. It also routes Python warnings through
logging (``warnings`` module), and adds :class:`ConsoleFilter` to the console handlers of
whatever logging configuration is in use: a warning whose text was already shown is not
shown again (the log file keeps every one), and the lines Kedro writes about a failure are
left to the log file, since the failure report says the same first.
"""

from __future__ import annotations

import atexit
import collections
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kedro.framework.hooks import hook_impl
from kedro.io.core import generate_timestamp

from calib_pipeline.hooks.latest import INDEX, index_root
from calib_pipeline.pipelines.artifacts import kind_of

CONSOLE = logging.getLogger(__name__)
FILE_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
# a failure's message is shown up to this many lines; the log file has all of it
MESSAGE_LINES = 12
# Kedro's resume suggestion after a failed node: `--from-nodes "a,b"`
RESUME = re.compile(r'--from-nodes "([^"]*)"')
MAX_RESUME_HINT = 300


class ConsoleFilter(logging.Filter):
    """On a console handler: each warning or error once (by logger and text) and none of
    the lines Kedro writes about a failed node (the failure report covers them; the log file
    keeps them). Counts what it held back; keeps Kedro's resume suggestion for the hint."""

    def __init__(self) -> None:
        super().__init__()
        self._shown: dict[tuple[str, str], int] = {}
        self.repeats = 0
        self.resume_from: str | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        if record.name.startswith("kedro.") and _is_failure_report(record):
            found = RESUME.search(record.getMessage())
            if found:
                self.resume_from = found.group(1)
            return False
        key = (record.name, record.getMessage())
        if key not in self._shown:
            self._shown[key] = id(record)
            return True
        if self._shown[key] == id(record):  # the same record at a second console handler
            return True
        self.repeats += 1
        return False


def _is_failure_report(record: logging.LogRecord) -> bool:
    """Kedro's own report of a failed node: the node's error, and the runner's resume
    suggestion (or its "No nodes ran")."""
    if record.name == "kedro.pipeline.node":
        return record.levelno >= logging.ERROR
    text = str(record.msg)
    return record.name.startswith("kedro.runner") and (
        "have not run" in text or "No nodes ran" in text
    )


class _EarlyRecords(logging.Handler):
    """The last records before the run's log file opens (the pipelines are built before
    Kedro names the run): they are written to it once it does."""

    def __init__(self, capacity: int = 2000) -> None:
        super().__init__(logging.DEBUG)
        self.records: collections.deque[logging.LogRecord] = collections.deque(maxlen=capacity)

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _loggers_with_handlers() -> list[logging.Logger]:
    """The root logger and every configured logger that does not propagate to it."""
    found = [logging.getLogger()]
    for item in list(logging.Logger.manager.loggerDict.values()):
        if isinstance(item, logging.Logger) and not item.propagate and item.handlers:
            found.append(item)
    return found


def _console_handlers() -> list[logging.Handler]:
    """Handlers of the configured loggers that write to a stream other than a file."""
    handlers = {id(h): h for lg in _loggers_with_handlers() for h in lg.handlers}
    return [
        h
        for h in handlers.values()
        if not isinstance(h, (logging.FileHandler, _EarlyRecords, logging.NullHandler))
    ]


class ConsoleHook:
    """The run's console lines and log file (module docstring).

    Args:
        log_folder: where the run log files go (called when a run starts).
        tracking: the MLflow hook, whose parent run the summary names.
    """

    def __init__(self, log_folder: Callable[[], str | Path], tracking: Any = None) -> None:
        self._log_folder = log_folder
        self._tracking = tracking
        self.filter = ConsoleFilter()
        self._lock = threading.Lock()
        self._early: _EarlyRecords | None = None
        self._file: logging.FileHandler | None = None
        self.log_path: Path | None = None
        self._context: dict[str, str] = {}
        self._exit_registered = False
        self._reset_run()

    def _reset_run(self) -> None:
        self._started = time.perf_counter()
        self._node_started: dict[str, float] = {}
        self._unsaved: dict[str, tuple[set[str], str]] = {}  # node -> (outputs to save, its result)
        self._done = 0
        self._total = 0
        self._reports: dict[Path, set[str]] = {}
        self._indexes: set[Path] = set()  # the LATEST.md files the run's reports rewrote
        self._version: str | None = None
        self._failure: dict[str, Any] | None = None
        self._loading: list[str] = []  # nodes whose inputs are loading (none runs yet)
        self._logged_error: int | None = None
        self._catalog = None
        self.filter.resume_from = None

    # -- session -------------------------------------------------------------------------

    @hook_impl(tryfirst=True)
    def after_context_created(self, context) -> None:
        os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # read when mlflow is imported
        logging.captureWarnings(True)
        for handler in _console_handlers():
            if self.filter not in handler.filters:
                handler.addFilter(self.filter)
        root = logging.getLogger()
        if self._early is not None:
            root.removeHandler(self._early)
        self._early = _EarlyRecords()
        root.addHandler(self._early)
        self._context = _describe_context(context)
        self._reset_run()
        if sys.excepthook is not self._report_uncaught:
            self._previous_excepthook = sys.excepthook
            sys.excepthook = self._report_uncaught

    @hook_impl(tryfirst=True)
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline, catalog) -> None:
        if not self._exit_registered:
            atexit.register(self._interrupted_at_exit)
            self._exit_registered = True
        self._reset_run()
        self._catalog = catalog
        self._version = str(run_params.get("run_id") or generate_timestamp())
        self._total = len(pipeline.nodes)
        self._open_log(self._version)
        names = run_params.get("pipeline_names") or ["__default__"]
        CONSOLE.info(
            "kedro run %s, env %s%s: %d node(s), run %s",
            ",".join(map(str, names)),
            run_params.get("env") or self._context.get("env"),
            _scoring(pipeline, catalog) or self._context.get("describe", ""),
            self._total,
            self._version,
        )
        CONSOLE.info("log: %s", self.log_path)

    def _open_log(self, name: str) -> None:
        """Open ``<log folder>/<name>.log`` for every record from now on, starting with the
        records kept since the session began; a folder that cannot be written leaves the
        run without a log file (said once), never without a run."""
        self._close_log()
        self.log_path = None
        path = Path(self._log_folder()) / f"{name}.log"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            handler = logging.FileHandler(path, encoding="utf-8")
        except OSError as error:
            CONSOLE.warning("no log file for this run: %s", error)
            return
        handler.setLevel(logging.DEBUG)
        handler.setFormatter(logging.Formatter(FILE_FORMAT))
        if self._early is not None:
            logging.getLogger().removeHandler(self._early)
            for record in self._early.records:
                handler.handle(record)
            self._early = None
        for target in _loggers_with_handlers():
            target.addHandler(handler)
        self._file, self.log_path = handler, path

    def _close_log(self) -> None:
        if self._file is None:
            return
        for target in _loggers_with_handlers():
            target.removeHandler(self._file)
        self._file.close()
        self._file = None

    # -- nodes ---------------------------------------------------------------------------

    @hook_impl
    def before_dataset_loaded(self, node) -> None:
        if node is not None:
            with self._lock:
                self._node_started.setdefault(node.name, time.perf_counter())
                if node.name not in self._loading:
                    self._loading.append(node.name)

    @hook_impl
    def before_node_run(self, node) -> None:
        with self._lock:
            self._node_started.setdefault(node.name, time.perf_counter())
            if node.name in self._loading:
                self._loading.remove(node.name)

    @hook_impl
    def after_node_run(self, node, outputs: dict[str, Any]) -> None:
        """The node's line comes once its outputs are saved: its time is the whole task's
        (loading, running, saving -- a report's figures are drawn when it is saved)."""
        with self._lock:
            self._unsaved[node.name] = (set(outputs), node_result(outputs))
        if not outputs:
            self._node_finished(node.name)

    @hook_impl
    def after_dataset_saved(self, dataset_name: str, node) -> None:
        folder = (
            getattr(self._catalog[dataset_name], "saved_folder", None) if self._catalog else None
        )
        if (
            isinstance(folder, Path) and len(folder.parents) > 2
        ):  # <study>/<report>/<version>/<report>
            self._reports.setdefault(folder.parents[2], set()).add(folder.name)
            root = index_root(dataset_name, folder)
            if root is not None:
                self._indexes.add(root / INDEX)
        with self._lock:
            pending = self._unsaved.get(node.name)
            if pending is None:
                return
            pending[0].discard(dataset_name)
        if not pending[0]:
            self._node_finished(node.name)

    def _node_finished(self, name: str) -> None:
        with self._lock:
            _, result = self._unsaved.pop(name, (None, ""))
            started = self._node_started.pop(name, time.perf_counter())
        self._node_line(name, time.perf_counter() - started, result)

    def _node_line(self, name: str, seconds: float, result: str, where: str = "") -> None:
        with self._lock:
            self._done += 1
            width = len(str(self._total))
            CONSOLE.info(
                "[%*d/%d] %s  %.1f s%s%s",
                width,
                self._done,
                self._total,
                name,
                seconds,
                f" on {where}" if where else "",
                f"  {result}" if result else "",
            )

    @hook_impl
    def on_node_error(self, error: Exception, node) -> None:
        with self._lock:
            if self._failure is None:
                self._failure = {"node": node.name}

    # -- worker copies (calib_pipeline.runner) -------------------------------------------

    def for_worker(self) -> _WorkerNodeTimer:
        """A picklable copy that times a node run in a Dask worker (see runner.py)."""
        return _WorkerNodeTimer()

    def merge_worker_report(self, report: dict[str, Any] | None) -> None:
        """The node line of a node a worker ran, or its failure."""
        if not report:
            return
        if report.get("failed"):
            with self._lock:
                if self._failure is None:
                    self._failure = {"node": report["node"], "where": report["where"]}
            return
        self._node_line(report["node"], report["seconds"], report["result"], report["where"])

    # -- end -----------------------------------------------------------------------------

    @hook_impl(trylast=True)
    def after_pipeline_run(self, run_params: dict[str, Any]) -> None:
        seconds = time.perf_counter() - self._started
        repeats = (
            f"; {self.filter.repeats} repeated warning(s) in the log only"
            if self.filter.repeats
            else ""
        )
        CONSOLE.info("done: %d node(s) in %.1f s%s", self._done, seconds, repeats)
        for folder, reports in sorted(self._reports.items()):
            CONSOLE.info("reports: %s/{%s}/%s/", folder, ",".join(sorted(reports)), self._version)
        for index in sorted(self._indexes):
            CONSOLE.info("newest reports of every study: %s", index)
        location = getattr(self._tracking, "run_location", None)
        if location:
            CONSOLE.info("MLflow: %s", location)
        CONSOLE.info("log: %s", self.log_path)
        self._close_log()

    @hook_impl(trylast=True)
    def on_pipeline_error(self, error: Exception) -> None:
        """The traceback goes to the log file now (the caller may catch the error); the
        report is printed when the error leaves the process (:meth:`_report_uncaught`)."""
        if self._file is not None:
            self._log_traceback(error)
        self._close_log()

    def _log_traceback(self, error: BaseException) -> None:
        record = logging.LogRecord(
            __name__,
            logging.ERROR,
            __file__,
            0,
            "kedro run failed: %s",
            (_cause(error),),
            (type(error), error, error.__traceback__),
        )
        self._file.handle(record)
        self._logged_error = id(error)

    def _report_uncaught(self, kind: type[BaseException], error: BaseException, tb) -> None:
        """``sys.excepthook`` while a session of this project is open: the cause first,
        in a few lines; the traceback in the log file (printed instead if there is none)."""
        if not isinstance(error, Exception):
            return self._previous_excepthook(kind, error, tb)
        if self._logged_error != id(error):
            if self._file is None:
                self._open_log(self._version or generate_timestamp())
            if self._file is None:
                return self._previous_excepthook(kind, error, tb)
            self._log_traceback(error)
            self._close_log()
        end_failed = getattr(self._tracking, "end_failed", None)
        if end_failed is not None:  # a run that failed outside Kedro's error hook
            end_failed(error)
        failure = self._failure
        if failure is None and self._loading:
            # Kedro calls on_node_error only around a node's function: an input that fails
            # to load (a corrupt file) ends the run here, after other nodes may have saved
            failure = {"node": ", ".join(self._loading), "where": "", "phase": "loading its inputs"}
        sys.stderr.write(
            failure_report(error, failure, self._done, self.filter.resume_from, self.log_path)
        )
        sys.stderr.flush()
        return None

    def _interrupted_at_exit(self) -> None:
        """A run still open when its process exits: Ctrl-C (the CLI then prints "Aborted!")
        or another exit that bypassed Kedro's hooks. Says where it stopped, and the log
        file keeps the same line."""
        if self._file is None:
            return
        line = (
            f"INTERRUPTED after {self._done} of {self._total} node(s): the same command continues "
            "(finished trainings are reused, unfinished ones resume from their last epoch)"
        )
        self._file.handle(logging.LogRecord(__name__, logging.ERROR, __file__, 0, line, None, None))
        self._close_log()
        sys.stderr.write(f"{line}\n  log: {self.log_path}\n")
        sys.stderr.flush()


class _WorkerNodeTimer:
    """:class:`ConsoleHook`'s copy for a Dask worker: times the node's task and reports its
    line (or its failure) to the driver, which prints it in order."""

    def __init__(self) -> None:
        self._report: dict[str, Any] | None = None
        self._started: float | None = None

    @hook_impl
    def before_dataset_loaded(self) -> None:
        self._started = self._started or time.perf_counter()

    @hook_impl
    def before_node_run(self) -> None:
        self._started = self._started or time.perf_counter()

    @hook_impl
    def after_node_run(self, node, outputs: dict[str, Any]) -> None:
        self._report = {
            "node": node.name,
            "result": node_result(outputs),
            "where": _where(),
            "failed": False,
        }

    @hook_impl
    def on_node_error(self, error: Exception, node) -> None:
        self._report = {"node": node.name, "where": _where(), "failed": True}

    def worker_report(self) -> dict[str, Any] | None:
        """Called once the task is done, its outputs saved."""
        if self._report is not None and self._started is not None:
            self._report["seconds"] = time.perf_counter() - self._started
        return self._report


def _where() -> str:
    import socket

    return f"{socket.gethostname()} (process {os.getpid()})"


def _scoring(pipeline, catalog) -> str | None:
    """`` (scoring <files>)`` for a run of the score pipeline alone, in place of the
    environment's dataset (each file's classes and sizes follow on its ``prepare`` line)."""
    if not any("score" in n.tags for n in getattr(pipeline, "nodes", [])):
        return None
    # imported here: it loads torch, which only a score run needs
    from calib_pipeline.pipelines.score import score_run_description

    try:
        described = score_run_description(pipeline, catalog)
    except ValueError:  # bad predictions parameters: the run's own check reports them
        return None
    if described is None:
        return None
    return f" (scoring {described['dataset'].replace(',', ', ')}; {described['protocol']})"


def _describe_context(context) -> dict[str, str]:
    """The session's environment and, from its globals, dataset and protocol."""
    out = {"env": str(context.env or "local")}  # no --env: Kedro's default run env
    try:
        values = context.config_loader["globals"] or {}
    except Exception:  # noqa: BLE001 -- no globals: the header leaves them out
        return out
    dataset = values.get("dataset")
    name = dataset.get("name") if isinstance(dataset, dict) else dataset
    parts = [f"{k} {v}" for k, v in (("dataset", name), ("protocol", values.get("protocol"))) if v]
    out["describe"] = f" ({', '.join(parts)})" if parts else ""
    return out


# -- what a node's line says about its outputs ----------------------------------------------


def node_result(outputs: dict[str, Any]) -> str:
    """A few words on a node's result, where there is one to read: a training's selected
    epoch and accuracies, a shift node's set count (and whether it reused them), a claims
    report's verdict line; '' for other nodes."""
    by_kind = {kind_of(name): value for name, value in outputs.items()}
    history, checkpoint = by_kind.get("history"), by_kind.get("checkpoint")
    if isinstance(checkpoint, dict) and history is not None and len(history):
        return _training_result(history, checkpoint)
    shifted = by_kind.get("shift_logits")
    if isinstance(shifted, dict) and isinstance(shifted.get("sets"), dict):
        count = sum("logits" in entry for entry in shifted["sets"].values())
        return f"{count} shifted set(s)" + (
            " (reused: computed earlier)" if shifted.get("reused") else ""
        )
    claims = next((v for k, v in outputs.items() if k.endswith(".report_claims")), None)
    if isinstance(claims, dict) and isinstance(claims.get("verdicts"), dict):
        return str(claims["verdicts"].get("line", ""))
    scored = by_kind.get("score_predictions")
    if scored is not None and hasattr(scored, "describe"):  # a predictions file, read
        return scored.describe()
    replication = by_kind.get("replication_report")
    if isinstance(replication, dict) and isinstance(replication.get("summary"), str):
        return replication["summary"].splitlines()[0].strip("*")  # the overall line
    return ""


def _training_result(history: Any, checkpoint: dict[str, Any]) -> str:
    """``epoch 11 of 20 selected: val Accuracy 99.10%, test Accuracy 98.10%`` (the selected
    epoch's row; each metric by its report name and unit), then ``(reused: trained earlier)``
    or ``(resumed after epoch k)`` where the training found a stored state."""
    # imported here: they load torch, which only a finished training needs
    from calib_pipeline.calibration.metrics import metric_text
    from calib_pipeline.training.artifacts import training_reuse

    selected = checkpoint.get("selected_epoch")
    rows = (
        history[history["epoch"] == selected]
        if "epoch" in history and selected is not None
        else history
    )
    row = (rows if len(rows) else history).iloc[-1]
    accuracies = ", ".join(
        f"{split} {metric_text('accuracy', row[f'{split}_accuracy'])}"
        for split in ("val", "test")
        if f"{split}_accuracy" in row
    )
    line = f"epoch {int(row['epoch'])} of {len(history)} selected: {accuracies}"
    reuse = training_reuse(checkpoint, epochs=len(history))
    if reuse == "reused":
        return f"{line} (reused: trained earlier)"
    return f"{line} (resumed after epoch {checkpoint['resumed_after_epoch']})" if reuse else line


# -- the failure report ---------------------------------------------------------------------


def _cause(error: BaseException) -> str:
    """``Type: message`` of the error (its qualified name for project errors)."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def failure_report(
    error: BaseException,
    failure: dict[str, Any] | None,
    nodes_done: int,
    resume_from: str | None,
    log_path: Path | None,
) -> str:
    """What a failed ``kedro run`` prints: the cause, where it happened, a hint, and the log
    file with the traceback -- a few lines."""
    message = _cause(error).splitlines()
    lines = [f"FAILED {message[0]}", *(f"  {line}" for line in message[1:MESSAGE_LINES])]
    if len(message) > MESSAGE_LINES:
        lines.append(f"  ... ({len(message) - MESSAGE_LINES} more lines in the log file)")
    lines.extend(_where_and_hint(failure, nodes_done, resume_from))
    lines.append(f"  traceback: {log_path}" if log_path else "  (no log file: traceback not kept)")
    return "\n".join(lines) + "\n"


def _where_and_hint(
    failure: dict[str, Any] | None, nodes_done: int, resume_from: str | None
) -> list[str]:
    if failure is None and nodes_done:
        return [
            f"  where: outside any node, after {nodes_done} node(s) finished",
            "  hint: once fixed, rerun the same command: finished trainings are reused",
        ]
    if failure is None:
        return [
            "  where: before any node ran (building or checking the pipelines); nothing was written"
        ]
    where = f" on {failure['where']}" if failure.get("where") else ""
    phase = f" while {failure['phase']}" if failure.get("phase") else ""
    lines = [f"  where: node {failure['node']}{where}{phase}, after {nodes_done} node(s) finished"]
    if resume_from and len(resume_from) <= MAX_RESUME_HINT:
        lines.append(
            f'  hint: once fixed, resume with the same command plus --from-nodes "{resume_from}"'
        )
    else:
        lines.append("  hint: once fixed, rerun the same command: finished trainings are reused")
    return lines
