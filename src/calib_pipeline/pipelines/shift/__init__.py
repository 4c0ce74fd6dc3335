"""Shifted test sets (generated corruptions, official natural-shift sets) and their logits."""

from calib_pipeline.pipelines.shift.pipeline import create_pipeline

__all__ = ["create_pipeline"]
