"""The papers' published numbers beside ours: matched on dataset and architecture only,
with our distance from theirs in units of our seed std."""

import math

import pandas as pd
import pytest

from calib_pipeline.models import architecture_tag
from calib_pipeline.reports.published import (
    load_published,
    our_values,
    published_papers,
    side_by_side,
)
from calib_pipeline.reports.registry import StudyResults, build_report
from tests.reports import synthetic


def _as(results: StudyResults, dataset: str, architecture: str) -> StudyResults:
    return StudyResults(
        **{
            **results.__dict__,
            "dataset": dataset,
            "models": dict.fromkeys(results.methods, architecture),
        }
    )


def test_a_malformed_table_names_the_problem(tmp_path, monkeypatch):
    from calib_pipeline.reports import published

    (tmp_path / "bad.yml").write_text(
        "paper: bad\ntables:\n  - {table: T1, dataset: cifar10, architecture: resnet18,"
        " columns: [[none, eec]], rows: {ce: [1.0]}}\n"
    )
    monkeypatch.setattr(published, "PUBLISHED_DIR", tmp_path)
    load_published.cache_clear()
    try:
        with pytest.raises(ValueError, match=r"column \['none', 'eec'\]"):
            load_published("bad")
        with pytest.raises(ValueError, match="papers with numbers: bad"):
            load_published("nobody")
    finally:
        load_published.cache_clear()


def test_side_by_side_matches_dataset_and_architecture_and_measures_in_our_std():
    published = load_published("mukhoti")
    ours = pd.DataFrame(
        {
            "method": "ce",
            "calibrator": "none",
            "metric": "ece",
            "seed": [0, 1, 2],
            "value": [5.41, 4.41, 3.41],  # mean 4.41 (the paper's ResNet-110 value), std 1
        }
    )
    kwargs = {"labels": {"ce": "CE"}, "calibrators": {"ts": "ts_grid_mukhoti"}}
    table = side_by_side(
        published, ours, dataset="cifar10", models={"ce": "resnet110_bottleneck"}, **kwargs
    )
    assert table.to_dict("records") == [
        {
            "Method": "CE",
            "Calibrator": "none",
            "Metric": "ECE",
            "Unit": "%",
            "Ours": "4.41 ± 1.00",
            "Paper": "4.41",
            "Ours − paper": "+0.00",
            "Distance (our std)": "+0.0",
            "Source": "Table 1 (ECE), C.3 (error)",
            "ours_mean": pytest.approx(4.41),
            "ours_std": pytest.approx(1.0),
            "paper_mean": 4.41,
            "paper_std": pytest.approx(float("nan"), nan_ok=True),
            "n_seeds": 3,
        }
    ]
    shifted = ours.assign(value=ours["value"] + 2)
    table = side_by_side(published, shifted, dataset="cifar10", models={"ce": "resnet50"}, **kwargs)
    assert table["Paper"].tolist() == ["4.35"] and table["Distance (our std)"].tolist() == ["+2.1"]
    # He et al.'s 1.7M resnet110 is not the paper's (bottleneck) ResNet-110
    for dataset, model in (
        ("cifar10", "resnet18"),
        ("digits", "resnet110_bottleneck"),
        ("cifar10", "resnet110"),
    ):
        assert side_by_side(published, ours, dataset=dataset, models={"ce": model}, **kwargs).empty
    one_seed = side_by_side(
        published, ours.head(1), dataset="cifar10", models={"ce": "resnet110_bottleneck"}, **kwargs
    )
    assert one_seed["Distance (our std)"].tolist() == ["–"]


def test_our_values_use_the_papers_units_and_names(focal_results):
    temperatures = pd.DataFrame({"method": ["ce"], "seed": [0], "temperature": [2.5]})
    values = our_values(focal_results.metrics, {"ts": "ts_grid"}, temperatures)
    ce = values[(values["method"] == "ce") & (values["metric"] == "ece")]
    assert sorted(ce["calibrator"].unique()) == ["none", "ts"]
    assert ce.loc[ce["calibrator"] == "ts", "value"].tolist() == pytest.approx(
        [2.0, 3.0, 4.0]
    )  # ×100
    assert values.query("metric == 'temperature'")["value"].tolist() == [2.5]


def test_mukhoti_table_shows_the_papers_numbers_only_for_its_protocol(focal_results):
    plain = build_report("mukhoti_table", focal_results, calibrator="ts_grid")
    assert "published" not in plain and "Published values" not in plain["mukhoti_table"]
    other = build_report(
        "mukhoti_table", _as(focal_results, "cifar10", "resnet18"), calibrator="ts_grid"
    )
    assert "published" not in other
    matched = build_report(
        "mukhoti_table", _as(focal_results, "cifar10", "resnet110_bottleneck"), calibrator="ts_grid"
    )
    table = matched["published"]
    assert set(table["Method"]) == {"CE", "Focal (gamma=3)"}
    ce_raw = table[
        (table["Method"] == "CE") & (table["Calibrator"] == "none") & (table["Metric"] == "ECE")
    ]
    # ours: 12.00 ± 2.00 (FOCAL_VALUES); the paper's CIFAR-10 ResNet-110 CE: 4.41
    assert ce_raw[["Ours", "Paper", "Distance (our std)"]].values.tolist() == [
        ["12.00 ± 2.00", "4.41", "+3.8"]
    ]
    temperature = table[(table["Method"] == "CE") & (table["Metric"] == "temperature")]
    assert temperature["Calibrator"].tolist() == ["ts (ts_grid)"] and temperature[
        "Paper"
    ].tolist() == ["2.80"]
    assert (
        "## Published values (mukhoti, cifar10, resnet110_bottleneck)" in matched["mukhoti_table"]
    )


def test_meta_tables_show_table_1_for_resnet18_on_cifar():
    labels = {"fm_ce": "CE", "fm_fl_gamma_sece": "FLγ-SECE"}
    values = {
        ("fm_ce", "none", "test", "ece"): [0.04, 0.05, 0.06],
        ("fm_ce", "ts", "test", "ece"): [0.03, 0.03, 0.03],
    }
    results = synthetic.study(labels, [0, 1, 2], synthetic.tidy(labels, [0, 1, 2], ["ts"], values))
    artifacts = build_report(
        "meta_tables", _as(results, "cifar100", "resnet18"), calibrated={"fm_ce": "ts"}
    )
    table = artifacts["published"]
    ece = table[(table["Metric"] == "ECE") & (table["Method"] == "CE")]
    assert ece["Paper"].tolist() == ["8.38 ± 0.34", "5.39 ± 0.39"]
    assert ece["Calibrator"].tolist() == ["none", "ts"]
    assert ece["Ours"].tolist()[0] == "5.00 ± 1.00"
    assert math.isclose(
        float(ece["Distance (our std)"].tolist()[0]), (5.0 - 8.38) / 1.0, abs_tol=0.05
    )
    assert "Published values" in artifacts["tables"]


@pytest.mark.parametrize("paper", published_papers())
def test_every_published_architecture_is_a_network_the_registry_builds(paper):
    """The published ``architecture`` is compared with ``architecture_tag`` of a run's model
    as a string: each must be the tag of a registered network (a typo, an unknown option
    or a default spelled out would never match any run)."""
    for tag in load_published(paper)["architecture"].unique():
        assert architecture_tag(*synthetic.parse_architecture_tag(tag)) == tag


def test_the_architecture_tag_names_the_options_that_change_the_network():
    assert architecture_tag("resnet32") == "resnet32"
    assert architecture_tag("resnet32", {"shortcut": "projection"}) == "resnet32"  # the default
    assert architecture_tag("resnet32", {"shortcut": "zero_pad"}) == "resnet32[shortcut=zero_pad]"
    assert (
        architecture_tag("wrn", {"widen_factor": 8, "depth": 16}) == "wrn[depth=16,widen_factor=8]"
    )
    with pytest.raises(ValueError, match="come from the dataset"):
        architecture_tag("resnet32", {"num_classes": 10})
    with pytest.raises(ValueError, match="unknown model"):
        architecture_tag("resnet33")
