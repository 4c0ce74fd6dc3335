"""Scoring cached logits into the tidy metrics table, and paper-style tables and figures."""

from calib_pipeline.pipelines.reporting.pipeline import create_pipeline

__all__ = ["create_pipeline"]
