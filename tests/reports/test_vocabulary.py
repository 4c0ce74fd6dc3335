"""One name per metric in every report output, rates in % in every figure, and how seeds
combine said wherever it could be read either way (docs/metrics.md, "One name per metric")."""

import re

import numpy as np
import pandas as pd
import pytest

from calib_pipeline.calibration.metrics import METRIC_NAMES
from calib_pipeline.reports.common import paper_view, table_units_note
from calib_pipeline.reports.registry import build_report


def tables_and_texts(artifacts):
    """The DataFrames and the Markdown strings among a report's artifacts."""
    frames = {k: v for k, v in artifacts.items() if isinstance(v, pd.DataFrame)}
    texts = {k: v for k, v in artifacts.items() if isinstance(v, str)}
    return frames, texts


@pytest.fixture(scope="module")
def reports(focal_results):
    """The tables that show the equal-mass ECE: the summary, Table 1 of the meta paper (its
    "ACE") and Mukhoti et al.'s table (their "AdaECE")."""
    return {
        "summary": build_report("summary", focal_results, metrics=["accuracy", "ece", "ece_em"]),
        "meta_tables": build_report("meta_tables", focal_results, calibrated={"ce": "ts_grid"}),
        "mukhoti_table": build_report("mukhoti_table", focal_results, calibrator="ts_grid"),
    }


def test_equal_mass_ece_goes_by_one_name_in_every_table(reports):
    name = METRIC_NAMES["ece_em"]
    for report, artifacts in reports.items():
        frames, texts = tables_and_texts(artifacts)
        headed = False
        for key, frame in frames.items():
            layout = list(paper_view(frame).columns)
            assert not [c for c in layout if c == "ACE" or "ece_em" in c], (report, key, layout)
            headed |= any(c.split()[0] == name for c in layout)
            numbers = [c for c in frame.columns if c not in layout]
            assert not [c for c in numbers if c.startswith(("ace_", "ece_em_"))], numbers
        assert headed, f"{report}: no column headed {name}"
        for key, text in texts.items():
            # the key only where a note spells it out, never as a header or in a units line
            assert text.count("ece_em") == text.count("`ece_em`"), (report, key)
            assert "| ACE" not in text and "ACE |" not in text, (report, key)
    # the meta paper's table says what the paper called it
    assert "the meta-regularisation paper's ACE" in reports["meta_tables"]["tables"]
    assert "Mukhoti et al.'s AdaECE" in reports["mukhoti_table"]["mukhoti_table"]


def units_named(text):
    """The column names a report's units line lists."""
    line = re.search(r"Units: (.*?)\.(?: |\n|$)", text).group(1)
    names = []
    for part in line.split("; "):
        part = re.sub(r" (in %|×100|as computed)$", "", part)
        names += part.split(", ")
    return names


def test_a_units_line_names_only_the_columns_its_table_has(reports):
    # the synthetic metrics table has no NLL or MCE: Table 1 has no such columns
    table1 = reports["meta_tables"]["table1"]
    columns = set(paper_view(table1).columns) - {"Methods"}
    assert units_named(reports["meta_tables"]["tables"]) == [
        c for c in paper_view(table1).columns if c in columns
    ]
    assert "NLL" not in columns and "MCE" not in columns
    summary = reports["summary"]
    assert set(units_named(summary["summary"])) == set(paper_view(summary["table"]).columns) - {
        "label",
        "calibrator",
    }
    with pytest.raises(ValueError, match=r"no column of the table is one of the metrics \['nll'\]"):
        table_units_note(table1, ["nll"])


def axes_by_title(fig):
    return {ax.get_title(): ax for ax in fig.axes if ax.get_visible()}


def test_training_curves_show_rates_in_percent(focal_results):
    out = build_report("mukhoti_curves", focal_results, panels=["ece", "accuracy", "nll"])
    panels = axes_by_title(out["epochs_by_method"])
    assert set(panels) == {"test ECE (%)", "test Accuracy (%)", "test NLL"}
    # histories hold fractions: ECE 0.1, accuracy 0.4 / 0.6 / 0.8, NLL 1 + seed (as computed)
    assert np.allclose(panels["test ECE (%)"].lines[0].get_ydata(), 10.0)
    assert np.allclose(panels["test Accuracy (%)"].lines[0].get_ydata(), [40.0, 60.0, 80.0])
    assert np.allclose(panels["test NLL"].lines[0].get_ydata(), [2.0, 3.0, 4.0])
    overview = axes_by_title(out["overview"])
    rates = overview["Error / ECE (%)"]
    drawn = {line.get_label(): line.get_ydata() for line in rates.lines}
    assert np.allclose(drawn["train Error"], [50.0, 30.0, 10.0])
    assert np.allclose(drawn["test Error"], [60.0, 40.0, 20.0])
    assert np.allclose(drawn["test ECE"], 10.0)
    assert "mean over seeds" in out["overview"]._suptitle.get_text()


def test_meta_figures_label_units_and_the_mean_over_seeds(focal_results):
    figure3 = build_report("meta_curves", focal_results)["figure3"]
    ece = figure3.axes[0]
    assert ece.get_ylabel() == "ECE (%)" and "mean over seeds" in ece.get_title()
    assert np.allclose(ece.lines[0].get_ydata(), 10.0)
    figure5 = build_report("bin_robustness", focal_results, n_bins=[10, 20])["figure5"]
    assert [ax.get_ylabel() for ax in figure5.axes] == ["ECE (%)", "MCE (%)"]
    assert all("mean over seeds" in ax.get_title() for ax in figure5.axes)


def test_docs_list_every_metric_under_its_report_name_and_unit():
    """docs/metrics.md's key table is where a reader looks a name up: it must not drift."""
    from pathlib import Path

    from calib_pipeline.reports.common import metric_unit

    text = (Path(__file__).parents[2] / "docs" / "metrics.md").read_text(encoding="utf-8")
    keys = text[text.index("## Keys") : text.index("### Differentiable estimators")]
    documented = dict(re.findall(r"^\| `(\w+)` \| ([^|]+?) \|", keys, flags=re.M))
    units = {"%": "%", "×100": "×100", "": "as computed"}
    for key, name in METRIC_NAMES.items():
        assert documented[key].startswith(f"{name}, {units[metric_unit(key)]}"), key
