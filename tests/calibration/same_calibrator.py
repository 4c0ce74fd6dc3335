"""``assert_same_calibrator``: a restored calibrator is the original, attribute by attribute."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from calib_pipeline.calibration._posthoc_base import FittedMap
from calib_pipeline.calibration.posthoc import Calibrator, LogitCalibrator, TopLabelCalibrator


def assert_same_value(restored: Any, original: Any, where: str) -> None:
    """Equal values: tensors and arrays element for element (NaN equal to NaN, same
    dtype), fitted maps by their tensors, lists item by item, floats NaN-aware."""
    if isinstance(original, FittedMap):
        assert type(restored) is type(original), where
        for name in original.tensor_names:
            assert_same_value(getattr(restored, name), getattr(original, name), f"{where}.{name}")
    elif isinstance(original, torch.Tensor):
        assert isinstance(restored, torch.Tensor) and restored.dtype == original.dtype, where
        torch.testing.assert_close(restored, original, rtol=0, atol=0, equal_nan=True, msg=where)
    elif isinstance(original, np.ndarray):
        np.testing.assert_array_equal(restored, original, err_msg=where)
    elif isinstance(original, list):
        assert isinstance(restored, list) and len(restored) == len(original), where
        for index, (left, right) in enumerate(zip(restored, original)):
            assert_same_value(left, right, f"{where}[{index}]")
    elif isinstance(original, float) and math.isnan(original):
        assert isinstance(restored, float) and math.isnan(restored), where
    else:
        assert type(restored) is type(original) or isinstance(original, np.generic), where
        assert restored == original, f"{where}: {restored!r} != {original!r}"


def assert_same_calibrator(
    restored: Calibrator, original: Calibrator, logits: torch.Tensor
) -> None:
    """Same class, every instance attribute equal (what reports read: temperature,
    warnings, converged, at_bound, ...), and bit-identical outputs on ``logits``."""
    assert type(restored) is type(original)
    assert sorted(vars(restored)) == sorted(vars(original))
    for attribute, value in vars(original).items():
        assert_same_value(getattr(restored, attribute), value, attribute)
    assert torch.equal(restored.predict_proba(logits), original.predict_proba(logits))
    assert restored.learned() == original.learned()
    if isinstance(original, LogitCalibrator):
        assert torch.equal(restored.transform_logits(logits), original.transform_logits(logits))
    if isinstance(original, TopLabelCalibrator):
        assert torch.equal(
            restored.calibrate_confidence(logits), original.calibrate_confidence(logits)
        )
