"""Each study's tidy metrics table and its reports (tables, figures, claims): the Kedro
wiring; the science is in :mod:`calib_pipeline.reports`."""

from calib_pipeline.pipelines.reporting.pipeline import create_pipeline

__all__ = ["create_pipeline"]
