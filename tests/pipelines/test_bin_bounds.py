"""Bin counts are bounded when the pipelines are built: a typo such as 1e9 bins once
trained every run and fitted every calibrator before evaluation died allocating 4 GB."""

import pytest

from calib_pipeline.calibration.metrics import build_metric, calibration_metrics
from calib_pipeline.calibration.posthoc import build_calibrator
from calib_pipeline.pipelines.checks import check_parameters
from calib_pipeline.registry import MAX_BINS, check_bins
from calib_pipeline.reports.registry import check_report
from calib_pipeline.settings import load_parameters, project_root

TOO_MANY = rf"must be at most {MAX_BINS:,} bins, got 1,000,000,000: more bins than any"


def test_the_bound_itself():
    assert check_bins("n_bins", MAX_BINS) == MAX_BINS
    with pytest.raises(ValueError, match=f"n_bins {TOO_MANY}"):
        check_bins("n_bins", 10**9)
    with pytest.raises(ValueError, match=r"n_bins must be an integer >= 1, got 0"):
        check_bins("n_bins", 0)


@pytest.mark.parametrize(
    ("override", "name"),
    [
        ({"n_bins": 10**9}, "evaluation.n_bins"),
        ({"reliability_bins": [15, 10**9]}, "evaluation.reliability_bins"),
    ],
)
def test_the_evaluation_settings_refuse_absurd_bin_counts_before_any_node(override, name):
    parameters = load_parameters("test", project_root())
    parameters["evaluation"] = {**parameters["evaluation"], **override}
    with pytest.raises(ValueError, match=f"{name} {TOO_MANY}"):
        check_parameters(parameters)


def test_metrics_calibrators_and_report_options_share_the_bound():
    with pytest.raises(ValueError, match=TOO_MANY):
        build_metric("ece", n_bins=10**9)
    with pytest.raises(ValueError, match=TOO_MANY):
        calibration_metrics([[0.0, 1.0]], [1], n_bins=10**9)
    with pytest.raises(ValueError, match=TOO_MANY):
        build_calibrator("histogram_binning", n_bins=10**9)
    with pytest.raises(ValueError, match="n_bins"):
        check_report("reliability", {"n_bins": [15, 10**9]})
