"""A study's `ensembles` field: checked when the pipelines are built, scored from the
members' cached logits in the reporting stage, its members recorded."""

import copy

import pytest
from kedro.runner import SequentialRunner
from kedro_datasets.pickle import PickleDataset

from calib_pipeline.pipelines import posthoc, reporting
from calib_pipeline.pipelines.artifacts import run_artifact
from calib_pipeline.pipelines.config import parse_structure
from calib_pipeline.reports.ensembles import ENSEMBLE_SEED, EnsembleSpec

from .test_study_pipeline import PARAMETERS, _catalog, _pipeline, small_digits  # noqa: F401


@pytest.fixture
def parameters():
    parameters = copy.deepcopy(PARAMETERS)
    parameters["studies"]["mini"]["seeds"] = [0, 1]
    parameters["studies"]["mini"]["ensembles"] = ["ce"]
    return parameters


def ensembles(parameters):
    return parse_structure(parameters).studies["mini"].ensembles


def test_a_list_of_methods_makes_one_ensemble_of_each_methods_seeds(parameters):
    assert ensembles(parameters) == (
        EnsembleSpec("ce_ensemble", "Ensemble of CE (2)", (("ce", 0), ("ce", 1))),
    )


def test_a_mapping_chooses_methods_seeds_and_label(parameters):
    parameters["studies"]["mini"]["seeds"] = [0, 1, 2]
    parameters["studies"]["mini"]["ensembles"] = {
        "mixed": {"methods": ["ce", "ls"], "seeds": [2, 0], "label": "CE and LS"},
        "ce_all": {"methods": ["ce"]},
    }
    mixed, ce_all = ensembles(parameters)
    assert mixed == EnsembleSpec("mixed", "CE and LS", (("ce", 2), ("ce", 0), ("ls", 2), ("ls", 0)))
    assert ce_all.label == "Ensemble of CE (3)" and ce_all.seeds == (0, 1, 2)


def test_a_study_without_ensembles_has_none(parameters):
    del parameters["studies"]["mini"]["ensembles"]
    assert ensembles(parameters) == ()
    parameters["studies"]["mini"]["ensembles"] = None  # an environment switching them off
    assert ensembles(parameters) == ()


@pytest.mark.parametrize(
    "value, message",
    [
        (["focal"], r"ensemble 'focal_ensemble' names method\(s\) \['focal'\] the study lacks"),
        ({"e": {"methods": ["ce"], "seeds": [0]}}, r"has 1 member run\(s\).*at least 2"),
        ({"e": {"methods": ["ce"], "seeds": [3]}}, r"names seed\(s\) \[3\] the study lacks"),
        ({"e": {"methods": ["ce"], "seeds": [0, 0]}}, "lists a seed twice"),
        ({"ls": {"methods": ["ce"]}}, "ensemble 'ls' has the key of a method"),
        ({"e": {"methods": ["ce"], "label": "CE"}}, r"label\(s\) \['CE'\] are also another row"),
        ({"e": {"methods": "ce"}}, "methods must be a non-empty list"),
        ({"e": {"methods": ["ce"], "size": 3}}, r"must be a mapping with fields"),
        ({"e-1": {"methods": ["ce"]}}, "ensemble key 'e-1' must start with a letter"),
        ("ce", "ensembles must be a list of the study's method keys or a mapping"),
        ({}, "ensembles must be a list of the study's method keys or a mapping"),
    ],
)
def test_bad_ensembles_fail_when_the_pipelines_are_built(parameters, value, message):
    parameters["studies"]["mini"]["ensembles"] = value
    with pytest.raises(ValueError, match=message):
        parse_structure(parameters)


def test_members_must_share_their_validation_and_test_samples(parameters):
    parameters["splits"]["other"] = {"seed": 1, "fractions": {"train": 0.7, "val": 0.3}}
    parameters["methods"]["ls"]["split"] = "other"
    parameters["studies"]["mini"]["ensembles"] = {"e": {"methods": ["ce", "ls"]}}
    with pytest.raises(ValueError, match=r"train on different splits \['other', 'standard'\]"):
        parse_structure(parameters)


def test_ensembles_are_scored_from_cached_logits_and_rescored_alike(
    parameters,
    small_digits,  # noqa: F811
    tmp_path,
):
    structure = parse_structure(parameters)
    catalog = _catalog(small_digits, tmp_path, structure, parameters)
    for method, seed in structure.runs():  # kept for the re-scoring below
        for kind in ("logits", "shift_logits", "calibrators", "history"):
            name = run_artifact(kind, method, seed)
            catalog[name] = PickleDataset(filepath=str(tmp_path / f"{name}.pkl"))
    SequentialRunner().run(_pipeline(structure), catalog)
    table = catalog.load("mini.metrics")
    rows = table[table["method"] == "ce_ensemble"]
    assert set(rows["seed"]) == {ENSEMBLE_SEED}
    assert set(rows["calibrator"]) == {"none", "ts", "ts@calibrate_then_pool"}
    assert set(rows["shift"]) == {"none", "gaussian_noise"}
    summary = catalog.load("mini.report_summary")["summary"]
    assert "| Ensemble of CE (2) | `ce_ensemble` | 2 | ce seed 0, ce seed 1 |" in summary

    # posthoc + reporting again, from the cached logits: the same rows
    runs = structure.runs()
    rescoring = posthoc.create_pipeline(structure, runs) + reporting.create_pipeline(
        structure, ["mini"], "digits", protocol="test"
    )
    SequentialRunner().run(rescoring, catalog)
    again = catalog.load("mini.metrics")
    assert again.equals(table)


def claims_report(a_method, a_calibrator):
    claim = {
        "id": "ensemble_beats_ce",
        "source": "test",
        "quote": "q",
        "expect": "lower",
        "a": {"method": a_method, "calibrator": a_calibrator},
        "b": {"method": "ce", "calibrator": "ts"},
        "quantity": {"metric": "nll"},
    }
    return {"claims": {"claims": [claim]}}


def test_claims_may_name_an_ensemble_and_its_calibrate_then_pool_rows(parameters):
    parameters["studies"]["mini"]["reports"] = claims_report(
        "ce_ensemble", "ts@calibrate_then_pool"
    )
    structure = parse_structure(parameters)
    assert structure.studies["mini"].calibrators == ("ts",)  # the members' own ts serves
    reporting.create_pipeline(structure, ["mini"], "digits", protocol="test")


@pytest.mark.parametrize(
    "method, calibrator, message",
    [
        ("ls_ensemble", "ts", r"method 'ls_ensemble' is not in study 'mini'.*ensembles: ce_ens"),
        ("ce", "ts@calibrate_then_pool", "calibrator 'ts@calibrate_then_pool' is not evaluated"),
    ],
)
def test_claims_on_ensembles_the_study_lacks_fail_when_built(
    parameters, method, calibrator, message
):
    if method == "ce":  # without ensembles, calibrate-then-pool rows do not exist
        del parameters["studies"]["mini"]["ensembles"]
    parameters["studies"]["mini"]["reports"] = claims_report(method, calibrator)
    structure = parse_structure(parameters)
    with pytest.raises(ValueError, match=message):
        reporting.create_pipeline(structure, ["mini"], "digits", protocol="test")
