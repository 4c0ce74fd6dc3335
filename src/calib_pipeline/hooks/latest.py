"""The newest reports of a protocol in one file, ``LATEST.md`` (:class:`LatestReportsHook`).

A report is saved as ``<study>/<report>/<version>/<report>/`` under the protocol's
reporting folder (``data/08_reporting/<protocol>/``; the replication report as
``replication/<version>/replication/``, a scored file's as ``score/<name>/<report>/...``),
so the newest Table 1 sits several timestamped folders deep. After every report a run
saves, the hook rewrites ``LATEST.md`` beside the studies' folders: per study, each
report's newest complete version (the one ``catalog.load`` gives) with links to its files,
and the study's claims line.

A Markdown file rather than a ``latest`` link: links do not survive every file system,
copy or archive (shared storage, zip files, MLflow artifacts), and a file can say more
(the claims line, every file of a report, which version). It is rebuilt from the folders
themselves, so it also lists what earlier runs and other studies saved, and it replaces the
old index in one rename: a reader never sees half of one. Code reads the same versions
through the catalog (``catalog.load("<study>.report_<name>")``).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import uuid
from pathlib import Path
from typing import Any

from kedro.framework.hooks import hook_impl
from kedro.io.core import DatasetError

from calib_pipeline.kedro_datasets import is_complete_report, report_artifacts
from calib_pipeline.pipelines.artifacts import kind_of

logger = logging.getLogger(__name__)

INDEX = "LATEST.md"
# the report kinds of the artifact table, with how many folders up from a saved version
# (``<study>/<report>/<version>/<report>``, ``replication/<version>/replication``) the
# folder whose index lists them is
INDEXED_DEPTH = {
    "report": 3,
    "score_report": 3,
    "replication_report": 2,
    "arena_report": 3,
}
CLAIMS_VERDICTS = ("claims", "verdicts.json")


def newest_report(folder: Path) -> Path | None:
    """The newest complete version of the versioned report ``folder``
    (``<folder>/<version>/<folder name>/`` with its manifest): the version Kedro loads."""
    if not folder.is_dir():
        return None
    versions = sorted((v.name for v in folder.iterdir() if v.is_dir()), reverse=True)
    found = (folder / v / folder.name for v in versions if not v.startswith("."))
    return next((report for report in found if is_complete_report(report)), None)


def newest_reports(root: Path) -> dict[str, dict[str, Path]]:
    """Under the reporting folder ``root``: study -> report name -> newest complete version,
    for every study folder; a report with no folder of its own level (the replication
    report) is listed under its own name."""
    found: dict[str, dict[str, Path]] = {}
    for study in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        own = newest_report(study)
        if own is not None:
            found[study.name] = {study.name: own}
            continue
        reports = {}
        for report in sorted(p for p in study.iterdir() if p.is_dir()):
            newest = newest_report(report)
            if newest is not None:
                reports[report.name] = newest
        if reports:
            found[study.name] = reports
    return found


def claims_line(report: Path) -> str | None:
    """The claims line of a claims report folder (its ``verdicts.json``), if it has one."""
    verdicts = report / CLAIMS_VERDICTS[1]
    if not verdicts.is_file():
        return None
    return json.loads(verdicts.read_text("utf-8")).get("line")


def file_links(root: Path, report: Path) -> str:
    """The report's files, one entry per name with a link per format: ``table1: md, csv``."""
    try:
        names = report_artifacts(report)
    except DatasetError as error:
        return f"unreadable: {error}"
    stems: dict[str, list[str]] = {}
    for name in names:
        stems.setdefault(Path(name).stem, []).append(name)
    base = report.relative_to(root).as_posix()
    return ", ".join(
        f"{stem}: " + " ".join(f"[{Path(n).suffix[1:]}]({base}/{n})" for n in files)
        for stem, files in stems.items()
    )


def render_index(root: Path) -> str:
    """``LATEST.md`` of the reporting folder ``root``."""
    lines = [
        f"# Newest reports in {root.parent.name}/{root.name}",
        "",
        "Each study's newest complete report versions under this folder (the versions "
        '`catalog.load("<study>.report_<name>")` loads), rewritten after every report a run '
        "saves; earlier versions stay in their folders.",
    ]
    for study, reports in newest_reports(root).items():
        lines += ["", f"## {study}", ""]
        claims = reports.get(CLAIMS_VERDICTS[0])
        line = claims_line(claims) if claims else None
        if line:
            lines += [f"`{line}`", ""]
        lines += ["| report | version | files |", "|---|---|---|"]
        for name, report in reports.items():
            lines.append(f"| {name} | {report.parent.name} | {file_links(root, report)} |")
    return "\n".join(lines) + "\n"


def write_index(root: Path) -> Path:
    """Rewrite ``root/LATEST.md`` from the folders under ``root``, in one rename."""
    target = root / INDEX
    staging = root / f".{INDEX}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        staging.write_text(render_index(root), encoding="utf-8")
        os.replace(staging, target)
    finally:
        staging.unlink(missing_ok=True)
    return target


def index_root(dataset_name: str, saved_folder: Path) -> Path | None:
    """The folder whose index lists the report ``dataset_name`` saved to ``saved_folder``
    (``<base>/<version>/<report>``); None for a dataset that is no report."""
    depth = INDEXED_DEPTH.get(kind_of(dataset_name) or "")
    return None if depth is None else saved_folder.parents[depth]


class LatestReportsHook:
    """Rewrites the reporting folder's ``LATEST.md`` after each report a run saves (in the
    ``kedro run`` process, where reports are saved also under the Dask runner). An index
    that cannot be written is a warning: the report itself is saved."""

    def __init__(self) -> None:
        self._catalog: Any = None
        self._lock = threading.Lock()  # ThreadRunner: one rewrite at a time, each a full scan

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline, catalog) -> None:
        self._catalog = catalog

    @hook_impl
    def after_dataset_saved(self, dataset_name: str, data: Any, node) -> None:
        if self._catalog is None:  # a save outside a pipeline run
            return
        folder = getattr(self._catalog[dataset_name], "saved_folder", None)
        root = index_root(dataset_name, folder) if isinstance(folder, Path) else None
        if root is None:
            return
        with self._lock:
            try:
                write_index(root)
            except (OSError, ValueError) as error:  # ValueError: an unreadable verdicts.json
                logger.warning("could not rewrite %s: %s", root / INDEX, error)
