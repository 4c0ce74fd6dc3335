import math

import numpy as np
import pytest

from calib_pipeline.registry import (
    Registry,
    check_bool,
    check_choice,
    check_int,
    check_positive,
    check_range,
)


def test_build_passes_parameters_and_rejects_unknown_ones():
    reg: Registry = Registry("widget")

    @reg.register("square")
    def square(*, side: float = 1.0):
        return side * side

    assert reg.build("square", side=3.0) == 9.0
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['sid'\].*accepts: side"):
        reg.build("square", sid=2)


def test_unknown_name_lists_valid_names():
    reg: Registry = Registry("widget")
    reg.register("b")(lambda: 1)
    reg.register("a")(lambda: 2)
    with pytest.raises(ValueError, match="unknown widget 'c'; valid widget names are: a, b"):
        reg.build("c")


def test_duplicate_registration_fails():
    reg: Registry = Registry("widget")
    reg.register("a")(lambda: 1)
    with pytest.raises(ValueError, match="registered twice"):
        reg.register("a")(lambda: 2)


@pytest.mark.parametrize(
    ("value", "kwargs", "message"),
    [
        (-1, {"low": 0}, r"gamma must be in \[0, inf\), got -1"),
        (
            1.0,
            {"low": 0, "high": 1, "high_inclusive": False},
            r"gamma must be in \[0, 1\), got 1.0",
        ),
        ("x", {}, "gamma must be a number"),
        (float("nan"), {}, "gamma must be a finite number, got nan"),
        (math.inf, {"low": 0}, "gamma must be a finite number, got inf"),
        (-math.inf, {}, "gamma must be a finite number, got -inf"),
        (True, {"low": 0}, "gamma must be a number, got True"),
        (np.bool_(False), {}, "gamma must be a number, got "),
    ],
)
def test_check_range_rejects(value, kwargs, message):
    with pytest.raises(ValueError, match=message):
        check_range("gamma", value, **kwargs)


def test_check_range_accepts_bounds():
    assert check_range("eps", 0.0, low=0, high=1, high_inclusive=False) == 0.0


def test_names_are_sorted_unless_the_registration_order_is_kept():
    for keep_order, expected in ((False, ["a", "b", "c"]), (True, ["c", "a", "b"])):
        reg: Registry = Registry("widget", keep_order=keep_order)
        for name in ("c", "a", "b"):
            reg.register(name)(lambda: 0)
        assert reg.names() == expected
        with pytest.raises(ValueError, match=f"valid widget names are: {', '.join(expected)}"):
            reg.build("d")


@pytest.mark.parametrize(
    ("value", "kwargs", "message"),
    [
        (0, {"low": 1}, "n must be an integer >= 1, got 0"),
        (2.0, {"low": 1}, "n must be an integer >= 1, got 2.0"),
        (True, {}, "n must be an integer, got True"),
        ("3", {}, "n must be an integer, got '3'"),
        (6, {"low": 1, "high": 5}, r"n must be an integer in \[1, 5\], got 6"),
        (np.int64(-1), {"high": -2}, r"n must be an integer <= -2, got np.int64\(-1\)"),
    ],
)
def test_check_int_rejects(value, kwargs, message):
    with pytest.raises(ValueError, match=message):
        check_int("n", value, **kwargs)


def test_check_int_returns_a_python_int_also_for_numpy_integers():
    assert check_int("n", 3, low=1) == 3
    value = check_int("n", np.int32(5), low=1, high=5)
    assert value == 5 and type(value) is int


def test_check_choice_wants_one_of_the_choices_of_their_own_type():
    assert check_choice("norm", "l2", ("l1", "l2")) == "l2"
    assert check_choice("k", 2, (1, 2)) == 2
    with pytest.raises(ValueError, match="norm must be one of 'l1', 'l2', got 'l3'"):
        check_choice("norm", "l3", ("l1", "l2"))
    for slip in (2.0, True):
        with pytest.raises(ValueError, match=f"k must be one of 1, 2, got {slip!r}"):
            check_choice("k", slip, (1, 2))


def test_check_bool_accepts_only_booleans():
    assert check_bool("flag", False) is False
    for value in (1, "yes", None):
        with pytest.raises(ValueError, match=f"flag must be true or false, got {value!r}"):
            check_bool("flag", value)


def test_check_positive_wants_a_positive_finite_number():
    assert check_positive("h", 0.5) == 0.5
    assert isinstance(check_positive("h", 2), float)
    for value in (0, -1.0):
        with pytest.raises(ValueError, match=rf"h must be in \(0.0, inf\), got {value!r}"):
            check_positive("h", value)
    for value in (math.inf, math.nan):
        with pytest.raises(ValueError, match=rf"h must be a finite number, got {value!r}"):
            check_positive("h", value)


def test_the_catalogs_dataset_settings_cannot_be_changed_by_params():
    """The raw-data dataset reads globals.yml: a --params value that differs would be
    ignored (download) or would relabel the rows (name); both are refused."""
    from calib_pipeline.pipeline_registry import check_catalog_dataset

    globals_ = {"dataset": {"name": "digits", "download": False}}
    check_catalog_dataset({"dataset": {"name": "digits"}}, globals_)
    check_catalog_dataset({"dataset": {"name": "digits", "download": False}}, globals_)
    with pytest.raises(
        ValueError, match=r"dataset.download True differs from the catalog's \(False, set in"
    ):
        check_catalog_dataset({"dataset": {"name": "digits", "download": True}}, globals_)
    with pytest.raises(
        ValueError, match=r"dataset\.name 'mnist' differs from the dataset the catalog loads"
    ):
        check_catalog_dataset({"dataset": {"name": "mnist"}}, globals_)
