"""Every study's claims of the environment in one report (the replication stage)."""

from calib_pipeline.pipelines.replication.pipeline import create_pipeline

__all__ = ["create_pipeline"]
