"""Input validation shared by the metrics, objectives and post-hoc calibrators.

Every entry point of ``calib_pipeline.calibration`` that receives predictions calls
:func:`check_logits_labels` (one run) or :func:`check_batched_logits_labels` (R runs), so
bad input fails in one place with a ``ValueError`` that names the problem.

Conventions (also in ``docs/metrics.md``):

- scores are an N x K array of logits (``inputs="logits"``) or probabilities
  (``inputs="probs"``); a 1-D array is a binary problem and is expanded to N x 2
  (logit z -> [0, z], probability p of class 1 -> [1 - p, p]);
- float64 scores stay float64, every other dtype becomes float32, on the scores' device;
  labels become int64 on the same device;
- probabilities must lie in [0, 1] and each row must sum to 1 within
  :func:`probability_tolerance` (1e-3, or 1e-2 for bfloat16 input); they are not
  renormalised.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

INPUT_KINDS = ("logits", "probs")


def probability_tolerance(dtype: torch.dtype) -> float:
    """Allowed |sum_k p_k - 1| per row for probabilities stored in ``dtype``.

    float16 rounding moves a row sum by at most 2^-11 and bfloat16 by 2^-8 (relative
    rounding error times sum_k p_k = 1), so 1e-3 and 1e-2 accept correctly quantised
    probabilities while rejecting unnormalised scores.
    """
    return 1e-2 if dtype == torch.bfloat16 else 1e-3


def to_tensor(x: Any, *, name: str = "input") -> torch.Tensor:
    """Return ``x`` as a torch tensor without copying where possible.

    Args:
        x: a torch tensor (returned as is), NumPy array (shared memory) or nested sequence.
        name: what ``x`` is, for error messages.

    Returns:
        A tensor on ``x``'s device (CPU for NumPy input).
    """
    if isinstance(x, torch.Tensor):
        return x
    array = np.asarray(x)
    if not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
        raise ValueError(f"{name} must be numeric, got an array of dtype {array.dtype}")
    # torch.from_numpy needs native byte order, non-negative strides and writable memory.
    if (
        not array.flags.writeable
        or array.dtype.byteorder not in "=|"
        or any(s < 0 for s in array.strides)
    ):
        array = np.array(array, dtype=array.dtype.newbyteorder("="), copy=True)
    return torch.from_numpy(array)


def _as_float_scores(scores: torch.Tensor, inputs: str, name: str) -> torch.Tensor:
    if inputs not in INPUT_KINDS:
        raise ValueError(f"inputs must be one of {INPUT_KINDS}, got {inputs!r}")
    if scores.is_complex():
        raise ValueError(f"{name} must be real, got dtype {scores.dtype}")
    if scores.dtype != torch.float64:
        scores = scores.to(torch.float32)
    return scores


def _expand_binary(scores: torch.Tensor, inputs: str) -> torch.Tensor:
    """Turn a 1-D binary score per sample into two class columns (top-label semantics)."""
    if inputs == "logits":
        return torch.stack([torch.zeros_like(scores), scores], dim=-1)
    return torch.stack([1 - scores, scores], dim=-1)


def check_finite(scores: torch.Tensor, name: str) -> None:
    """Raise ``ValueError`` naming the kind, count and first index of NaN/inf ``scores``.

    One ``aminmax`` pass: NaN propagates into both results and +-inf shows up in one.
    """
    low, high = torch.aminmax(scores.detach())
    if bool(torch.isfinite(low)) and bool(torch.isfinite(high)):
        return
    bad = ~torch.isfinite(scores.detach())
    first = np.unravel_index(int(bad.reshape(-1).nonzero()[0]), tuple(scores.shape))
    kind = "NaN" if bool(torch.isnan(scores.detach()).any()) else "inf"
    raise ValueError(
        f"{name} contain {kind} values ({int(bad.sum())} non-finite entries, first at index "
        f"{tuple(int(i) for i in first)})"
    )


#: What the probability check advises a caller whose scores are unnormalised.
LOGITS_ADVICE = "pass inputs='logits' for unnormalised scores"


def _check_probabilities(scores: torch.Tensor, tolerance: float) -> None:
    values = scores.detach()
    low, high = torch.aminmax(values)
    if bool(low < 0) or bool(high > 1):
        raise ValueError(
            f"probabilities must lie in [0, 1]; found values in [{float(low):.6g}, "
            f"{float(high):.6g}] ({LOGITS_ADVICE})"
        )
    deviation = (values.sum(dim=-1, dtype=torch.float64) - 1).abs()
    worst = int(deviation.argmax())
    if float(deviation.reshape(-1)[worst]) > tolerance:
        row = np.unravel_index(worst, tuple(deviation.shape))
        raise ValueError(
            f"probability rows must sum to 1 within {tolerance:g}; row "
            f"{tuple(int(i) for i in row)} sums to "
            f"{float(values.sum(-1, dtype=torch.float64).reshape(-1)[worst]):.8g}"
        )


def _as_labels(
    labels: Any, shape: tuple[int, ...], n_classes: int, device: torch.device
) -> torch.Tensor:
    labels = to_tensor(labels, name="labels")
    if labels.dtype == torch.bool or labels.is_complex():
        raise ValueError(f"labels must be integer class indices, got dtype {labels.dtype}")
    if labels.is_floating_point():
        if not bool(torch.isfinite(labels).all()):
            raise ValueError("labels contain NaN or inf; they must be integer class indices")
        fractional = labels != labels.round()
        if bool(fractional.any()):
            value = float(labels[fractional].reshape(-1)[0])
            raise ValueError(
                f"labels must be integer class indices; found non-integer value {value}"
            )
    if tuple(labels.shape) not in (shape, shape[-1:]):
        raise ValueError(
            f"shape mismatch: scores describe {shape} samples but labels have shape "
            f"{tuple(labels.shape)}"
        )
    if labels.is_floating_point() and labels.numel():  # before the cast, which would wrap
        low, high = (float(v) for v in torch.aminmax(labels))
        if low < 0 or high >= n_classes:
            bad = low if low < 0 else high
            raise ValueError(
                f"labels out of range: found {bad:g}, valid classes are 0..{n_classes - 1}"
            )
    labels = labels.to(device=device, dtype=torch.long)
    low, high = torch.aminmax(labels)
    if int(low) < 0 or int(high) >= n_classes:
        bad = int(low) if int(low) < 0 else int(high)
        raise ValueError(f"labels out of range: found {bad}, valid classes are 0..{n_classes - 1}")
    return labels.expand(shape)


def _check(
    logits: Any, labels: Any, inputs: str, batched: bool, finite: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    name = "logits" if inputs == "logits" else "probabilities"
    raw = to_tensor(logits, name=name)
    scores = _as_float_scores(raw, inputs, name)
    sample_dims = 2 if batched else 1
    if scores.ndim == sample_dims:
        scores = _expand_binary(scores, inputs)
    expected = "R x N x K (or R x N binary)" if batched else "N x K (or N binary)"
    if scores.ndim != sample_dims + 1:
        raise ValueError(f"{name} must be {expected}, got shape {tuple(raw.shape)}")
    if scores.shape[-2] == 0 or scores.shape[-1] == 0 or (batched and scores.shape[0] == 0):
        raise ValueError(f"empty input: {name} have shape {tuple(raw.shape)}")
    if finite or inputs == "probs":  # the probability range check needs finite values
        check_finite(scores, name)
    if inputs == "probs":
        _check_probabilities(scores, probability_tolerance(raw.dtype))
    targets = _as_labels(labels, tuple(scores.shape[:-1]), scores.shape[-1], scores.device)
    return scores, targets


def check_logits_labels(
    logits: Any, labels: Any, *, inputs: str = "logits", finite: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate one run of predictions and return them as tensors.

    Args:
        logits: N x K scores (torch or NumPy, any device), or N scores of a binary problem.
        labels: N integer class indices in [0, K) (integer dtype, or floats with integral values).
        inputs: ``"logits"`` or ``"probs"`` (rows in [0, 1] summing to 1, see
            :func:`probability_tolerance`).
        finite: check that logits are finite (:func:`check_finite`). ``False`` leaves that
            check to a caller that reads the logits anyway and calls :func:`check_finite`
            before using them (the metrics' top-label scan); probabilities are always checked.

    Returns:
        ``(scores, labels)``: float64 scores if given float64 else float32 (autograd graph
        kept), N x K on the input's device; int64 labels on the same device.

    Raises:
        ValueError: NaN/inf scores, labels out of range or non-integer, shape mismatch,
            empty input, or probabilities outside [0, 1] / rows not summing to 1.
    """
    return _check(logits, labels, inputs, batched=False, finite=finite)


def check_batched_logits_labels(
    logits: Any, labels: Any, *, inputs: str = "logits", finite: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate R runs of predictions: R x N x K scores, labels N (shared) or R x N.

    ``finite`` as in :func:`check_logits_labels`.

    Returns:
        ``(scores, labels)`` with scores R x N x K (dtype rule of :func:`check_logits_labels`)
        and labels expanded to R x N (a view when shared).
    """
    return _check(logits, labels, inputs, batched=True, finite=finite)
