"""The NaN/inf check that rides on the top-label scan (``_finiteness_witness``).

Each block is judged from its row maxima and scaled differences, which the scan computes
anyway: NaN, +inf or -inf anywhere in a row, or a row of only infinities, must raise with
the exact message of ``check_finite``; finite logits so large that a difference overflows
must not.
"""

import pytest
import torch

from calib_pipeline.calibration import _metrics_kernels as kernels
from calib_pipeline.calibration import metrics as M
from tests.calibration.scan_tolerance import CONFIDENCE_RTOL

# every test runs with both scans of CPU logits (fused and eager torch)
pytestmark = pytest.mark.usefixtures("scan_path")


def _logits(n, k, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, k, generator=g) * 3, torch.randint(0, k, (n,), generator=g)


@pytest.mark.parametrize("k", [3, kernels.SHORT_ROWS - 1, kernels.SHORT_ROWS, 100])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_logit_anywhere_in_a_row_raises(monkeypatch, k, bad):
    monkeypatch.setattr(kernels, "_BLOCK_ELEMENTS", 64 * 64)  # many blocks, either layout
    logits, labels = _logits(300, k, seed=k)
    kind = "NaN" if bad != bad else "inf"
    for column in range(k):
        spoiled = logits.clone()
        spoiled[201, column] = bad
        message = rf"{kind} values \(1 non-finite entries, first at index \(201, {column}\)\)"
        with pytest.raises(ValueError, match=message):
            M.ece(spoiled, labels)


@pytest.mark.parametrize("k", [5, 100])
@pytest.mark.parametrize("bad", [float("inf"), float("-inf")])
def test_a_row_of_only_infinities_raises(k, bad):
    logits, labels = _logits(200, k, seed=1)
    logits[17] = bad
    message = rf"inf values \({k} non-finite entries, first at index \(17, 0\)\)"
    with pytest.raises(ValueError, match=message):
        M.ece(logits, labels)


@pytest.mark.parametrize("k", [5, 100])
def test_finite_logits_whose_differences_overflow_are_accepted(k):
    logits, labels = _logits(200, k, seed=2)
    logits[9, :2] = torch.tensor([3e38, -3e38])  # (z - max) log2 e overflows to -inf
    pred = kernels.Predictions.single(logits, labels, "logits")
    expected = torch.softmax(logits.double(), 1).amax(1)
    rtol = CONFIDENCE_RTOL[torch.float32]
    assert torch.allclose(pred.confidence[0].double(), expected, rtol=rtol, atol=0)
    assert pred.confidence[0, 9] == 1.0
