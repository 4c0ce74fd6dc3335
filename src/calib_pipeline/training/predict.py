"""Prediction from a trained checkpoint (the logits and shift stages use it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from calib_pipeline.models import model_from_checkpoint
from calib_pipeline.training.data import Normalizer
from calib_pipeline.training.engine import predict_logits, resolve_device


def checkpoint_predictor(
    checkpoint: dict[str, Any], device: str = "auto"
) -> Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """A function images -> (logits, features) on CPU for a trained checkpoint."""
    target = resolve_device(device)
    model = model_from_checkpoint(checkpoint).to(target)
    norm = checkpoint["normalization"]
    normalizer = Normalizer(tuple(norm["mean"]), tuple(norm["std"]), device=target)

    def predict(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits, features = predict_logits(model, images, normalizer, with_features=True)
        return logits.cpu(), features.cpu()

    return predict
