"""A user's predictions file, its values checked as the metrics check them.

:func:`load_predictions` reads a file through :mod:`calib_pipeline.data.predictions` (the
formats and their layout, ``docs/predictions.md``) and validates each split's scores and
labels with the metrics' own checks (:func:`.validation.check_logits_labels`): no NaN,
probabilities in [0, 1] with rows summing to 1 within the metrics' tolerance
(``docs/metrics.md``), labels in [0, K), and one class count K >= 2 for val and test.
A bad file raises ``ValueError`` naming the file and the fault. From a notebook::

    predictions = load_predictions("my_model.npz")
    predictions.inputs, predictions.num_classes     # ("probs", 10)
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from calib_pipeline.calibration.validation import LOGITS_ADVICE, check_logits_labels, to_tensor
from calib_pipeline.data.predictions import SPLITS, naming_the_file, read_predictions

# Probabilities of exactly 0 become this before their logarithm is taken, so the
# log-probabilities calibrators fit on stay finite (log ≈ -708).
SMALLEST_PROBABILITY = torch.finfo(torch.float64).tiny


@dataclass(frozen=True)
class PredictionsFile:
    """The validated contents of a predictions file.

    Attributes:
        source: the file it was read from.
        sha256: the file's SHA-256 (what a stored calibrator was fitted on).
        inputs: ``"logits"`` or ``"probs"``, as the file's key or column names say.
        scores: split -> N x K scores (float64 kept, other floats as float32).
        labels: split -> N int64 labels.
    """

    source: str
    sha256: str
    inputs: str
    scores: dict[str, Tensor]
    labels: dict[str, Tensor]

    @property
    def num_classes(self) -> int:
        return int(self.scores["val"].shape[1])

    def calibration_logits(self, split: str) -> Tensor:
        """What calibrators fit on and transform: the logits, or the log-probabilities.

        Log-probabilities are logits: ``log softmax(z) = z - logsumexp(z)`` differs from
        the model's logits ``z`` by one constant per row, which every calibrator whose
        ``needs_logits`` is false ignores (temperature scaling, since
        ``softmax((z - c)/T) = softmax(z/T)``; the top-label, one-vs-rest and Dirichlet
        calibrators, which read only ``softmax(z)``). Those fit exactly as on the logits.
        """
        scores = self.scores[split]
        if self.inputs == "logits":
            return scores
        return torch.log(scores.to(torch.float64).clamp_min(SMALLEST_PROBABILITY))

    def provenance(self) -> dict[str, Any]:
        """A plain record of the file (stored beside the calibrators fitted on it)."""
        return {
            "source": self.source,
            "sha256": self.sha256,
            "inputs": self.inputs,
            "num_classes": self.num_classes,
        }

    def check_provenance(self, record: dict[str, Any]) -> None:
        """Refuse calibrators fitted on another file (or another version of this one)."""
        if record.get("sha256") != self.sha256:
            raise ValueError(
                f"the calibrators were fitted on {record.get('source')} (sha256 "
                f"{str(record.get('sha256'))[:12]}), not on {self.source} (sha256 "
                f"{self.sha256[:12]}): run the whole score pipeline again"
            )


def load_predictions(path: str | Path) -> PredictionsFile:
    """Read and validate a predictions file (``.npz``, ``.pt`` or ``.csv``).

    Raises:
        ValueError: an unknown format, an unreadable file, missing or unknown keys or
            columns, both logits and probabilities, or scores and labels the metrics
            refuse (NaN, rows not summing to 1, labels out of range, val and test with
            different class counts); the message starts with the file's path.
    """
    path = Path(path)
    inputs, arrays = read_predictions(path)
    with naming_the_file(path):
        scores, labels = _checked_splits(arrays, inputs)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return PredictionsFile(str(path), digest, inputs, scores, labels)


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
