"""The training engine (pure PyTorch): config, device-resident batching, loop, resume."""

from calib_pipeline.training import accelerate, engine
from calib_pipeline.training.checkpoint import CheckpointStore
from calib_pipeline.training.config import TrainConfig
from calib_pipeline.training.data import BatchStream, Normalizer, augment_batch
from calib_pipeline.training.engine import (
    Split,
    TrainResult,
    predict_logits,
    resolve_device,
    train_model,
)
from calib_pipeline.training.run import train_run

__all__ = [
    "BatchStream",
    "CheckpointStore",
    "Normalizer",
    "Split",
    "TrainConfig",
    "TrainResult",
    "accelerate",
    "augment_batch",
    "engine",
    "predict_logits",
    "resolve_device",
    "train_model",
    "train_run",
]
