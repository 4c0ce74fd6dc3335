"""Seed statistics: hand-computed values, SciPy parity, edge conventions and failure paths."""

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from calib_pipeline.calibration.stats import (
    cohens_d,
    pooled_std,
    significance_direction,
    summarize,
    t_test,
)

A = [1.0, 2.0, 4.0]
B = [3.0, 5.0, 6.0, 10.0]


def test_summarize_by_hand():
    # mean 7/3; squared deviations 16/9 + 1/9 + 25/9 = 42/9; var = 21/9 = 7/3
    result = summarize(A)
    assert result.mean == pytest.approx(7 / 3)
    assert result.std == pytest.approx(math.sqrt(7 / 3))
    assert result.sem == pytest.approx(math.sqrt(7 / 3) / math.sqrt(3))
    assert result.n == 3


def test_summarize_single_value_has_no_spread():
    result = summarize([0.25])
    assert result.mean == 0.25 and result.n == 1
    assert math.isnan(result.std) and math.isnan(result.sem)


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [[1.0, 2.0]]])
def test_summarize_rejects_bad_input(bad):
    with pytest.raises(ValueError):
        summarize(bad)


def test_pooled_std_and_cohens_d_by_hand():
    # var(A) = 7/3 (n = 3); B: mean 6, deviations 9, 1, 0, 16 -> var 26/3 (n = 4)
    pooled = math.sqrt((2 * 7 / 3 + 3 * 26 / 3) / 5)
    assert pooled_std(A, B) == pytest.approx(pooled)
    assert cohens_d(A, B) == pytest.approx((7 / 3 - 6) / pooled)
    assert cohens_d(B, A) == pytest.approx(-cohens_d(A, B))


def test_paired_cohens_d_by_hand():
    a, b = [1.0, 2.0, 4.0], [2.0, 2.5, 6.0]
    d = np.array([-1.0, -0.5, -2.0])
    assert cohens_d(a, b, paired=True) == pytest.approx(d.mean() / d.std(ddof=1))


def test_student_t_by_hand():
    pooled = math.sqrt((2 * 7 / 3 + 3 * 26 / 3) / 5)
    expected = (7 / 3 - 6) / (pooled * math.sqrt(1 / 3 + 1 / 4))
    result = t_test(A, B, test="student")
    assert result.statistic == pytest.approx(expected)
    assert result.df == 5
    assert result.mean_difference == pytest.approx(7 / 3 - 6)


@pytest.mark.parametrize("alternative", ["two-sided", "less", "greater"])
@pytest.mark.parametrize("test", ["welch", "student"])
def test_independent_t_tests_match_scipy(test, alternative):
    rng = np.random.default_rng(3)
    a, b = rng.normal(0.0, 1.0, 5), rng.normal(0.7, 2.0, 7)
    ours = t_test(a, b, test=test, alternative=alternative)
    ref = scipy_stats.ttest_ind(a, b, equal_var=test == "student", alternative=alternative)
    assert ours.statistic == pytest.approx(ref.statistic, rel=1e-12)
    assert ours.p_value == pytest.approx(ref.pvalue, rel=1e-10)
    assert ours.df == pytest.approx(ref.df, rel=1e-12)
    assert ours.test == test


@pytest.mark.parametrize("alternative", ["two-sided", "less", "greater"])
def test_paired_t_test_matches_scipy(alternative):
    rng = np.random.default_rng(4)
    a = rng.normal(size=6)
    b = a + rng.normal(0.3, 0.2, 6)
    ours = t_test(a, b, paired=True, alternative=alternative)
    ref = scipy_stats.ttest_rel(a, b, alternative=alternative)
    assert ours.statistic == pytest.approx(ref.statistic, rel=1e-12)
    assert ours.p_value == pytest.approx(ref.pvalue, rel=1e-10)
    assert ours.df == ref.df and ours.test == "paired"


def test_welch_and_student_differ_for_unequal_variances():
    assert t_test(A, B).p_value != pytest.approx(t_test(A, B, test="student").p_value)


def test_zero_variance_follows_scipy():
    differ = t_test([1.0, 1.0, 1.0], [2.0, 2.0, 2.0], test="student")
    assert differ.statistic == -math.inf and differ.p_value == 0.0
    assert t_test([1.0, 1.0], [2.0, 2.0], alternative="greater").p_value == 1.0
    same = t_test([1.0, 1.0], [1.0, 1.0])
    assert math.isnan(same.statistic) and math.isnan(same.p_value)
    assert cohens_d([1.0, 1.0], [2.0, 2.0]) == -math.inf
    assert math.isnan(cohens_d([1.0, 1.0], [1.0, 1.0]))


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: t_test([1.0], [1.0, 2.0]), "at least 2"),
        (lambda: t_test([1.0, 2.0], [3.0]), "b needs at least 2"),
        (lambda: cohens_d([1.0], [2.0, 3.0]), "at least 2"),
        (lambda: t_test([1.0, 2.0], [3.0, 4.0, 5.0], paired=True), "equal lengths"),
        (lambda: t_test(A, B, test="mann-whitney"), "welch"),
        (lambda: t_test(A, B, alternative="bigger"), "two-sided"),
        (lambda: t_test([1.0, math.inf], B), "NaN or inf"),
    ],
)
def test_failure_paths(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_significance_direction():
    low, high = [1.0, 1.1, 0.9, 1.05], [2.0, 2.1, 1.9, 2.05]
    assert significance_direction(t_test(high, low)) == 1
    assert significance_direction(t_test(low, high)) == -1
    assert significance_direction(t_test(A, B)) == 0  # Welch p ~ 0.09
    assert significance_direction(t_test(A, B), alpha=0.2) == -1
    assert significance_direction(t_test([1.0, 1.0], [1.0, 1.0])) == 0  # NaN p
    with pytest.raises(ValueError, match="alpha"):
        significance_direction(t_test(A, B), alpha=1.5)
