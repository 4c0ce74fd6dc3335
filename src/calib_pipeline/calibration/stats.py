"""Seed statistics for the paper tables: mean / std / SEM, t-tests and Cohen's d.

Pure NumPy/SciPy (no Kedro, no pandas), so a notebook can call the same functions the
reports use. Conventions:

- Spread over seeds is the sample standard deviation (``ddof = 1``), as in every paper
  that reports ``mean ± std``; the standard error of the mean is ``std / sqrt(n)``
  (Karandikar et al. report ``mean ± SEM``).
- Two-sample t-tests follow Student (pooled variance) or Welch (separate variances,
  Welch-Satterthwaite degrees of freedom); Wang et al. mark differences by a two-sample
  t-test at the 0.05 level. The paired variant applies when the i-th value of both
  samples comes from the same seed.
- Cohen's d divides the difference of means by the pooled standard deviation (below);
  the paired variant ``d_z`` divides the mean difference by the standard deviation of
  the differences.
- A zero standard error (identical values within each sample) gives ``t = ±inf`` and
  ``p = 0`` when the means differ and ``t = p = NaN`` when they do not, as SciPy does;
  Cohen's d follows the same rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats as scipy_stats

from calib_pipeline.registry import check_choice

T_TESTS = ("welch", "student")
ALTERNATIVES = ("two-sided", "less", "greater")


@dataclass(frozen=True)
class Summary:
    """Mean, sample std (``ddof = 1``), SEM and count of one sample; std and SEM are NaN
    for a single value."""

    mean: float
    std: float
    sem: float
    n: int


@dataclass(frozen=True)
class TTestResult:
    """Outcome of :func:`t_test`: statistic, p-value, degrees of freedom, the difference
    of means ``mean(a) - mean(b)`` and which test produced it."""

    statistic: float
    p_value: float
    df: float
    mean_difference: float
    test: str


def _sample(values: ArrayLike, name: str, minimum: int) -> np.ndarray:
    """``values`` as a finite float64 vector of at least ``minimum`` entries."""
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    if array.size < minimum:
        raise ValueError(
            f"{name} needs at least {minimum} value(s), got {array.size}; "
            "run more seeds for a spread, a test or an effect size"
        )
    if not np.isfinite(array).all():
        raise ValueError(f"{name} contains NaN or inf: {array.tolist()}")
    return array


def _paired(a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """Differences ``a_i - b_i`` of two equally long samples (one pair per seed)."""
    x = _sample(a, "a", 2)
    y = _sample(b, "b", 2)
    if x.size != y.size:
        raise ValueError(f"paired samples need equal lengths, got {x.size} and {y.size}")
    return x - y


def summarize(values: ArrayLike) -> Summary:
    """Mean, std and SEM of one sample (e.g. a metric over seeds).

    ``mean = (1/n) sum_i x_i``, ``std = sqrt(sum_i (x_i - mean)^2 / (n - 1))``,
    ``sem = std / sqrt(n)``.

    Args:
        values: n >= 1 finite numbers.

    Returns:
        A :class:`Summary`; ``std`` and ``sem`` are NaN when n = 1.

    Raises:
        ValueError: no values, a non-vector, or NaN/inf among them.
    """
    x = _sample(values, "values", 1)
    std = float(np.std(x, ddof=1)) if x.size > 1 else math.nan
    return Summary(float(np.mean(x)), std, std / math.sqrt(x.size), int(x.size))


def _p_value(statistic: float, df: float, alternative: str) -> float:
    if alternative == "less":
        return float(scipy_stats.t.cdf(statistic, df))
    if alternative == "greater":
        return float(scipy_stats.t.sf(statistic, df))
    return float(2.0 * scipy_stats.t.sf(abs(statistic), df))


def _result(
    difference: float, standard_error: float, df: float, alternative: str, test: str
) -> TTestResult:
    """t = difference / standard error, with the zero-standard-error rule of the module."""
    if standard_error == 0.0:
        if difference == 0.0:
            return TTestResult(math.nan, math.nan, df, difference, test)
        # t = ±inf: the limits of the p-value formulas below
        p_value = {
            "two-sided": 0.0,
            "less": float(difference > 0),
            "greater": float(difference < 0),
        }
        return TTestResult(
            math.copysign(math.inf, difference), p_value[alternative], df, difference, test
        )
    statistic = difference / standard_error
    return TTestResult(statistic, _p_value(statistic, df, alternative), df, difference, test)


def t_test(
    a: ArrayLike,
    b: ArrayLike,
    *,
    test: str = "welch",
    paired: bool = False,
    alternative: str = "two-sided",
) -> TTestResult:
    """Two-sample t-test of ``mean(a) = mean(b)``.

    - Welch: ``t = (m_a - m_b) / sqrt(s_a^2/n_a + s_b^2/n_b)`` with
      ``df = (s_a^2/n_a + s_b^2/n_b)^2 / ((s_a^2/n_a)^2/(n_a-1) + (s_b^2/n_b)^2/(n_b-1))``.
    - Student: ``t = (m_a - m_b) / (s_p sqrt(1/n_a + 1/n_b))``, ``df = n_a + n_b - 2``,
      with the pooled ``s_p`` of :func:`pooled_std`.
    - Paired (``paired=True``, ``test`` ignored): ``d_i = a_i - b_i``,
      ``t = mean(d) / (std(d) / sqrt(n))``, ``df = n - 1``.

    The p-value is ``2 P(T_df > |t|)`` (two-sided), ``P(T_df < t)`` (``"less"``:
    mean(a) < mean(b)) or ``P(T_df > t)`` (``"greater"``). Agrees with
    ``scipy.stats.ttest_ind`` / ``ttest_rel``.

    Args:
        a, b: the two samples (e.g. a metric over seeds of two methods), each n >= 2.
        test: ``"welch"`` (default) or ``"student"``.
        paired: pair ``a[i]`` with ``b[i]`` (same seed).
        alternative: ``"two-sided"``, ``"less"`` or ``"greater"``.

    Returns:
        A :class:`TTestResult`; ``mean_difference = mean(a) - mean(b)``.

    Raises:
        ValueError: fewer than 2 values in a sample, NaN/inf, unequal lengths when
            paired, or an unknown ``test`` / ``alternative``.
    """
    check_choice("test", test, T_TESTS)
    check_choice("alternative", alternative, ALTERNATIVES)
    if paired:
        d = _paired(a, b)
        if _constant(d):
            return _result(float(d[0]), 0.0, float(d.size - 1), alternative, "paired")
        error = float(np.std(d, ddof=1)) / math.sqrt(d.size)
        return _result(float(d.mean()), error, float(d.size - 1), alternative, "paired")
    x, y = _sample(a, "a", 2), _sample(b, "b", 2)
    if _constant(x) and _constant(y):
        df = float(x.size + y.size - 2) if test == "student" else math.nan
        return _result(float(x[0] - y[0]), 0.0, df, alternative, test)
    difference = float(x.mean() - y.mean())
    if test == "student":
        error = pooled_std(x, y) * math.sqrt(1.0 / x.size + 1.0 / y.size)
        return _result(difference, error, float(x.size + y.size - 2), alternative, test)
    va, vb = np.var(x, ddof=1) / x.size, np.var(y, ddof=1) / y.size
    denominator = va**2 / (x.size - 1) + vb**2 / (y.size - 1)
    df = float((va + vb) ** 2 / denominator) if denominator > 0 else math.nan
    return _result(difference, float(math.sqrt(va + vb)), df, alternative, test)


def _constant(values: np.ndarray) -> bool:
    """Every value identical -- tested exactly: in floating point the variance of
    ``[0.1] * 3`` is 2.9e-34, not 0, which would turn the zero-spread rule into t = 1e15."""
    return bool(np.ptp(values) == 0)


def pooled_std(a: ArrayLike, b: ArrayLike) -> float:
    """Pooled standard deviation ``s_p = sqrt(((n_a-1) s_a^2 + (n_b-1) s_b^2) / (n_a + n_b - 2))``.

    Raises:
        ValueError: fewer than 2 values in a sample, or NaN/inf.
    """
    x, y = _sample(a, "a", 2), _sample(b, "b", 2)
    pooled = ((x.size - 1) * np.var(x, ddof=1) + (y.size - 1) * np.var(y, ddof=1)) / (
        x.size + y.size - 2
    )
    return float(math.sqrt(pooled))


def cohens_d(a: ArrayLike, b: ArrayLike, *, paired: bool = False) -> float:
    """Cohen's d effect size of ``mean(a) - mean(b)``.

    Independent samples: ``d = (m_a - m_b) / s_p`` with the pooled standard deviation
    ``s_p = sqrt(((n_a-1) s_a^2 + (n_b-1) s_b^2) / (n_a + n_b - 2))`` (sample variances,
    ``ddof = 1``). Paired (same seeds): ``d_z = mean(d) / std(d)`` with
    ``d_i = a_i - b_i``. By Cohen's convention |d| = 0.2 / 0.5 / 0.8 is a small /
    medium / large effect. A zero denominator gives ``±inf`` (means differ) or NaN.

    To read "positive = the treatment lowers the metric" (Karandikar et al. Fig. 1),
    pass the baseline as ``a`` and the treatment as ``b``.

    Raises:
        ValueError: fewer than 2 values in a sample, NaN/inf, or unequal lengths when
            paired.
    """
    if paired:
        d = _paired(a, b)
        difference, scale = float(d.mean()), float(np.std(d, ddof=1))
        if _constant(d):
            difference, scale = float(d[0]), 0.0
    else:
        x, y = _sample(a, "a", 2), _sample(b, "b", 2)
        difference, scale = float(x.mean() - y.mean()), pooled_std(x, y)
        if _constant(x) and _constant(y):
            difference, scale = float(x[0] - y[0]), 0.0
    if scale == 0.0:
        return math.nan if difference == 0.0 else math.copysign(math.inf, difference)
    return difference / scale


def significance_direction(result: TTestResult, alpha: float = 0.05) -> int:
    """+1 if ``mean(a)`` is significantly higher than ``mean(b)`` at level ``alpha``, -1 if
    significantly lower, 0 otherwise (Wang et al.'s up/down triangles).

    Raises:
        ValueError: ``alpha`` outside (0, 1).
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if not result.p_value < alpha:  # NaN p-values are never significant
        return 0
    return int(np.sign(result.mean_difference))


def mean_interval(values: ArrayLike, confidence: float = 0.95) -> tuple[float, float]:
    """Student-t confidence interval of the mean of one sample (e.g. per-seed effects).

    ``mean ± t_{(1+confidence)/2, n-1} · std / sqrt(n)`` (``scipy.stats.t.interval``); the
    point ``(mean, mean)`` when every value is the same, ``(NaN, NaN)`` for one value.

    Args:
        values: n >= 1 finite numbers.
        confidence: the coverage, in (0, 1).

    Raises:
        ValueError: no values, NaN/inf among them, or ``confidence`` outside (0, 1).
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    summary = summarize(values)
    if summary.n < 2:
        return math.nan, math.nan
    if summary.sem == 0.0:
        return summary.mean, summary.mean
    low, high = scipy_stats.t.interval(
        confidence, summary.n - 1, loc=summary.mean, scale=summary.sem
    )
    return float(low), float(high)


def t_test_power(
    effect: float,
    std: float,
    n: np.ndarray | int,
    *,
    alpha: float = 0.05,
    alternative: str = "two-sided",
) -> np.ndarray:
    """Power of a one-sample (or paired) t-test of ``n`` seeds at level ``alpha``, if the
    true mean effect were ``effect`` with per-seed standard deviation ``std > 0``.

    With ``d = |effect| / std``, ``df = n - 1``, ``δ = d sqrt(n)`` and ``c`` the critical
    value ``t_{1-α, df}`` (one-sided) or ``t_{1-α/2, df}`` (two-sided),
    ``power = P(T'_{df,δ} > c)`` (one-sided) or ``P(T'_{df,δ} > c) + P(T'_{df,δ} < -c)``.
    The lower tail is taken as ``P(T'_{df,-δ} > c)`` (``-T'_{df,δ}`` is ``T'_{df,-δ}``):
    SciPy's ``nct.cdf(-c, df, δ)`` returns NaN at small ``df`` and large ``δ``, which once
    made every small ``n`` look underpowered.
    """
    n = np.asarray(n)
    df, shift = n - 1, abs(effect) / std * np.sqrt(n)
    tail = alpha if alternative != "two-sided" else alpha / 2
    critical = scipy_stats.t.ppf(1.0 - tail, df)
    reached = scipy_stats.nct.sf(critical, df, shift)
    if alternative == "two-sided":
        reached = reached + scipy_stats.nct.sf(critical, df, -shift)
    return reached


def _check_power_arguments(
    effect: float, std: float, alpha: float, power: float, alternative: str
) -> None:
    check_choice("alternative", alternative, ALTERNATIVES)
    for name, value in (("alpha", alpha), ("power", power)):
        if not 0.0 < value < 1.0:
            raise ValueError(f"{name} must be in (0, 1), got {value!r}")
    if not (math.isfinite(effect) and math.isfinite(std)) or std < 0:
        raise ValueError(f"effect and std must be finite and std >= 0, got {effect!r}, {std!r}")


def seeds_needed(
    effect: float,
    std: float,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
    alternative: str = "two-sided",
    most: int = 100_000,
) -> int | None:
    """Smallest number of seeds n >= 2 at which a one-sample (or paired) t-test of the
    mean effect reaches ``power`` at level ``alpha`` (``t_test_power``), if the true effect
    were ``effect`` with per-seed standard deviation ``std``.

    Args:
        effect: the assumed mean effect (the test runs in its direction, so its sign is moot).
        std: the per-seed standard deviation of the effect.
        alpha: significance level in (0, 1).
        power: wanted power in (0, 1), e.g. 0.8.
        alternative: ``"two-sided"``, or ``"less"`` / ``"greater"`` (one-sided).
        most: the search stops here.

    Returns:
        The number of seeds, or ``None`` when no n <= ``most`` reaches the power (no effect,
        or an effect tiny against its spread). A zero ``std`` with a non-zero effect needs
        2 seeds.

    Raises:
        ValueError: ``alpha`` or ``power`` outside (0, 1), a negative or non-finite
            ``std``, a non-finite ``effect`` or an unknown ``alternative``.
    """
    _check_power_arguments(effect, std, alpha, power, alternative)
    if effect == 0.0:
        return None
    if std == 0.0:
        return 2
    low = 2
    while low <= most:  # blocks of growing size: small effects need many seeds, most need few
        n = np.arange(low, min(4 * low, most) + 1)
        reached = t_test_power(effect, std, n, alpha=alpha, alternative=alternative)
        enough = np.flatnonzero(reached >= power)
        if enough.size:
            return int(n[enough[0]])
        low = int(n[-1]) + 1
    return None


def holm_adjusted(p_values: ArrayLike) -> np.ndarray:
    """Holm's step-down adjusted p-values (Holm 1979): with the m finite p-values sorted,
    ``p_(i) -> max_{j <= i} min(1, (m - j + 1) p_(j))``. Rejecting where the adjusted value
    is below α keeps the family-wise error rate at α for any dependence between the tests.
    NaN (a claim not tested) stays NaN and is not counted in m.

    SciPy offers only false-discovery-rate control (``false_discovery_control``); Holm's
    family-wise control is a few lines, so it is written here rather than adding statsmodels.
    """
    p = np.asarray(p_values, dtype=float)
    if np.any((p < 0) | (p > 1)):
        raise ValueError(f"p-values must be in [0, 1], got {p[(p < 0) | (p > 1)].tolist()}")
    adjusted = np.full(p.shape, np.nan)
    tested = np.flatnonzero(np.isfinite(p))
    order = tested[np.argsort(p[tested], kind="stable")]
    m = order.size
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted[order] = np.maximum.accumulate(scaled)
    return adjusted
