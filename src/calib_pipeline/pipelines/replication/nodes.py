"""Node of the replication stage: the studies' claims reports in, the combined report out."""

from __future__ import annotations

import logging
from typing import Any

from calib_pipeline.reports.replication import replication_report

logger = logging.getLogger(__name__)


def combine_claims(run_info: dict[str, str], **claims_reports: dict[str, Any]) -> dict[str, Any]:
    """The replication report over the latest claims report of each study.

    Args:
        run_info: the session's identity; its ``protocol`` heads the report.
        claims_reports: study -> its loaded claims report (``claims`` is the table).

    Returns:
        The report's artifacts (:func:`calib_pipeline.reports.replication.replication_report`).
    """
    tables = {study: report["claims"] for study, report in claims_reports.items()}
    report = replication_report(tables, run_info["protocol"])
    logger.info("%s", report["summary"].splitlines()[0].strip("*"))
    return report
