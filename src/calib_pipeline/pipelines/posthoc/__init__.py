"""Post-hoc calibrators fitted on cached validation logits."""

from calib_pipeline.pipelines.posthoc.pipeline import create_pipeline

__all__ = ["create_pipeline"]
