"""The ``replication`` pipeline: one node reading every claims report of the environment.

It reads each study's latest claims report (the studies ran before, e.g. ``make replicate``)
and writes ``replication.report``: the combined table, counts per paper and overall.
"""

from __future__ import annotations

from kedro.pipeline import Pipeline, node

from calib_pipeline.pipelines.artifacts import artifact_name
from calib_pipeline.pipelines.replication.nodes import combine_claims
from calib_pipeline.pipelines.run_info import RUN_INFO


def create_pipeline(studies: list[str]) -> Pipeline:
    """The replication node over the claims reports of ``studies`` (those with a ``claims``
    report); an empty pipeline when there are none."""
    if not studies:
        return Pipeline([])
    claims = {study: artifact_name("report", study=study, report="claims") for study in studies}
    return Pipeline(
        [
            node(
                combine_claims,
                inputs={"run_info": RUN_INFO, **claims},
                outputs=artifact_name("replication_report"),
                name="replication_report",
                tags=["replication"],
            )
        ]
    )
