"""Calibration metrics: one documented suite for every number the five papers report, and
the KS error, AURC/AUGRC, SKCE (with its test) and ECE-KDE beyond them.

Every metric is a function ``name(logits, labels, *, ...) -> torch.Tensor`` (0-d) taking
torch tensors or NumPy arrays on any device (``inputs="probs"`` for probabilities);
``calibration_metrics`` returns those of the default suite (or of ``keys``) as floats and
``calibration_metrics_batched`` scores R runs (R x N x K) at once; the O(N^2) kernel metrics
(``ON_REQUEST``) are computed only when named. Exact definitions, edge conventions and the
relation to torchmetrics, netcal, relplot and the papers' code are in ``docs/metrics.md``.

Design: inputs are validated once (``validation.py``) and options once, when a metric is
built (``build_metric``, the ``METRICS`` registry); a ``Predictions`` object
(``_metrics_kernels``) holds the validated R x N x K scores and computes the per-sample
statistics (confidence, correctness, log-probabilities) lazily and once; each metric
(``_metrics_hard``, ``_metrics_soft``) is a reduction of those statistics over the N samples
of every run, vectorised over runs and bins (``_metrics_binning``: bucketize/searchsorted +
bincount; no Python loop over bins, samples or runs, except smooth_ece's data-dependent
bandwidth search, which loops over runs); the kernel metrics (``_metrics_kernel_ce``) score
the runs one by one over row blocks of their N x N kernel matrices.

Hard metrics are computed on detached scores and return float64; the differentiable
estimators (``sece``, ``sb_ece``, ``dece``) keep the autograd graph and the scores' dtype.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection, Iterable, Mapping
from functools import partial
from typing import Any

import numpy as np
import torch

from calib_pipeline.calibration import _metrics_hard as hard
from calib_pipeline.calibration import _metrics_kernel_ce as kernel_ce
from calib_pipeline.calibration import _metrics_soft as soft
from calib_pipeline.calibration._metrics_binning import CLOSURES, NORMS, SCHEMES, binned
from calib_pipeline.calibration._metrics_kernels import Predictions
from calib_pipeline.calibration._metrics_soft import (  # noqa: F401 (public)
    SB_ECE_TEMPERATURE,
    sb_ece_temperature,
)
from calib_pipeline.registry import (
    Registry,
    check_bins,
    check_bool,
    check_choice,
    check_int,
    check_positive,
    check_range,
)


class Metric:
    """A metric with its options fixed, as :func:`build_metric` returns it.

    ``metric(logits, labels, inputs="logits")`` scores one run (a 0-d tensor, as the
    metric's function does); ``metric.runs(pred)`` scores every run of a ``Predictions``.

    Attributes:
        key: the registry name.
        options: the effective options (defaults filled in, validated);
            ``build_metric(key, **options)`` rebuilds the same metric.
    """

    def __init__(
        self, key: str, compute: Callable[..., torch.Tensor], options: dict[str, Any]
    ) -> None:
        self.key = key
        self.options = options
        self._compute = compute

    def __call__(self, logits: Any, labels: Any, *, inputs: str = "logits") -> torch.Tensor:
        return self.runs(Predictions.single(logits, labels, inputs))[0]

    def runs(self, pred: Predictions) -> torch.Tensor:
        """The metric of every run of ``pred``: an R-vector."""
        return self._compute(pred, **self.options)

    def trusted(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Score one run of ``N x K`` float logits and int64 ``labels`` on one device
        *without* validating them, so nothing waits for the device (a check reads values
        back to the host). For the training step only, whose labels come from the split
        and whose non-finite logits propagate into the loss that the engine checks once
        per epoch; everyone else calls the metric, which validates."""
        return self.runs(Predictions(logits.unsqueeze(0), labels.unsqueeze(0), "logits"))[0]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.key!r}, {self.options})"


#: Every metric by key; ``METRICS.names()`` lists them in the documented order (the keys
#: of ``calibration_metrics``), which is the order of registration below.
METRICS: Registry[Metric] = Registry("metric", keep_order=True)

# One check per option name: an option means the same thing in every metric that has it.
_OPTION_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "n_bins": check_bins,
    "scheme": partial(check_choice, choices=SCHEMES),
    "norm": partial(check_choice, choices=NORMS),
    "closure": partial(check_choice, choices=CLOSURES),
    "label_binned": check_bool,
    "bandwidth": check_positive,
    "temperature": check_positive,
    "p": check_positive,
    "tau_a": check_positive,
    "tau_b": check_positive,
    "kernel": partial(check_choice, choices=("laplacian", "gaussian")),
    "estimator": partial(check_choice, choices=("quadratic", "linear")),
    "n_resamples": partial(check_int, low=1),
    "seed": partial(check_int, low=0),
}

_METRIC_ARGS_DOC = """

    Args:
        logits: N x K logits, or probabilities with ``inputs="probs"`` (torch or NumPy, any
            device; a 1-D array is a binary problem, scored top-label).
        labels: N integer class labels.
        inputs: ``"logits"`` or ``"probs"``.
        Further keywords: the options in the signature (see docs/metrics.md).

    Returns:
        0-d tensor: float64 and detached for hard metrics; in the scores' dtype with the
        autograd graph for ``sece``, ``sb_ece`` and ``dece``.

    Raises:
        ValueError: invalid input (see ``validation.check_logits_labels``) or option.
    """


def _checked_options(settings: Mapping[str, Any], nullable: Collection[str] = ()) -> dict[str, Any]:
    """``settings`` validated and normalised (``n_bins`` an ``int``, scales ``float``).

    ``None`` passes for the options in ``nullable`` (those whose default is ``None``, such
    as smooth_ece's automatic bandwidth).
    """
    return {
        name: value if value is None and name in nullable else _OPTION_CHECKS[name](name, value)
        for name, value in settings.items()
    }


#: How reports show each metric: ``"%"`` (a rate or probability, ×100 in %), ``"×100"``
#: (the Brier score) or ``""`` (as computed: NLL and entropy in nats). Declared where the
#: metric is registered, so a new metric cannot be shown in another unit than its siblings.
METRIC_UNITS: dict[str, str] = {}
_UNITS = ("%", "×100", "")
#: The one name a metric goes by in every report table header, figure label, units line and
#: console line (the key stays the name in code, the tidy table and MLflow). Where a paper
#: calls the same quantity otherwise (Mukhoti et al.'s AdaECE is the meta-regularisation
#: paper's ACE), a reproduced paper table says so in a note; docs/metrics.md lists them all.
METRIC_NAMES: dict[str, str] = {}
#: Metrics computed only when named (``keys=``, ``evaluation.metrics``, a report's
#: ``metrics:``), not by default: each costs O(N^2) kernel evaluations (docs/metrics.md).
ON_REQUEST: list[str] = []


def _register(
    key: str,
    compute: Callable[..., torch.Tensor],
    *,
    unit: str,
    name: str,
    on_request: bool = False,
) -> Callable[..., torch.Tensor]:
    """Register ``compute(pred: Predictions, **options) -> R-vector`` as metric ``key``,
    shown in reports in ``unit`` (see :data:`METRIC_UNITS`) under ``name``
    (:data:`METRIC_NAMES`; no two metrics share one); ``on_request`` leaves it out of the
    default suite (:data:`ON_REQUEST`).

    Returns the public function ``key(logits, labels, *, inputs="logits", **options)``
    with ``compute``'s documented options: it builds the metric (checking the options) and
    returns the 0-d value of the single run.
    """
    if unit not in _UNITS:
        raise TypeError(f"metric {key!r}: unit must be one of {_UNITS}, got {unit!r}")
    named = {shown: other for other, shown in METRIC_NAMES.items()}
    if name in named:
        raise TypeError(f"metric {key!r}: name {name!r} is already metric {named[name]!r}'s")
    options = list(inspect.signature(compute).parameters.values())[1:]
    defaults = {option.name: option.default for option in options}
    unchecked = sorted(set(defaults) - set(_OPTION_CHECKS))
    if unchecked:
        raise TypeError(f"metric {key!r} has option(s) {unchecked} without a check")
    nullable = {name for name, default in defaults.items() if default is None}

    def validate(**settings: Any) -> dict[str, Any]:
        return _checked_options(settings, nullable)

    def factory(**settings: Any) -> Metric:
        return Metric(key, compute, {**defaults, **validate(**settings)})

    factory.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        options, return_annotation=Metric
    )
    METRICS.register(key, validate=validate)(factory)
    METRIC_UNITS[key] = unit
    METRIC_NAMES[key] = name
    if on_request:
        ON_REQUEST.append(key)

    return _public_function(key, compute, options)


def _public_function(
    key: str, compute: Callable[..., torch.Tensor], options: list[inspect.Parameter]
) -> Callable[..., torch.Tensor]:
    """The public function ``key(logits, labels, *, inputs="logits", **options)`` of a
    registered metric, with ``compute``'s options in its signature and docstring."""

    def metric(
        logits: Any, labels: Any, *, inputs: str = "logits", **settings: Any
    ) -> torch.Tensor:
        return METRICS.build(key, **settings)(logits, labels, inputs=inputs)

    positional = inspect.Parameter.POSITIONAL_OR_KEYWORD
    metric.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter("logits", positional, annotation=Any),
            inspect.Parameter("labels", positional, annotation=Any),
            inspect.Parameter(
                "inputs", inspect.Parameter.KEYWORD_ONLY, default="logits", annotation=str
            ),
            *options,
        ],
        return_annotation=torch.Tensor,
    )
    metric.__name__ = metric.__qualname__ = key
    metric.__doc__ = (compute.__doc__ or "").rstrip() + _METRIC_ARGS_DOC
    return metric


accuracy = _register("accuracy", hard.accuracy, unit="%", name="Accuracy")
error = _register("error", hard.error, unit="%", name="Error")
nll = _register("nll", hard.nll, unit="", name="NLL")
brier = _register("brier", hard.brier, unit="×100", name="Brier")
mean_confidence = _register(
    "mean_confidence", hard.mean_confidence, unit="%", name="Mean confidence"
)
mean_entropy = _register("mean_entropy", hard.mean_entropy, unit="", name="Mean entropy")
ece = _register("ece", hard.ece, unit="%", name="ECE")
ece_em = _register("ece_em", hard.ece_em, unit="%", name="AdaECE")
mce = _register("mce", hard.mce, unit="%", name="MCE")
ece_l2 = _register("ece_l2", hard.ece_l2, unit="%", name="L2-ECE")
ece_lb = _register("ece_lb", hard.ece_lb, unit="%", name="LB-ECE")
classwise_ece = _register("classwise_ece", hard.classwise_ece, unit="%", name="Classwise-ECE")
overconfidence_error = _register(
    "overconfidence_error", hard.overconfidence_error, unit="%", name="Overconfidence error"
)
debiased_ece_l2 = _register(
    "debiased_ece_l2", hard.debiased_ece_l2, unit="%", name="Debiased L2-ECE"
)
auroc = _register("auroc", hard.auroc, unit="%", name="AUROC")
decomp_alpha = _register("decomp_alpha", hard.decomp_alpha, unit="%", name="α")
decomp_beta = _register("decomp_beta", hard.decomp_beta, unit="%", name="β")
decomp_gamma = _register("decomp_gamma", hard.decomp_gamma, unit="%", name="γ")
sece = _register("sece", soft.sece, unit="%", name="SECE")
sb_ece = _register("sb_ece", soft.sb_ece, unit="%", name="SB-ECE")
dece = _register("dece", soft.dece, unit="%", name="DECE")
smooth_ece = _register("smooth_ece", soft.smooth_ece, unit="%", name="smECE")
ks_error = _register("ks_error", hard.ks_error, unit="%", name="KS error")
aurc = _register("aurc", hard.aurc, unit="%", name="AURC")
augrc = _register("augrc", hard.augrc, unit="%", name="AUGRC")
skce = _register("skce", kernel_ce.skce, unit="", name="SKCE", on_request=True)
skce_p_value = _register(
    "skce_p_value", kernel_ce.skce_p_value, unit="", name="SKCE p-value", on_request=True
)
ece_kde = _register("ece_kde", kernel_ce.ece_kde, unit="%", name="ECE-KDE", on_request=True)
ece_kde_top = _register(
    "ece_kde_top", kernel_ce.ece_kde_top, unit="%", name="Top-label ECE-KDE", on_request=True
)


def metric_text(key: str, value: float, digits: int = 2) -> str:
    """``value`` (a fraction, as computed) of metric ``key`` as a console line or caption
    shows it: the metric's name (:data:`METRIC_NAMES`) and the number in its unit.

    >>> metric_text("accuracy", 0.98625), metric_text("brier", 0.1234), metric_text("nll", 0.3)
    ('Accuracy 98.62%', 'Brier 12.34 (×100)', 'NLL 0.30')
    """
    unit = METRIC_UNITS[key]
    number = f"{100 * value if unit else value:.{digits}f}"
    suffix = {"%": "%", "×100": " (×100)", "": ""}[unit]
    return f"{METRIC_NAMES[key]} {number}{suffix}"


#: Which way each metric improves, for marking the best value of a report table:
#: ``"lower"`` (errors, calibration errors, NLL, Brier), ``"higher"`` (accuracy, AUROC) or
#: ``None`` where neither value is better (mean confidence or entropy, the terms of the
#: ECE decomposition). Every registered metric must say (checked below), so a new metric
#: cannot be bolded the wrong way.
METRIC_DIRECTIONS: dict[str, str | None] = {
    "accuracy": "higher",
    "error": "lower",
    "nll": "lower",
    "brier": "lower",
    "mean_confidence": None,
    "mean_entropy": None,
    "ece": "lower",
    "ece_em": "lower",
    "mce": "lower",
    "ece_l2": "lower",
    "ece_lb": "lower",
    "classwise_ece": "lower",
    "overconfidence_error": "lower",
    "debiased_ece_l2": "lower",
    "auroc": "higher",
    "decomp_alpha": None,
    "decomp_beta": None,
    "decomp_gamma": None,
    "sece": "lower",
    "sb_ece": "lower",
    "dece": "lower",
    "smooth_ece": "lower",
    "ks_error": "lower",
    "aurc": "lower",
    "augrc": "lower",
    "skce": "lower",
    "skce_p_value": None,
    "ece_kde": "lower",
    "ece_kde_top": "lower",
}
if set(METRIC_DIRECTIONS) != set(METRICS.names()):
    raise RuntimeError(
        "METRIC_DIRECTIONS must name every registered metric exactly: missing "
        f"{sorted(set(METRICS.names()) - set(METRIC_DIRECTIONS))}, unknown "
        f"{sorted(set(METRIC_DIRECTIONS) - set(METRICS.names()))}"
    )


def build_metric(name: str, **options: Any) -> Metric:
    """The metric registered as ``name`` with ``options`` fixed (defaults for the rest).

    Raises:
        ValueError: unknown name (listing the valid ones), an option the metric does not
            have (listing those it has) or a bad option value (quoting it).

    Example:
        >>> ece_10 = build_metric("ece", n_bins=10)
        >>> ece_10
        Metric('ece', {'n_bins': 10, 'scheme': 'width', 'norm': 'l1', 'closure': 'right'})
        >>> round(float(ece_10([[2.0, 0.0], [0.0, 1.0]], [0, 0])), 3)
        0.425
        >>> build_metric("ece", bandwidth=0.1)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: metric 'ece' got unknown parameter(s) ['bandwidth']; it accepts: n_bins, ...
    """
    return METRICS.build(name, **options)


def metric_names() -> list[str]:
    """Keys of every metric, in the documented order."""
    return METRICS.names()


def default_metric_names() -> list[str]:
    """Keys of the default suite (what ``calibration_metrics`` computes without ``keys``):
    every metric but the :data:`ON_REQUEST` ones, in the documented order."""
    return [key for key in METRICS.names() if key not in ON_REQUEST]


def _accepted_options(key: str) -> list[str]:
    return list(inspect.signature(METRICS.factory(key)).parameters)


# --------------------------------------------------------------------------- suite entry points


def _build_suite(keys: Iterable[str] | None, n_bins: int, options: dict[str, Any]) -> list[Metric]:
    """The metrics ``keys`` (default: all), each given the ``options`` it accepts.

    ``n_bins`` goes to every binned metric; an option that no selected metric accepts
    raises ``ValueError``, as do unknown keys and bad values, before anything is computed.
    """
    if isinstance(keys, str):  # list("ece") would be ["e", "c", "e"]
        keys = [keys]
    keys = default_metric_names() if keys is None else list(keys)
    accepted = {key: _accepted_options(key) for key in keys}
    unknown = sorted(set(options) - {name for names in accepted.values() for name in names})
    if unknown:
        every = sorted({name for names in accepted.values() for name in names})
        raise ValueError(
            f"unknown option(s) {unknown}; the selected metrics accept: {', '.join(every)}"
        )
    options = {"n_bins": n_bins, **options}
    return [
        METRICS.build(key, **{name: options[name] for name in accepted[key] if name in options})
        for key in keys
    ]


def _score(suite: list[Metric], pred: Predictions) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        return {metric.key: metric.runs(pred) for metric in suite}


def calibration_metrics(
    logits: Any,
    labels: Any,
    *,
    n_bins: int = 15,
    inputs: str = "logits",
    keys: Iterable[str] | None = None,
    **options: Any,
) -> dict[str, float]:
    """The metrics (default: the default suite) of one run, as floats.

    Args:
        logits: N x K logits (or probabilities with ``inputs="probs"``), torch or NumPy.
        labels: N integer labels.
        n_bins: bin count for every binned metric (and the soft-binned ones).
        inputs: ``"logits"`` or ``"probs"``.
        keys: the metrics to compute, any of :func:`metric_names` (default: the default
            suite, :func:`default_metric_names`).
        **options: forwarded to each metric that accepts the keyword (``scheme``, ``norm``,
            ``closure``, ``bandwidth``, ``temperature``, ``tau_a``, ...); a keyword no
            selected metric accepts raises ``ValueError``. ``bandwidth`` is shared by
            ``sece``, ``smooth_ece`` and the kernel metrics (``skce``, ``ece_kde``, ...)
            -- compute them separately to set it per metric.

    Returns:
        ``{key: value}`` in :func:`metric_names` order (or the order of ``keys``).

    Example:
        >>> logits = [[2.0, 0.0, 0.0], [0.0, 1.5, 0.0], [0.5, 0.0, 0.0], [0.0, 0.0, 3.0]]
        >>> labels = [0, 1, 1, 2]
        >>> scores = calibration_metrics(logits, labels, n_bins=5, keys=["accuracy", "ece", "nll"])
        >>> {key: round(value, 3) for key, value in scores.items()}
        {'accuracy': 0.75, 'ece': 0.266, 'nll': 0.499}
        >>> calibration_metrics(logits, labels, keys=["ece"], scheme="quantile")
        Traceback (most recent call last):
        ...
        ValueError: scheme must be one of 'width', 'mass', got 'quantile'
    """
    suite = _build_suite(keys, n_bins, options)
    values = _score(suite, Predictions.single(logits, labels, inputs))
    return {key: float(value[0]) for key, value in values.items()}


def calibration_metrics_batched(
    logits: Any,
    labels: Any,
    *,
    n_bins: int = 15,
    inputs: str = "logits",
    keys: Iterable[str] | None = None,
    **options: Any,
) -> dict[str, np.ndarray]:
    """The metrics (default: the default suite) on R runs at once: logits R x N x K, labels
    N (shared) or R x N.

    Vectorised across runs (one bincount over run-offset bins for the binned metrics; only
    smooth_ece and the on-request kernel metrics loop over runs). Same options as
    :func:`calibration_metrics`.

    Returns:
        ``{key: float64 array of shape (R,)}``.
    """
    suite = _build_suite(keys, n_bins, options)
    values = _score(suite, Predictions.batched(logits, labels, inputs))
    return {key: value.cpu().to(torch.float64).numpy() for key, value in values.items()}


def reliability_bins(
    logits: Any,
    labels: Any,
    *,
    n_bins: int = 15,
    scheme: str = "width",
    closure: str = "right",
    inputs: str = "logits",
) -> dict[str, np.ndarray]:
    """Per-bin statistics of the top-label confidence, for reliability diagrams.

    Returns:
        ``edges`` (n_bins + 1), ``counts`` (int64), ``confidence`` (mean confidence per bin)
        and ``accuracy`` (fraction correct per bin); NaN for empty bins. Same binning as
        :func:`ece`.
    """
    binning = _checked_options({"n_bins": n_bins, "scheme": scheme, "closure": closure})
    pred = Predictions.single(logits, labels, inputs)
    edges, count, conf_sum, hits = binned(pred.confidence, pred.correct, **binning)
    empty = count == 0
    safe = count.clamp_min(1)
    nan = torch.full_like(conf_sum, float("nan"))
    return {
        "edges": edges[0].to(torch.float64).cpu().numpy(),
        "counts": count[0].to(torch.int64).cpu().numpy(),
        "confidence": torch.where(empty, nan, conf_sum / safe)[0].cpu().numpy(),
        "accuracy": torch.where(empty, nan, hits / safe)[0].cpu().numpy(),
    }


def bootstrap_ci(
    logits: Any,
    labels: Any,
    metric: str = "ece",
    *,
    n_resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    inputs: str = "logits",
    **options: Any,
) -> dict[str, float]:
    """Percentile bootstrap confidence interval of one metric over the samples.

    Resamples N samples with replacement ``n_resamples`` times (torch generator seeded with
    ``seed``) and scores the resamples as runs of the batched path, in blocks that bound
    memory; per-sample statistics are computed once and gathered.

    Returns:
        ``point`` (metric on the data), ``low``/``high`` (the (1 -+ level)/2 quantiles of
        the resampled values, NaN-ignoring), ``level``, ``n_resamples``.
    """
    scorer = METRICS.build(metric, **options)
    n_resamples = check_int("n_resamples", n_resamples, low=1)
    level = check_range("level", level, low=0, high=1, low_inclusive=False, high_inclusive=False)
    pred = Predictions.single(logits, labels, inputs)
    n, k = pred.n_samples, pred.n_classes
    generator = torch.Generator(device="cpu").manual_seed(seed)
    index = torch.randint(n, (n_resamples, n), generator=generator).to(pred.labels.device)
    block = max(1, 2**24 // (n * k))
    with torch.no_grad():
        point = float(scorer.runs(pred)[0])
        values = torch.cat(
            [scorer.runs(pred.resample(index[s : s + block])) for s in range(0, n_resamples, block)]
        )
    low, high = np.nanquantile(values.cpu().numpy(), [(1 - level) / 2, (1 + level) / 2])
    return {
        "point": point,
        "low": float(low),
        "high": float(high),
        "level": float(level),
        "n_resamples": int(n_resamples),
    }
