"""Logits and labels of every split for every (method, seed): the interface to all later stages."""

from calib_pipeline.pipelines.logits.pipeline import create_pipeline

__all__ = ["create_pipeline"]
