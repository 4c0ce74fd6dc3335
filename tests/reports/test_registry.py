"""The report registry: needs, declared options and their checks before anything runs."""

import inspect
from pathlib import Path

import pytest
import yaml

from calib_pipeline.reports.registry import (
    BOOLEAN,
    REPORTS,
    TEXT,
    StudyOutline,
    check_report,
    choice,
    either,
    integer,
    list_of,
    mapping,
    number,
    optional,
    report,
    report_calibrators,
    report_names,
    report_needs,
    report_options,
)


def test_needs_are_registered():
    assert report_needs("mukhoti_table") == ("calibrators",)
    assert report_needs("mukhoti_curves") == ("histories",)
    assert (
        report_needs("karandikar_table")
        == report_needs("karandikar_effects")
        == report_needs("singh_table")
        == ()
    )
    assert report_needs("singh_density") == ("logits", "calibrators")


# --- the calibrators a report reads: what its studies evaluate and the posthoc stage fits -


@pytest.mark.parametrize(
    ("name", "options", "keys"),
    [
        ("mukhoti_table", {"calibrator": "ts_grid_mukhoti"}, ("ts_grid_mukhoti",)),
        ("mukhoti_table", {}, ()),  # the study's first calibrator: it declares none
        ("karandikar_table", {}, ("ts", "ts_sb_ece")),  # its defaults count
        ("karandikar_table", {"ts": "ts_nll", "ts_sb_ece": None}, ("ts_nll",)),
        ("karandikar_effects", {"calibrators": ["ts", "hb", "ts"]}, ("ts", "hb")),
        ("meta_tables", {"calibrated": {"fm_ce": "ts", "fm_focal": "ts_grid"}}, ("ts", "ts_grid")),
        ("singh_table", {"calibrator": "ts_fixed"}, ("ts_fixed",)),
        ("singh_density", {"calibrator": "ts_fixed"}, ("ts_fixed",)),
        ("calibratability_table", {}, ("ts_grid_wang", "hist_binning")),
        ("claims", {"papers": ["karandikar"]}, ("ts_sb_ece", "ts")),
        ("claims", {"papers": ["mukhoti"], "rename": {"ts_grid_mukhoti": "ts"}}, ("ts",)),
        ("claims", {"papers": ["mukhoti"], "only": ["focal3_lower_ece_before_ts"]}, ()),
        ("summary", {"metrics": ["ece"]}, ()),  # every calibrator of the study
        ("reliability", {}, ()),
    ],
)
def test_reports_declare_the_calibrators_their_options_name(name, options, keys):
    assert report_calibrators(name, options) == keys


def test_a_report_defaulting_to_the_first_calibrator_needs_the_study_to_have_one():
    study = StudyOutline("mini", ("ce",), {"ce": "ce"}, ())
    for name in ("mukhoti_table", "singh_table", "singh_density"):
        with pytest.raises(
            ValueError,
            match=(
                rf"report '{name}': option 'calibrator' is not given and study 'mini' "
                r"evaluates no calibrator"
            ),
        ):
            check_report(name, {}, study=study)
        check_report(name, {}, study=StudyOutline("mini", ("ce",), {"ce": "ce"}, ("ts",)))


# --- check_report: every option validated without running the report -------------------

PROJECT = Path(__file__).resolve().parents[2]


def test_unknown_report_lists_the_valid_names():
    with pytest.raises(
        ValueError, match=r"unknown report 'reliabilty'; valid report names are: .*reliability"
    ):
        check_report("reliabilty", {})


def test_a_misspelt_option_names_the_valid_ones():
    with pytest.raises(
        ValueError,
        match=r"report 'reliability' got unknown option\(s\) \['n_bin'\]; valid options: n_bins",
    ):
        check_report("reliability", {"n_bin": 20})
    with pytest.raises(ValueError, match=r"valid options: none"):
        check_report("meta_curves", {"smooth": True})


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        # wrong type: the value is quoted with what the option accepts
        (
            "reliability",
            {"n_bins": "15"},
            r"n_bins must be an integer >= 1 \(at most 100000\) or a non-empty list, each an "
            r"integer >= 1 \(at most 100000\), got '15'",
        ),
        (
            "reliability",
            {"n_bins": [15, 20.0]},
            r"n_bins must be an integer >= 1 \(at most 100000\) or a non-empty list, "
            r".*got \[15, 20.0\]",
        ),
        ("mukhoti_table", {"digits": True}, r"digits must be an integer >= 0, got True"),
        (
            "natural_shift_table",
            {"include_clean": "yes"},
            r"include_clean must be true or false, got 'yes'",
        ),
        (
            "meta_tables",
            {"calibrated": ["fm_ce", "ts"]},
            r"calibrated must be a mapping, each key a string and each value a string, got "
            r"\['fm_ce', 'ts'\]",
        ),
        (
            "karandikar_table",
            {"losses": {"ce": ["NLL"]}},
            r"losses\['ce'\] must be a list of 2 values, each a string, got \['NLL'\]",
        ),
        (
            "summary",
            {"metrics": "ece"},
            r"metrics must be a non-empty list, each one of 'accuracy', .*got 'ece'",
        ),
        # out of range
        ("singh_table", {"alpha": 1.0}, r"alpha must be in \(0.0, 1.0\), got 1.0"),
        ("shift_tables", {"tolerance": -1}, r"tolerance must be in \[0.0, inf\), got -1"),
        ("singh_density", {"bins": 1}, r"bins must be an integer >= 2, got 1"),
        (
            "optimal_ece_per_epoch",
            {"oracle": "x"},
            r"unknown option\(s\) \['oracle'\]; valid options: grid, n_bins, epoch_stride",
        ),
        (
            "optimal_ece_per_epoch",
            {"grid": "fine"},
            r"grid must be one of 'mukhoti', 'wang' or a list of 3 values, each a number in \(0.0, "
            r"inf\), got 'fine'",
        ),
        # a choice lists the valid ones
        ("mukhoti_table", {"spread": "iqr"}, r"spread must be one of 'std', 'sem', got 'iqr'"),
        (
            "karandikar_effects",
            {"test": "paired"},
            r"test must be one of 'welch', 'student', got 'paired'",
        ),
        (
            "singh_table",
            {"selection": "best"},
            r"selection must be one of 'karandikar', 'best_val_error', 'test_ece'",
        ),
        ("shift_figures", {"metric": "ecee"}, r"metric must be one of 'accuracy', .*got 'ecee'"),
        (
            "validation_size_sweep",
            {"calibrators": {"x": {"name": "platt"}}},
            r"calibrator 'x': unknown calibrator 'platt'",
        ),
    ],
)
def test_bad_options_fail_before_anything_runs(name, options, message):
    with pytest.raises(ValueError, match=rf"report '{name}'.*{message}"):
        check_report(name, options)


def test_every_report_declares_every_option_with_defaults_that_pass():
    for name in report_names():
        check_report(name, {})
        check_report(name, None)
        function = REPORTS.factory(name)
        parameters = list(inspect.signature(function).parameters)[1:]
        assert list(report_options(name)) == parameters, name


def test_the_options_of_every_configured_study_pass():
    checked = 0
    for path in sorted(PROJECT.glob("conf/*/parameters_studies.yml")):
        for spec in (yaml.safe_load(path.read_text()).get("studies") or {}).values():
            for name, options in (spec.get("reports") or {}).items():
                check_report(name, options)
                checked += 1
    assert checked >= 20  # every paper's study in conf/base plus the test study


def test_a_declaration_that_disagrees_with_the_function_is_refused():
    def undeclared(results, bins=10):
        return {"table": None}

    with pytest.raises(
        ValueError, match=r"declares options \[\] but its function takes \['bins'\]"
    ):
        report("undeclared_test_report")(undeclared)

    def bad_default(results, bins=0):
        return {"table": None}

    with pytest.raises(
        ValueError, match=r"default of bad_default_test_report.bins must be an integer >= 1, got 0"
    ):
        report("bad_default_test_report", options={"bins": integer(low=1)})(bad_default)
    assert (
        "undeclared_test_report" not in report_names()
        and "bad_default_test_report" not in report_names()
    )
    with pytest.raises(ValueError, match=r"unknown needs \['weights'\]"):
        report("weights_test_report", needs=("weights",))


def test_option_builders_accept_what_they_describe():
    assert either(integer(low=1), choice("all")).accepts("all") and not integer().accepts(2.0)
    assert optional(TEXT).accepts(None) and not TEXT.accepts(None)
    assert list_of(integer(), length=2).accepts((1, 2)) and not list_of(integer()).accepts([])
    assert mapping(TEXT, BOOLEAN).accepts({"a": False}) and not mapping(TEXT, BOOLEAN).accepts(
        {"a": 0}
    )
    assert number(low=0.0, low_inclusive=False).accepts(0.5) and not number(
        low=0.0, low_inclusive=False
    ).accepts(0)
