import pytest

from calib_pipeline.calibration import _metrics_kernels as kernels


@pytest.fixture(params=["fused", "eager"])
def scan_path(request, monkeypatch):
    """Runs a test with each scan of CPU logits: the compiled one (``_metrics_fused``,
    numba) and the eager torch kernels that run where numba is missing (and on CUDA)."""
    if request.param == "eager":
        monkeypatch.setattr(kernels, "_fused", lambda: None)
    else:  # numba is a dependency: the fused case must not quietly test the eager scan
        assert kernels._fused() is not None
    return request.param
