"""Nodes of the logits stage."""

from __future__ import annotations

from typing import Any

from calib_pipeline.data import ImageData
from calib_pipeline.data.splits import split_fingerprint
from calib_pipeline.pipelines.provenance import check_checkpoint_data
from calib_pipeline.training.predict import checkpoint_logits


def compute_logits(
    data: ImageData,
    split: dict[str, list[int]],
    checkpoint: dict[str, Any],
    logits_params: dict[str, Any],
    run_info: dict[str, str],
) -> dict[str, Any]:
    """Logits, labels and (optionally) penultimate features of every split part.

    Args:
        data: the dataset.
        split: the index split the run was trained with.
        checkpoint: the trained run.
        logits_params: ``{"device": "auto", "features": bool, "batch_size": int | None}``.
        run_info: the session's identity; the checkpoint must be of its protocol.

    Returns:
        ``{part: {"logits", "labels"[, "features"]}}`` for every split part, with the run's
        identifiers, provenance, learned epochs and γ
        (:func:`~calib_pipeline.training.predict.checkpoint_logits`).

    Raises:
        ProvenanceError: the checkpoint belongs to another protocol, or was trained on
            another dataset or split.
    """
    check_checkpoint_data(
        checkpoint, dataset=data.name, split_hash=split_fingerprint(split), run_info=run_info
    )
    return checkpoint_logits(
        data,
        split,
        checkpoint,
        device=logits_params.get("device", "auto"),
        features=logits_params.get("features", False),
        batch_size=logits_params.get("batch_size"),
    )
