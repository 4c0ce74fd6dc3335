"""One training node per (method, seed), namespaced by method."""

from calib_pipeline.pipelines.training.pipeline import create_pipeline

__all__ = ["create_pipeline"]
