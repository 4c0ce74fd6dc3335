"""Paper tables and figures from a study's tidy metrics table -- pure pandas and matplotlib.

One module per paper (``mukhoti``, ``karandikar``, ``singh``, ``wang``, ``focal_meta``),
plus ``shift`` (corruption and natural-shift reports), ``standard`` (summary table,
reliability diagrams), ``claims`` (each paper's claims -- ``claim_specs`` -- measured
and judged) and ``published`` (the papers' own numbers beside ours). Each splits a report into
compute functions (tidy frame in, table frames out) and draw functions (matplotlib Figures), and
registers the report that composes them (:mod:`.registry`). ``common`` holds what they share,
``selection`` the sweep-member rules and ``evaluation`` the scoring of cached logits into the tidy
table.

From a notebook::

    from calib_pipeline.reports import mukhoti
    mukhoti.table(metrics)              # metrics: a study's tidy table (metrics.parquet)

Importing the package registers every built-in report.
"""

from calib_pipeline.reports import (
    claim_specs,
    claims,
    common,
    evaluation,
    focal_meta,
    karandikar,
    mukhoti,
    published,
    registry,
    selection,
    shift,
    singh,
    standard,
    wang,
)
from calib_pipeline.reports.registry import (
    StudyResults,
    build_report,
    check_report,
    report_names,
    report_needs,
    report_options,
)

__all__ = [
    "StudyResults",
    "build_report",
    "check_report",
    "claim_specs",
    "claims",
    "common",
    "evaluation",
    "focal_meta",
    "karandikar",
    "mukhoti",
    "published",
    "registry",
    "report_names",
    "report_needs",
    "report_options",
    "selection",
    "shift",
    "singh",
    "standard",
    "wang",
]
