"""The calibrator arena: every calibrator on every prediction set the environment holds,
ranked by post-hoc improvement (``kedro run --pipelines=posthoc_arena``, docs/posthoc.md)."""

from calib_pipeline.pipelines.posthoc_arena.pipeline import create_pipeline

__all__ = ["create_pipeline"]
