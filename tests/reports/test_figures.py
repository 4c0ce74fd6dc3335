"""Publication-grade figures: distinct method colours, legends outside the data, y-limits
that show the interesting range, titles that fit, PDF + 300 dpi PNG."""

from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
import yaml
from PIL import Image

from calib_pipeline.pipelines.config import parse_structure
from calib_pipeline.reports.common import method_colors, method_styles, write_artifacts
from calib_pipeline.reports.focal_meta import curves_figure, gamma_figure
from calib_pipeline.reports.registry import build_report
from calib_pipeline.reports.standard import reliability_figure
from tests.reports.test_shift import results as shift_results
from tests.reports.test_shift import tidy as shift_tidy

CONF = Path(__file__).resolve().parents[2] / "conf" / "base"
MIN_DELTA_E = 25.0  # CIELAB ΔE (CIE76) between any two methods' colours


def _lab(colors) -> np.ndarray:
    """CIELAB (D65) of sRGB colours."""
    rgb = np.array([matplotlib.colors.to_rgb(c) for c in colors])
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    to_xyz = np.array(
        [[0.4124564, 0.3575761, 0.1804375], [0.2126729, 0.7151522, 0.0721750],
         [0.0193339, 0.1191920, 0.9503041]]
    )  # fmt: skip
    xyz = linear @ to_xyz.T / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.stack(
        [116 * f[:, 1] - 16, 500 * (f[:, 0] - f[:, 1]), 200 * (f[:, 1] - f[:, 2])], axis=1
    )


def _closest_pair(colors) -> float:
    lab = _lab(colors)
    distance = np.linalg.norm(lab[:, None] - lab[None], axis=-1)
    np.fill_diagonal(distance, np.inf)
    return float(distance.min())


def _largest_study_size() -> int:
    parameters = {}
    for name in ("parameters.yml", "parameters_methods.yml", "parameters_studies.yml"):
        parameters.update(yaml.safe_load((CONF / name).read_text()))
    # a tuning study (on request: soft_calibration_beta's 45 β members) draws tables only
    studies = parse_structure(parameters).studies.values()
    return max(len(study.methods) for study in studies if not study.on_request)


def _curves(labels, epochs, ece) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"label": label, "epoch": e, "test_ece": ece(i, e), "test_gamma_mean": np.nan}
            for i, label in enumerate(labels)
            for e in range(1, epochs + 1)
        ]
    ).assign(test_gamma_std=np.nan)


def test_the_largest_study_draws_every_method_in_its_own_colour():
    size = _largest_study_size()
    assert size >= 19  # calibratability: Wang's sweeps
    labels = [f"method {i}" for i in range(size)]
    fig = curves_figure(_curves(labels, 4, lambda i, e: 0.05 + 0.01 * i), method_styles(labels))
    lines = fig.axes[0].lines
    assert len(lines) == size
    assert _closest_pair([line.get_color() for line in lines]) >= MIN_DELTA_E
    drawn = {(line.get_color(), line.get_marker(), line.get_linestyle()) for line in lines}
    assert len(drawn) == size
    # the check can fail: tab20's light/dark pairs, the old palette, are closer
    assert _closest_pair([matplotlib.colormaps["tab20"](i) for i in range(size)]) < MIN_DELTA_E


def test_the_gamma_histogram_outlines_each_method_in_its_own_colour():
    labels = ["FLγ", "FLγ-DECE", "FLγ-SECE"]
    study = ["CE", "Focal", "FLSD", "LS-0.05", "LS-0.1", "Mixup", "MMCE", "CE-DECE", "CE-SECE"]
    colors = method_colors(study + labels)
    rng = np.random.default_rng(0)
    fig = gamma_figure({label: rng.uniform(0, 3, 100) for label in labels}, 20, colors)
    outlines = [p for p in fig.axes[0].patches if not p.get_fill()]
    assert len(outlines) == 3
    assert _closest_pair([p.get_edgecolor() for p in outlines]) >= MIN_DELTA_E


def test_figure3_fits_its_ece_axis_to_the_later_epochs_and_says_so():
    labels = ["CE", "FLγ"]
    # epoch 1 at 48 %, the rest between 2 and 10 %
    curves = _curves(labels, 20, lambda i, e: 0.48 if e == 1 else 0.02 + 0.004 * e + 0.01 * i)
    ax = curves_figure(curves, method_styles(labels)).axes[0]
    low, high = ax.get_ylim()
    assert 2.0 < low < 3.2 and 11.0 < high < 12.0  # epochs 3-20: 3.2 % to 11 %
    assert "y-axis fitted to epochs ≥ 3 (epochs before reach 48.0 %)" in ax.get_title()
    # a short run keeps every epoch in view, and says nothing
    short = curves_figure(_curves(labels, 2, lambda i, e: 0.1 * e), method_styles(labels))
    assert short.axes[0].get_ylim()[1] > 20.0 and "fitted" not in short.axes[0].get_title()


def _data_axes(fig):
    return [
        ax for ax in fig.axes if ax.get_visible() and (ax.lines or ax.patches or ax.collections)
    ]


def _legends(fig):
    return [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]


def _assert_legends_outside(fig, name):
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legends = _legends(fig)
    assert legends, f"{name}: no legend"
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for ax in _data_axes(fig):
            assert not box.overlaps(ax.get_window_extent(renderer)), f"{name}: legend over data"


@pytest.mark.parametrize(
    ("report", "fixture", "options"),
    [
        ("mukhoti_curves", "focal_results", {}),
        ("karandikar_effects", "soft_results", {}),
        ("singh_density", "dark_results", {}),
    ],
)
def test_legends_sit_outside_the_data(report, fixture, options, request):
    out = build_report(report, request.getfixturevalue(fixture), **options)
    figures = {k: v for k, v in out.items() if isinstance(v, plt.Figure)}
    assert figures
    for name, fig in figures.items():
        _assert_legends_outside(fig, f"{report}/{name}")


def test_shift_figures_keep_their_legends_outside():
    figures = build_report("shift_figures", shift_results(shift_tidy()))
    drawn = {k: v for k, v in figures.items() if isinstance(v, plt.Figure)}
    assert len(drawn) >= 3
    for name, fig in drawn.items():
        _assert_legends_outside(fig, name)


def test_focal_meta_figures_keep_their_legends_outside():
    labels = ["CE", "FLγ", "FLγ-SECE"]
    styles = method_styles(labels)
    _assert_legends_outside(curves_figure(_curves(labels, 6, lambda i, e: 0.1), styles), "fig3")
    colors = method_colors(labels)
    rng = np.random.default_rng(0)
    gammas = {label: rng.uniform(0, 3, 100) for label in labels}
    _assert_legends_outside(gamma_figure(gammas, 20, colors), "gamma")


def test_reliability_panel_titles_fit_their_panels():
    """A score run's long file name and calibrator key: the title wraps instead of running
    past its panel (the 'clipped titles' of the score reliability figure)."""
    label, cal = "cifar100_densenet_test_predictions_from_netcal", "ts_grid_mukhoti"
    bins = pd.DataFrame(
        [
            {"label": label, "calibrator": c, "seed": 0, "lower": lo, "upper": lo + 0.1,
             "count": 10, "accuracy": lo + 0.05, "confidence": lo + 0.04}
            for c in ("none", cal, "vector_scaling", "dirichlet_odir")
            for lo in np.arange(0, 1, 0.1)
        ]
    )  # fmt: skip
    fig = reliability_figure(bins, "score: reliability on the test split, 15 bins")
    _assert_legends_outside(fig, "reliability")
    renderer = fig.canvas.get_renderer()
    titled = [ax for ax in fig.axes if ax.get_title()]
    assert len(titled) == 4 and "\n" in titled[0].get_title()
    figure_box = fig.bbox
    for ax in titled:
        title = ax.title.get_window_extent(renderer)
        panel = ax.get_window_extent(renderer)
        assert title.width <= panel.width * 1.15, ax.get_title()
        assert figure_box.x0 <= title.x0 and title.x1 <= figure_box.x1


def test_a_figure_is_written_as_vector_pdf_and_300_dpi_png(tmp_path):
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.plot([0, 1], [0, 1])
    write_artifacts(tmp_path, {"figure": fig})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["figure.pdf", "figure.png"]
    pdf = (tmp_path / "figure.pdf").read_bytes()
    assert pdf.startswith(b"%PDF") and b"/Subtype /Image" not in pdf  # drawn, not a raster
    with Image.open(tmp_path / "figure.png") as png:
        assert png.info["dpi"] == pytest.approx((300, 300), abs=0.5)
        assert png.width >= 4 * 300 * 0.8  # ~4 inches at 300 dpi (tight bbox trims a little)
