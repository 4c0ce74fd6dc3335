"""Study reports: paper-style tables and figures, registered by name.

A report is a function ``report(results: StudyResults, **options) -> dict[str, artifact]``
where an artifact is a ``pandas.DataFrame`` (saved as CSV and Markdown), a ``str``
(Markdown) or a matplotlib ``Figure`` (PNG). A study lists its reports in
``parameters_studies.yml`` (``reports: {name: {options}}``); the pipeline builds one node
per (study, report) whose output is a versioned folder under
``data/08_reporting/<dataset>/<study>/<report>/``.

Register a new one with ``@report("name", needs=(...))``; ``needs`` says which per-run
artifacts beyond the tidy metrics and reliability tables it reads: ``"histories"``,
``"logits"``, ``"calibrators"``, ``"shift"``. Report functions are pure pandas and
matplotlib -- no Kedro.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from calib_pipeline.registry import Registry

ReportFunction = Callable[..., dict[str, Any]]
REPORTS: Registry[ReportFunction] = Registry("report")
REPORT_NEEDS: dict[str, tuple[str, ...]] = {}
RUN_ARTIFACTS = ("histories", "logits", "calibrators", "shift")


@dataclass
class StudyResults:
    """Everything a report may read about one study.

    ``metrics`` is the tidy table and ``bins`` the per-bin reliability table of the
    evaluation node; the per-run mappings are keyed by ``(method, seed)`` and filled
    only for the artifacts the report declared in ``needs``.
    """

    study: str
    dataset: str
    methods: list[str]
    seeds: list[int]
    labels: dict[str, str]
    groups: dict[str, str]
    metrics: pd.DataFrame
    bins: pd.DataFrame
    histories: dict[tuple[str, int], pd.DataFrame] = field(default_factory=dict)
    logits: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    calibrators: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    shift: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)


def report(name: str, needs: tuple[str, ...] = ()) -> Callable[[ReportFunction], ReportFunction]:
    """Register ``func`` as report ``name`` reading the per-run artifacts in ``needs``."""
    unknown = sorted(set(needs) - set(RUN_ARTIFACTS))
    if unknown:
        raise ValueError(f"report {name!r}: unknown needs {unknown}; valid: {list(RUN_ARTIFACTS)}")

    def decorator(func: ReportFunction) -> ReportFunction:
        REPORTS.register(name)(func)
        REPORT_NEEDS[name] = tuple(needs)
        return func

    return decorator


def report_names() -> list[str]:
    _load_builtin_reports()
    return REPORTS.names()


def report_needs(name: str) -> tuple[str, ...]:
    _load_builtin_reports()
    REPORTS.factory(name)
    return REPORT_NEEDS[name]


def build_report(name: str, results: StudyResults, **options: Any) -> dict[str, Any]:
    """Run report ``name``; unknown names and options fail with the valid ones."""
    _load_builtin_reports()
    artifacts = REPORTS.build(name, results=results, **options)
    if not isinstance(artifacts, dict) or not artifacts:
        raise ValueError(f"report {name!r} must return a non-empty dict of artifacts")
    return artifacts


REPORT_MODULES = (
    "standard_reports",
    "paper_reports",
    "calibratability_reports",
    "shift_reports",
    "focal_meta_reports",
)


def _load_builtin_reports() -> None:
    """Import the modules that register the project's reports (Python caches them)."""
    import importlib

    for module in REPORT_MODULES:
        importlib.import_module(f"calib_pipeline.pipelines.reporting.{module}")
