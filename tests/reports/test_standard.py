"""The standard reports: reliability diagrams as the papers draw them."""

import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest

from calib_pipeline.reports.common import method_colors
from calib_pipeline.reports.registry import build_report, check_report
from calib_pipeline.reports.standard import MAX_COLUMNS, PANEL_HEIGHT, PANEL_WIDTH, pooled_bins

from .synthetic import reliability_bins, study, tidy

LABELS = {f"m{i}": f"Method {i}" for i in range(12)}
SEEDS = [0, 1, 2]


@pytest.fixture(scope="module")
def results():
    res = study(LABELS, SEEDS, tidy({"m0": "M"}, [0], ["ts"]))
    res.bins = reliability_bins(LABELS, SEEDS, n_bins=15)
    return res


def expected_ece(bins):
    """ECE of the bins pooled over the given rows, straight from the table."""
    pooled = (
        bins.assign(
            a=bins["accuracy"].fillna(0) * bins["count"],
            c=bins["confidence"].fillna(0) * bins["count"],
        )
        .groupby("lower")[["count", "a", "c"]]
        .sum()
    )
    return float((pooled["a"] - pooled["c"]).abs().sum() / pooled["count"].sum())


def panels(fig):
    """(title, ECE text, colour of the accuracy bars) of every reliability panel."""
    out = []
    for ax in fig.axes:
        texts = [t.get_text() for t in ax.texts if t.get_text().startswith("ECE")]
        if texts:
            bars = next(c for c in ax.collections if c.get_label() == "accuracy")
            # a long title wraps at spaces (standard.panel_title)
            title = ax.get_title().replace("\n", " ")
            out.append((title, texts[0], bars.get_facecolor()[0]))
    return out


def ece_of(text):
    return float(re.fullmatch(r"ECE (\d+\.\d+)%( \(pooled\))?", text).group(1)) / 100


def test_grid_fits_a_page_and_each_panel_prints_its_pooled_ece(results):
    fig = build_report("reliability", results, n_bins=15)["reliability_15_bins"]
    drawn = panels(fig)
    assert len(drawn) == 24  # 12 methods x 2 calibrators
    assert len(fig.axes) == 48  # each with a count histogram below
    width, height = fig.get_size_inches()
    assert width == pytest.approx(MAX_COLUMNS * PANEL_WIDTH) and width * 120 <= 1800
    assert height == pytest.approx(6 * PANEL_HEIGHT + 0.6)
    colors = method_colors(results.methods, results.labels)
    bins = results.bins
    for title, text, color in drawn:
        label, cal = title.split(" · ")
        cell = bins[(bins["label"] == label) & (bins["calibrator"] == cal)]
        assert ece_of(text) == pytest.approx(expected_ece(cell), abs=5e-5), title
        assert text.endswith("(pooled)"), "the panel's ECE says it pools the seeds"
        assert np.allclose(color[:3], matplotlib.colors.to_rgb(colors[label]))
    title = fig._suptitle.get_text()
    assert "15 bins" in title and "seeds pooled" in title and "3 seed(s): 0, 1, 2" in title
    assert "not the tables' mean over seeds" in title  # so Table 1's ECE may differ
    assert fig.legends and [t.get_text() for t in fig.legends[0].texts] == [
        "perfect calibration",
        "accuracy",
        "gap to confidence",
    ]
    plt.close(fig)


def test_one_seed_is_drawn_alone_and_said_so(results):
    fig = build_report("reliability", results, n_bins=15, seed=1)["reliability_15_bins_seed_1"]
    bins = results.bins[results.bins["seed"] == 1]
    for title, text, _ in panels(fig):
        label, cal = title.split(" · ")
        cell = bins[(bins["label"] == label) & (bins["calibrator"] == cal)]
        assert ece_of(text) == pytest.approx(expected_ece(cell), abs=5e-5), title
        assert "pooled" not in text
    assert "seed 1 only" in fig._suptitle.get_text()
    assert "mean over seeds" not in fig._suptitle.get_text()
    plt.close(fig)


def test_seed_option_is_validated(results):
    check_report("reliability", {"n_bins": [10, 15], "seed": 3})
    with pytest.raises(ValueError, match="seed"):
        check_report("reliability", {"seed": "one"})
    with pytest.raises(ValueError, match=r"seed 7 is not in the study's bins; seeds: \[0, 1, 2\]"):
        build_report("reliability", results, seed=7)


def test_few_panels_use_few_columns(results):
    bins = results.bins[results.bins["method"].isin(["m0"])]
    res = study({"m0": "Method 0"}, SEEDS, results.metrics)
    res.bins = bins
    fig = build_report("reliability", res, n_bins=15)["reliability_15_bins"]
    assert len(panels(fig)) == 2
    assert fig.get_size_inches()[0] == pytest.approx(2 * PANEL_WIDTH)
    plt.close(fig)


def test_bars_are_the_bins_and_empty_bins_draw_none(results):
    """Each panel's accuracy bars span their bins' edges up to the bin's accuracy, its gap
    bars run between accuracy and confidence, and a bin without samples draws no bar."""
    fig = build_report("reliability", results, n_bins=15)["reliability_15_bins"]
    ax = next(a for a in fig.axes if a.get_title() == "Method 3 · ts")
    cell = results.bins[
        (results.bins["label"] == "Method 3") & (results.bins["calibrator"] == "ts")
    ]
    pooled = pooled_bins(cell).sort_values("lower")
    filled = pooled[pooled["count"] > 0]
    assert 0 < len(filled) < 15, "the synthetic bins should leave some bins empty"
    by_label = {c.get_label(): c for c in ax.collections}
    bars = sorted((p.vertices[:4] for p in by_label["accuracy"].get_paths()), key=lambda v: v[0, 0])
    assert len(bars) == len(filled)
    for corners, (_, row) in zip(bars, filled.iterrows()):
        assert corners[:, 0].min() == pytest.approx(row["lower"])
        assert corners[:, 0].max() == pytest.approx(row["upper"])
        assert corners[:, 1].min() == 0 and corners[:, 1].max() == pytest.approx(row["accuracy"])
    gaps = sorted(
        (p.vertices[:4] for p in by_label["gap to confidence"].get_paths()), key=lambda v: v[0, 0]
    )
    for corners, (_, row) in zip(gaps, filled.iterrows()):
        low, high = sorted([row["accuracy"], row["confidence"]])
        assert corners[:, 1].min() == pytest.approx(low) and corners[:, 1].max() == pytest.approx(
            high
        )
    plt.close(fig)
