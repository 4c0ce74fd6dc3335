"""Score a user's own predictions files: calibrators fitted on each file's val split, metrics
tables, reports and bootstrap intervals of its test split, and one table across the files
(``kedro run --pipelines=score --params=predictions.path=...``)."""

from calib_pipeline.pipelines.score.pipeline import create_pipeline, score_run_description

__all__ = ["create_pipeline", "score_run_description"]
