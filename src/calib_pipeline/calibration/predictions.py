"""A user's predictions file, its values checked as the metrics check them.

:func:`load_predictions` reads a file through :mod:`calib_pipeline.data.predictions` (the
formats and their layout, ``docs/predictions.md``) and validates each split's scores and
labels with the metrics' own checks (:func:`.validation.check_logits_labels`): no NaN,
probabilities in [0, 1] with rows summing to 1 within the metrics' tolerance
(``docs/metrics.md``), labels in [0, K), and one class count K >= 2 for val and test.
A bad file raises ``ValueError`` naming the file and the fault. A file of one split
(``logits`` or ``probs`` with ``labels``, e.g. netcal's CIFAR records read through a key
mapping) is split into val and test by a stated fraction, stratified by class and seeded
(:func:`calib_pipeline.data.splits.val_test_split`). From a notebook::

    predictions = load_predictions("my_model.npz")
    predictions.inputs, predictions.num_classes     # ("probs", 10)
    cifar = load_predictions(
        "cifar100.npz", keys={"probs": "predictions", "labels": "ground_truth"}, val_fraction=0.5
    )
    cifar.split           # "val fraction 0.5 of 10,000, stratified by class, seed 0"
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from calib_pipeline.calibration.validation import LOGITS_ADVICE, check_logits_labels, to_tensor
from calib_pipeline.data.predictions import (
    SPLITS,
    PredictionsArrays,
    layout,
    naming_the_file,
    read_arrays,
)
from calib_pipeline.data.splits import val_test_split
from calib_pipeline.registry import check_int

# PredictionsFile.split of a file that holds val and test itself
GIVEN_SPLIT = "val and test as given"

# Probabilities of exactly 0 become this before their logarithm is taken, so the
# log-probabilities calibrators fit on stay finite (log ≈ -708).
SMALLEST_PROBABILITY = torch.finfo(torch.float64).tiny


def log_probabilities(probabilities: Tensor) -> Tensor:
    """``log p`` in float64, a probability of 0 clamped to :data:`SMALLEST_PROBABILITY`: the
    logits calibrators fit on and transform for scores given as probabilities."""
    return torch.log(
        torch.as_tensor(probabilities).to(torch.float64).clamp_min(SMALLEST_PROBABILITY)
    )


@dataclass(frozen=True)
class PredictionsFile:
    """The validated contents of a predictions file.

    Attributes:
        source: the file it was read from.
        sha256: the file's SHA-256 (what a stored calibrator was fitted on).
        inputs: ``"logits"`` or ``"probs"``, as the file's key or column names say.
        scores: split -> N x K scores (float64 kept, other floats as float32).
        labels: split -> N int64 labels.
        split: how val and test were obtained: ``GIVEN_SPLIT``, or the fraction, class
            stratification and seed that split a file of one split.
    """

    source: str
    sha256: str
    inputs: str
    scores: dict[str, Tensor]
    labels: dict[str, Tensor]
    split: str = GIVEN_SPLIT

    @property
    def num_classes(self) -> int:
        return int(self.scores["val"].shape[1])

    def describe(self) -> str:
        """One line on what is scored: classes, score kind, split sizes and their origin."""
        kind = "logits" if self.inputs == "logits" else "probabilities"
        sizes = " / ".join(f"{s} {self.labels[s].numel():,}" for s in SPLITS)
        name = Path(self.source).name
        return f"{name}: {self.num_classes} classes, {kind}, {sizes} ({self.split})"

    def calibration_logits(self, split: str) -> Tensor:
        """What calibrators fit on and transform: the logits, or the log-probabilities.

        Log-probabilities are logits: ``log softmax(z) = z - logsumexp(z)`` differs from
        the model's logits ``z`` by one constant per row, which every calibrator whose
        ``needs_logits`` is false ignores (temperature scaling, since
        ``softmax((z - c)/T) = softmax(z/T)``; the top-label, one-vs-rest and Dirichlet
        calibrators, which read only ``softmax(z)``). Those fit exactly as on the logits.
        """
        scores = self.scores[split]
        return scores if self.inputs == "logits" else log_probabilities(scores)

    def provenance(self) -> dict[str, Any]:
        """A plain record of the file (stored beside the calibrators fitted on it)."""
        return {
            "source": self.source,
            "sha256": self.sha256,
            "inputs": self.inputs,
            "num_classes": self.num_classes,
            "split": self.split,
        }

    def check_provenance(self, record: dict[str, Any]) -> None:
        """Refuse calibrators fitted on another file (or another version of this one)."""
        if record.get("sha256") != self.sha256:
            raise ValueError(
                f"the calibrators were fitted on {record.get('source')} (sha256 "
                f"{str(record.get('sha256'))[:12]}), not on {self.source} (sha256 "
                f"{self.sha256[:12]}): run the whole score pipeline again"
            )
        if record.get("split", GIVEN_SPLIT) != self.split:
            raise ValueError(
                f"the calibrators were fitted on the val split of {record.get('split')!r}, not "
                f"of {self.split!r}: run the whole score pipeline again"
            )


def load_predictions(
    path: str | Path,
    *,
    keys: Mapping[str, str] | None = None,
    val_fraction: float | None = None,
    split_seed: int = 0,
) -> PredictionsFile:
    """Read and validate a predictions file (``.npz``, ``.pt`` or ``.csv``).

    Args:
        path: the file.
        keys: our name -> the file's key, for arrays named otherwise
            (:func:`calib_pipeline.data.predictions.read_predictions`).
        val_fraction: for a file of one split, the fraction of each class drawn as val (the
            rest is test); a file of val and test takes none.
        split_seed: the seed of that draw.

    Raises:
        ValueError: an unknown format, an unreadable file, missing or unknown keys or
            columns, both logits and probabilities, scores and labels the metrics refuse
            (NaN, rows not summing to 1, labels out of range, val and test with different
            class counts), a file of one split without ``val_fraction`` or of two with it;
            the message starts with the file's path.
    """
    return predictions_from_arrays(
        read_arrays(path), keys=keys, val_fraction=val_fraction, split_seed=split_seed
    )


def predictions_from_arrays(
    stored: PredictionsArrays,
    *,
    keys: Mapping[str, str] | None = None,
    val_fraction: float | None = None,
    split_seed: int = 0,
) -> PredictionsFile:
    """:func:`load_predictions` of a file's arrays as read (``data.predictions.read_arrays``;
    the score pipeline's catalog reads them)."""
    path = Path(stored.source)
    split_seed = check_int("split_seed", split_seed)
    inputs, arrays = layout(stored, keys)
    with naming_the_file(path):
        one_split = inputs in arrays
        if one_split and val_fraction is None:
            raise ValueError(
                f"holds one split ({inputs}, labels) and no val/test: give the fraction drawn "
                "as val, --params=predictions.val_fraction=0.5 (stratified by class, seeded by "
                "predictions.split_seed), or store val_* and test_* arrays"
            )
        if not one_split and val_fraction is not None:
            raise ValueError(
                f"holds val and test already; predictions.val_fraction={val_fraction} splits "
                "files of one split only: leave it out to score the file's own split"
            )
        split = GIVEN_SPLIT
        if one_split:
            arrays, split = _split_arrays(arrays, inputs, val_fraction, split_seed)
        scores, labels = _checked_splits(arrays, inputs)
    return PredictionsFile(stored.source, stored.sha256, inputs, scores, labels, split)


def _split_arrays(
    arrays: dict[str, Any], inputs: str, val_fraction: float, seed: int
) -> tuple[dict[str, Any], str]:
    """A file of one split as val and test arrays (``val_fraction`` of each class as val,
    seeded), and the line that says so."""
    labels = np.asarray(arrays["labels"])
    if labels.ndim != 1:
        raise ValueError(f"labels must be one integer label per row, got shape {labels.shape}")
    parts = val_test_split(labels, val_fraction, seed)
    if not all(part.size for part in parts.values()):
        raise ValueError(
            f"val_fraction {val_fraction} of {labels.size} samples leaves an empty split"
        )
    out = {}
    for split, index in parts.items():
        out[f"{split}_{inputs}"] = np.asarray(arrays[inputs])[index]
        out[f"{split}_labels"] = labels[index]
    line = f"val fraction {val_fraction:g} of {labels.size:,}, stratified by class, seed {seed}"
    return out, line


FILE_LOGITS_ADVICE = (
    "unnormalised scores are logits: name them val_logits and test_logits (logit_* columns "
    "in a CSV)"
)


def _checked_splits(
    arrays: dict[str, Any], inputs: str
) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """Each split's scores and labels as the metrics validate them; one class count."""
    scores, labels = {}, {}
    for split in SPLITS:
        key = f"{split}_{inputs}"
        try:
            scores[split], labels[split] = check_logits_labels(
                to_tensor(arrays[key], name=key),
                to_tensor(arrays[f"{split}_labels"], name=f"{split}_labels"),
                inputs=inputs,
            )
        except ValueError as error:
            # a file says its kind by its names, not by an argument
            cause = str(error).replace(LOGITS_ADVICE, FILE_LOGITS_ADVICE)
            raise ValueError(f"{split} split ({key}, {split}_labels): {cause}") from None
        if scores[split].shape[1] < 2:
            raise ValueError(
                f"{key} has {scores[split].shape[1]} class column; at least 2 are needed"
            )
    counts = {split: int(s.shape[1]) for split, s in scores.items()}
    if len(set(counts.values())) != 1:
        raise ValueError(f"val and test have different class counts {counts}")
    return scores, labels
