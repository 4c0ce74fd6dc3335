"""Seeded, stratified train / val (/ meta-val) index splits."""

from calib_pipeline.pipelines.data_split.pipeline import create_pipeline

__all__ = ["create_pipeline"]
