"""Rank every calibrator on every run's stored logits by post-hoc improvement, without
retraining: the calibrator arena (``kedro run --pipelines=posthoc_arena``, docs/posthoc.md)."""

from calib_pipeline.pipelines.posthoc_arena.pipeline import create_pipeline

__all__ = ["create_pipeline"]
