"""Nodes of the data_split stage."""

from __future__ import annotations

import logging
from typing import Any

from calib_pipeline.data import ImageData
from calib_pipeline.data.splits import split_dataset

logger = logging.getLogger(__name__)


def make_split(data: ImageData, split: dict[str, Any]) -> dict[str, list[int]]:
    """Split the dataset's training part; the official test part is never touched.

    Args:
        data: the loaded dataset.
        split: ``{"seed": int, "fractions": {"train": f, "val": f[, "meta_val": f]}}``.

    Returns:
        part name -> sorted indices into ``data.train_labels`` (JSON-friendly lists).
    """
    parts = split_dataset(data, split)
    logger.info(
        "%s split: %s (+ %d official test)",
        data.name,
        ", ".join(f"{k}={len(v)}" for k, v in parts.items()),
        len(data.test_labels),
    )
    return parts
