"""The blocked top-label scan and the arithmetic binning behind the metrics' speed.

Both layouts of the scan (row-major, and transposed for rows of few classes), the
NaN/inf check folded into it, position independence of every row's statistics, and the
equal-width bin index against ``torch.bucketize``.
"""

import math

import pytest
import torch

from calib_pipeline.calibration import _metrics_binning as binning
from calib_pipeline.calibration import _metrics_fused as fused
from calib_pipeline.calibration import _metrics_kernels as kernels
from calib_pipeline.calibration import metrics as M
from tests.calibration.scan_tolerance import CONFIDENCE_RTOL

# every test runs with both scans of CPU logits (fused and eager torch)
pytestmark = pytest.mark.usefixtures("scan_path")


# around the short-row limits of the eager scan (24) and of the compiled one (16)
SHORT_AND_LONG_ROWS = sorted(
    {2, 3, 10, kernels.SHORT_ROWS - 1, kernels.SHORT_ROWS, 100}
    | {fused.SHORT_ROWS - 1, fused.SHORT_ROWS}
)


def _logits(n, k, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, k, generator=g) * scale, torch.randint(0, k, (n,), generator=g)


@pytest.fixture
def threads():
    """Restores torch's thread count after a test that changes it."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("k", SHORT_AND_LONG_ROWS)
def test_confidence_is_the_softmax_maximum_and_ties_go_to_the_first_class(k):
    # integer logits in {0, 1, 2}: most rows have tied maxima
    g = torch.Generator().manual_seed(k)
    logits = torch.randint(0, 3, (3000, k), generator=g).float()
    labels = torch.randint(0, k, (3000,), generator=g)
    pred = kernels.Predictions.single(logits, labels, "logits")
    expected = torch.softmax(logits.double(), 1).amax(1)
    rtol = CONFIDENCE_RTOL[torch.float32]
    assert torch.allclose(pred.confidence[0].double(), expected, rtol=rtol, atol=0)
    assert torch.equal(pred.correct[0], logits.argmax(1) == labels)


@pytest.mark.parametrize("k", SHORT_AND_LONG_ROWS)
def test_probability_input_confidence_is_the_row_maximum(k):
    logits, labels = _logits(2000, k, seed=1)
    probs = torch.softmax(logits.double(), 1)
    probs[:50] = 1.0 / k  # all classes tied
    pred = kernels.Predictions.single(probs, labels, "probs")
    assert torch.equal(pred.confidence[0], probs.amax(1))
    assert torch.equal(pred.correct[0], probs.argmax(1) == labels)


@pytest.mark.parametrize("n_threads", [1, 2])
@pytest.mark.parametrize("k", SHORT_AND_LONG_ROWS)
def test_a_row_scores_the_same_at_any_position(threads, monkeypatch, n_threads, k):
    # small blocks: rows land in different blocks and block positions run to run
    torch.set_num_threads(n_threads)
    monkeypatch.setattr(kernels, "_BLOCK_ELEMENTS", 64 * 64)
    logits, labels = _logits(1000, k, seed=2)
    single = kernels.Predictions.single(logits, labels, "logits")
    for shift in (1, 7, 63, 500):
        shifted = torch.cat([logits[:shift], logits])
        moved = kernels.Predictions.single(shifted, torch.cat([labels[:shift], labels]), "logits")
        assert torch.equal(moved.confidence[0, shift:], single.confidence[0])
        assert torch.equal(moved.correct[0, shift:], single.correct[0])


def test_batched_runs_score_exactly_as_single_runs():
    logits, labels = _logits(3 * 777, 10, seed=3)
    runs, targets = logits.view(3, 777, 10), labels.view(3, 777)
    batched = M.calibration_metrics_batched(runs, targets, keys=["ece", "mean_confidence"])
    for run in range(3):
        single = M.calibration_metrics(runs[run], targets[run], keys=["ece", "mean_confidence"])
        assert batched["ece"][run] == single["ece"]
        assert batched["mean_confidence"][run] == single["mean_confidence"]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("k", [10, 100])
def test_non_finite_logits_raise_for_every_metric(monkeypatch, bad, k):
    monkeypatch.setattr(kernels, "_BLOCK_ELEMENTS", 64 * 100)  # the bad row sits in a later block
    logits, labels = _logits(500, k, seed=4)
    logits[450, 3] = bad
    kind = "NaN" if math.isnan(bad) else "inf"
    message = rf"logits contain {kind} values \(1 non-finite entries, first at index \(450, 3\)\)"
    for key in M.metric_names():
        with pytest.raises(ValueError, match=message):
            M.build_metric(key)(logits, labels)
    batched_message = message.replace(r"\(450, 3\)", r"\(1, 450, 3\)")
    with pytest.raises(ValueError, match=batched_message):
        M.calibration_metrics_batched(torch.stack([logits.nan_to_num(0.0), logits]), labels)
    with pytest.raises(ValueError, match=message):
        M.bootstrap_ci(logits, labels, n_resamples=5)


def test_non_finite_logits_raise_before_a_metric_that_skips_the_scan():
    logits, labels = _logits(50, 4, seed=5)
    logits[7, 0] = float("-inf")
    for key in ("nll", "brier", "mean_entropy", "sece", "sb_ece", "dece"):
        with pytest.raises(ValueError, match=r"inf values .*\(7, 0\)"):
            M.calibration_metrics(logits, labels, keys=[key])


def _edge_confidences(n_bins, dtype):
    """Every edge and its 3 neighbouring floats each side, within [0, 1]."""
    edges = torch.linspace(0, 1, n_bins + 1, dtype=dtype)
    values = [edges]
    for direction in (0.0, 2.0):
        current = edges
        for _ in range(3):
            current = torch.nextafter(current, torch.full_like(current, direction))
            values.append(current)
    return torch.cat(values).clamp(0, 1).unique()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n_bins", [1, 2, 3, 7, 10, 15, 30, 100, 1000])
@pytest.mark.parametrize("closure", ["left", "right"])
def test_width_bins_equal_bucketize_at_and_around_every_edge(dtype, n_bins, closure):
    g = torch.Generator().manual_seed(n_bins)
    confidence = torch.cat(
        [_edge_confidences(n_bins, dtype), torch.rand(5000, generator=g, dtype=dtype)]
    ).view(1, -1)
    edges = binning.bin_edges(confidence, n_bins, "width")
    index = binning.bin_index(confidence, edges, "width", closure)
    # bucketize(right=True) - 1 makes [lo, hi) bins, right=False (lo, hi]; the clamp puts
    # 1 into the last bin ([lo, hi)) and 0 into the first ((lo, hi])
    expected = torch.bucketize(confidence, edges[0], right=closure == "left") - 1
    assert torch.equal(index.long(), expected.clamp(0, n_bins - 1))
