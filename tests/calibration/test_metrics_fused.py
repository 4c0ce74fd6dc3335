"""The compiled top-label scan of CPU logits (``_metrics_fused``) against the eager torch
scan and exact arithmetic: its 2^x over the whole floored range, both dtypes, short and long
rows, odd layouts, and what happens without numba or without a writable cache folder.
"""

import importlib.util
import math
import warnings

import numpy as np
import pytest
import torch

from calib_pipeline.calibration import _metrics_exp2 as exp2
from calib_pipeline.calibration import _metrics_fused as fused
from calib_pipeline.calibration import _metrics_kernels as kernels
from calib_pipeline.calibration import metrics as M
from tests.calibration.scan_tolerance import CONFIDENCE_RTOL

EPS = {torch.float32: torch.finfo(torch.float32).eps, torch.float64: torch.finfo(torch.float64).eps}


def _logits(n, k, dtype=torch.float32, seed=0, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, k, generator=g, dtype=torch.float64) * scale
    return logits.to(dtype), torch.randint(0, k, (n,), generator=g)


def _top_label(logits, labels, path, monkeypatch):
    with monkeypatch.context() as patch:
        if path == "eager":
            patch.setattr(kernels, "_fused", lambda: None)
        return kernels._top_label_from_scores(logits, labels, "logits")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("k", [2, 3, 10, fused.SHORT_ROWS - 1, fused.SHORT_ROWS, 23, 24, 100, 1000])
def test_the_fused_scan_agrees_with_the_eager_scan_and_the_softmax(monkeypatch, k, dtype):
    logits, labels = _logits(max(300, 30_000 // k), k, dtype, seed=k)
    # rows where a class before the label ties with it for the maximum: argmax (the first
    # maximal class) is not the label; and rows where the tie comes after the label
    logits[:10, :2] = logits[:10].amax(1, keepdim=True) + 1
    labels[:5], labels[5:10] = 1, 0
    argmax_correct = logits.argmax(1) == labels
    assert not argmax_correct[:5].any() and argmax_correct[5:10].all()
    softmax = torch.softmax(logits.double(), 1).amax(1)
    for path in ("fused", "eager"):
        confidence, correct = _top_label(logits, labels, path, monkeypatch)
        assert torch.equal(correct, argmax_correct), path
        assert confidence.dtype == dtype
        error = ((confidence.double() - softmax).abs() / softmax).max().item()
        assert error <= CONFIDENCE_RTOL[dtype], path


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_two_to_the_scaled_difference_is_accurate_over_the_floored_range(dtype):
    # rows [0, -d]: confidence 1 / (1 + 2^x) with x = -d log2(e) rounded in ``dtype``, and
    # 2^x floored at 2^-115; d up to 90 nats reaches past the floor (x < -129)
    d = torch.linspace(0, 90, 200_001, dtype=dtype)
    logits = torch.stack([torch.zeros_like(d), -d], 1)
    confidence = M.Predictions.single(logits, torch.zeros(len(d), dtype=torch.long), "logits")
    found = confidence.confidence[0].double()
    scaled = (-d * exp2.LOG2_E).double().clamp(min=exp2.EXP2_FLOOR)
    expected = 1 / (1 + torch.exp2(scaled))
    assert (((found - expected).abs() / expected).max() <= 2 * EPS[dtype]).item()
    assert found[-1] == 1.0 and found[0] == 0.5


def test_a_non_contiguous_batch_scores_as_its_contiguous_copy():
    logits, labels = _logits(700, 30, seed=1)
    strided = logits.t().contiguous().t()  # same values, column-major
    assert not strided.is_contiguous()
    view = M.Predictions.single(strided, labels, "logits")
    copy = M.Predictions.single(logits, labels, "logits")
    assert torch.equal(view.confidence, copy.confidence)
    assert torch.equal(view.correct, copy.correct)


def test_the_constants_follow_the_dtype_and_the_stated_degrees():
    for dtype, degree in ((np.float32, 7), (np.float64, 12)):
        numbers, coefficients = fused.constants(np.dtype(dtype))
        assert len(coefficients) == degree + 1
        assert all(type(value) is dtype for value in numbers + coefficients)
        assert coefficients[-1] == 1 and coefficients[-2] == dtype(math.log(2))
    assert fused.chunk_rows(100) == fused.CHUNK_ELEMENTS // 100
    assert fused.chunk_rows(10 * fused.CHUNK_ELEMENTS) == 1


def _eager_ece(logits, labels, monkeypatch):
    with monkeypatch.context() as patch:
        patch.setattr(kernels, "_fused", lambda: None)
        return M.ece(logits, labels)


@pytest.fixture
def fresh_fused_lookup():
    kernels._fused.cache_clear()
    yield
    kernels._fused.cache_clear()


def test_without_numba_the_eager_scan_runs_after_one_warning(monkeypatch, fresh_fused_lookup):
    logits, labels = _logits(500, 10, seed=2)
    eager = _eager_ece(logits, labels, monkeypatch)
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "numba" else find_spec(name, *a),
    )
    with pytest.warns(RuntimeWarning, match="numba is not installed"):
        assert M.ece(logits, labels) == eager
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per process
        assert M.ece(logits, labels) == eager


def test_a_numba_that_fails_to_import_falls_back_with_the_reason(monkeypatch, fresh_fused_lookup):
    logits, labels = _logits(500, 30, seed=4)
    eager = _eager_ece(logits, labels, monkeypatch)
    import_module = kernels.importlib.import_module

    def broken(name, *args):
        if name.endswith("_metrics_fused"):
            raise ImportError("Numba needs NumPy 2.5 or less")
        return import_module(name, *args)

    monkeypatch.setattr(kernels.importlib, "import_module", broken)
    with pytest.warns(RuntimeWarning, match=r"numba failed to import \(Numba needs NumPy"):
        assert M.ece(logits, labels) == eager


def test_without_a_writable_cache_folder_the_kernel_compiles_uncached(monkeypatch):
    njit = fused.numba.njit

    def no_cache_folder(*args, cache=False, **options):
        if cache:
            raise RuntimeError("cannot cache function '_scan_block': no locator available")
        return njit(*args, **options)

    monkeypatch.setattr(fused.numba, "njit", no_cache_folder)
    with pytest.warns(fused.NumbaWarning, match="NUMBA_CACHE_DIR"):
        kernel = fused._compile(fused._scan_block)
    k = fused.SHORT_ROWS + 4
    logits, labels = _logits(64, k, seed=3)
    out = torch.empty(64), torch.empty(64, dtype=torch.bool)
    numbers, coefficients = fused.constants(np.dtype(np.float32))
    rows = fused.chunk_rows(k)
    witness = kernel(
        logits.numpy(),
        labels.numpy(),
        *(x.numpy() for x in out),
        np.empty(rows * k, np.float32),
        np.empty(rows, np.float32),
        numbers,
        coefficients,
    )
    assert math.isfinite(witness)
    expected = torch.softmax(logits.double(), 1).amax(1)
    assert torch.allclose(out[0].double(), expected, rtol=CONFIDENCE_RTOL[torch.float32], atol=0)
    assert torch.equal(out[1], logits.argmax(1) == labels)
