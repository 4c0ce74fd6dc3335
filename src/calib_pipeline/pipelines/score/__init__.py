"""Score a user's own predictions file: calibrators fitted on its val split, metrics table
and reports of its test split (``kedro run --pipelines=score --params=predictions.path=...``)."""

from calib_pipeline.pipelines.score.pipeline import create_pipeline

__all__ = ["create_pipeline"]
