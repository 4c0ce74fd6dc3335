import pytest

from calib_pipeline.registry import Registry, check_range


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
        (-1, {"low": 0}, r"gamma must be in \[0, inf\], got -1"),
        (1.0, {"low": 0, "high": 1, "high_inclusive": False}, r"gamma must be in \[0, 1\), got 1.0"),
        ("x", {}, "gamma must be a number"),
        (float("nan"), {}, "must not be NaN"),
    ],
)
def test_check_range_rejects(value, kwargs, message):
    with pytest.raises(ValueError, match=message):
        check_range("gamma", value, **kwargs)


def test_check_range_accepts_bounds():
    assert check_range("eps", 0.0, low=0, high=1, high_inclusive=False) == 0.0
