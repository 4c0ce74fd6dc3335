"""Post-hoc calibrators and the calibratability analyses of Wang et al. (2021).

Build a calibrator by registry name, fit it on validation logits, apply it anywhere::

    calibrator = build_calibrator("temperature_grid_ece", preset="wang")
    calibrator.fit(val_logits, val_labels)
    probabilities = calibrator.predict_proba(test_logits)   # float64, N x K
    calibrator.learned()                                    # {"temperature": ..., "ece": ...}

Registry names (``CALIBRATORS.names()``; details and defaults in ``docs/posthoc.md``):

- ``temperature_nll``, ``temperature_grid_ece``, ``temperature_sb_ece``,
  ``temperature_fixed`` — temperature scaling fitted by NLL, by a grid on val ECE, by
  SB-ECE, or fixed;
- ``histogram_binning``, ``isotonic_top_label``, ``platt_top_label``,
  ``scaling_binning`` — top-label confidence calibrators (the argmax never changes);
- ``isotonic_one_vs_rest``;
- ``vector_scaling``, ``matrix_scaling``, ``dirichlet``, ``dirichlet_cv`` — affine maps on
  logits or log-probabilities;
- ``ets``, ``irm`` (Zhang et al. 2020), ``spline`` (Gupta et al. 2021), ``bbq`` (Naeini et
  al. 2015), ``structured_vector_scaling``, ``structured_matrix_scaling`` (Berta et al. 2026),
  ``parameterized_ts`` (Tomani et al. 2022).

Every calibrator has ``fit(logits, labels) -> self``, ``predict_proba(logits)``,
``learned()``, ``converged``, ``warnings``, ``name`` and ``hyperparameters``; the
temperature, affine and parameterised-temperature calibrators also have
``transform_logits(logits)``.

``calibrator.state_dict()`` is the calibrator as plain data (tensors, numbers, strings,
lists, dicts) and ``calibrator_from_state(state)`` rebuilds it: stored with ``torch.save``
and read with ``torch.load(weights_only=True)``, a calibrator file cannot run code.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from calib_pipeline.calibration import metrics
from calib_pipeline.calibration._posthoc_affine import (
    DirichletCalibration,
    MatrixScaling,
    StructuredMatrixScaling,
    StructuredVectorScaling,
    VectorScaling,
)
from calib_pipeline.calibration._posthoc_base import (
    CALIBRATORS,
    STATE_FORMAT,
    Calibrator,
    LogitCalibrator,
    TopLabelCalibrator,
    redistribute_top_label,
)
from calib_pipeline.calibration._posthoc_bbq import BayesianBinningQuantiles
from calib_pipeline.calibration._posthoc_binning import (
    HistogramBinning,
    OneVsRestIsotonic,
    PlattScaling,
    ScalingBinning,
    TopLabelIsotonic,
)
from calib_pipeline.calibration._posthoc_mixnmatch import (
    EnsembleTemperatureScaling,
    MulticlassIsotonic,
)
from calib_pipeline.calibration._posthoc_parameterized import ParameterizedTemperatureScaling
from calib_pipeline.calibration._posthoc_spline import SplineCalibration
from calib_pipeline.calibration._posthoc_temperature import (
    TEMPERATURE_GRIDS,
    FixedTemperatureScaling,
    GridTemperatureScaling,
    NLLTemperatureScaling,
    SBECETemperatureScaling,
    fit_temperature_nll,
    temperature_grid,
)
from calib_pipeline.calibration.validation import check_logits_labels

# Every ``calibration/_posthoc_*.py`` module registers its calibrators when imported: import
# them all, so a new module is registered without an import line here (the named imports
# above are the public names re-exported from this module).
for _module in pkgutil.iter_modules([str(Path(__file__).resolve().parent)]):
    if _module.name.startswith("_posthoc_"):
        importlib.import_module(f"{__package__}.{_module.name}")

__all__ = [
    "CALIBRATORS",
    "STATE_FORMAT",
    "TEMPERATURE_GRIDS",
    "BayesianBinningQuantiles",
    "Calibrator",
    "DirichletCalibration",
    "EnsembleTemperatureScaling",
    "FixedTemperatureScaling",
    "GridTemperatureScaling",
    "HistogramBinning",
    "LogitCalibrator",
    "MatrixScaling",
    "MulticlassIsotonic",
    "NLLTemperatureScaling",
    "OneVsRestIsotonic",
    "ParameterizedTemperatureScaling",
    "PlattScaling",
    "SBECETemperatureScaling",
    "ScalingBinning",
    "SplineCalibration",
    "StructuredMatrixScaling",
    "StructuredVectorScaling",
    "TopLabelCalibrator",
    "TopLabelIsotonic",
    "VectorScaling",
    "build_calibrator",
    "calibrated_scores",
    "calibrator_from_state",
    "fit_temperature_nll",
    "oracle_temperature",
    "redistribute_top_label",
    "stratified_subsample",
    "temperature_grid",
    "validation_size_sweep",
]


def build_calibrator(name: str, **hyperparameters: Any) -> Calibrator:
    """An unfitted calibrator by registry name.

    Raises:
        ValueError: unknown name (the message lists the valid ones), unknown
            hyperparameter (lists the accepted ones) or a value out of range.

    Example:
        >>> logits = torch.tensor([[4.0, 0.0], [3.0, 1.0], [0.0, 2.0], [2.0, 0.0], [0.0, 5.0]])
        >>> calibrator = build_calibrator("temperature_nll").fit(logits, [0, 1, 1, 0, 1])
        >>> round(calibrator.temperature, 3)
        1.692
        >>> probabilities = calibrator.predict_proba(logits[:2])
        >>> [[round(p, 3) for p in row] for row in probabilities.tolist()]
        [[0.914, 0.086], [0.765, 0.235]]
        >>> build_calibrator("temperature_nll", t_min=0.0)
        Traceback (most recent call last):
        ...
        ValueError: t_min must be in [1e-06, 1000000.0], got 0.0
    """
    return CALIBRATORS.build(name, **hyperparameters)


def calibrator_from_state(state: dict[str, Any]) -> Calibrator:
    """The calibrator whose ``state_dict()`` is ``state``, rebuilt by registry name.

    The calibrator is built with ``build_calibrator(state["name"], **state["arguments"])``
    and its fit restored with ``load_state_dict``: it predicts, and reports what it
    learned, exactly as the calibrator that was stored. Nothing in ``state`` is imported
    or called.

    Raises:
        ValueError: ``state`` is not a calibrator state, names an unknown calibrator, or
            holds arguments or fitted values the calibrator does not accept.

    Example:
        >>> logits = torch.tensor([[4.0, 0.0], [3.0, 1.0], [0.0, 2.0], [2.0, 0.0], [0.0, 5.0]])
        >>> fitted = build_calibrator("temperature_nll").fit(logits, [0, 1, 1, 0, 1])
        >>> state = fitted.state_dict()
        >>> state["name"], round(state["fitted"]["temperature"], 3)
        ('temperature_nll', 1.692)
        >>> restored = calibrator_from_state(state)
        >>> torch.equal(restored.predict_proba(logits), fitted.predict_proba(logits))
        True
    """
    arguments = state.get("arguments") if isinstance(state, dict) else None
    if not (
        isinstance(arguments, dict)
        and isinstance(state.get("name"), str)
        and all(isinstance(key, str) for key in arguments)
    ):
        raise ValueError(
            "not a calibrator state: expected a dict with the registry 'name' of a calibrator "
            "and its 'arguments' by keyword"
        )
    return build_calibrator(state["name"], **arguments).load_state_dict(state)


def calibrated_scores(calibrator: Calibrator, logits: Tensor | np.ndarray) -> tuple[Tensor, str]:
    """Calibrated logits where the calibrator has them, else probabilities.

    Returns:
        ``(scores, inputs)`` with ``inputs`` ``"logits"`` or ``"probs"``, ready for the
        metrics' ``inputs=`` argument.
    """
    if isinstance(calibrator, LogitCalibrator):
        return calibrator.transform_logits(logits), "logits"
    return calibrator.predict_proba(logits), "probs"


def stratified_subsample(labels: Tensor, size: int, seed: int) -> Tensor:
    """Indices of a class-stratified random subsample of ``size`` rows.

    Class ``c`` with ``n_c`` of the ``N`` rows gets ``floor(size·n_c/N)`` rows; each of the
    remaining rows goes to a class drawn (with ``seed``, without replacement) with
    probability proportional to its fractional part -- so a ``size`` below the number of
    classes samples *which* classes at random instead of always the most frequent (or the
    lowest-numbered) ones; rows within a class are drawn uniformly with ``seed``.

    Args:
        labels: int64 labels (N,).
        size: subsample size, ``1 <= size <= N``.
        seed: seed of the draw.

    Returns:
        int64 indices (size,), grouped by class.
    """
    n = labels.numel()
    counts = torch.bincount(labels)
    quota = counts.to(torch.float64) * size / n
    take = torch.floor(quota).long()
    leftover = size - int(take.sum())
    generator = torch.Generator().manual_seed(seed)
    if leftover:
        fraction = quota - take
        take[torch.multinomial(fraction, leftover, replacement=False, generator=generator)] += 1
    shuffle = torch.randperm(n, generator=generator)
    shuffled = labels[shuffle]
    grouped = torch.argsort(shuffled, stable=True)
    grouped_labels = shuffled[grouped]
    class_start = torch.cumsum(counts, 0) - counts
    rank_in_class = torch.arange(n) - class_start[grouped_labels]
    return shuffle[grouped[rank_in_class < take[grouped_labels]]]


def _checked_sweep_data(
    val_logits: Tensor | np.ndarray,
    val_labels: Tensor | np.ndarray,
    test_logits: Tensor | np.ndarray,
    test_labels: Tensor | np.ndarray,
    sizes: Sequence[int],
    seeds: Sequence[int],
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The validated logits and labels of :func:`validation_size_sweep`; checks its sizes
    against the validation set and its seeds."""
    val_z, val_y = check_logits_labels(val_logits, val_labels)
    test_z, test_y = check_logits_labels(test_logits, test_labels)
    if val_z.shape[1] != test_z.shape[1]:
        raise ValueError(
            f"validation logits have {val_z.shape[1]} classes "
            f"but test logits have {test_z.shape[1]}"
        )
    n_val = val_z.shape[0]
    bad_sizes = [s for s in sizes if isinstance(s, bool) or int(s) != s or not 1 <= s <= n_val]
    if bad_sizes or not sizes:
        raise ValueError(
            f"sizes must be a non-empty list of integers in [1, {n_val}], got {list(sizes)}"
        )
    bad_seeds = [s for s in seeds if isinstance(s, bool) or int(s) != s or s < 0]
    if bad_seeds or not seeds:
        raise ValueError(
            f"seeds must be a non-empty list of non-negative integers, got {list(seeds)}"
        )
    return val_z, val_y, test_z, test_y


def _subsample(labels: Tensor, size: int, seed: int, stratified: bool) -> Tensor:
    """Indices of ``size`` rows: :func:`stratified_subsample`, or a uniform draw."""
    if stratified:
        return stratified_subsample(labels, size, seed)
    generator = torch.Generator().manual_seed(seed)
    return torch.randperm(labels.numel(), generator=generator)[:size]


def validation_size_sweep(
    name: str,
    val_logits: Tensor | np.ndarray,
    val_labels: Tensor | np.ndarray,
    test_logits: Tensor | np.ndarray,
    test_labels: Tensor | np.ndarray,
    *,
    sizes: Sequence[int],
    seeds: Sequence[int],
    metric: str = "ece",
    stratified: bool = True,
    **hyperparameters: Any,
) -> list[dict[str, Any]]:
    """Test-set calibration after fitting on subsamples of the validation set (Wang Fig. 3).

    For each ``size`` and ``seed``, calibrator ``name`` is fitted on a subsample of the
    validation set (``stratified_subsample``, or a uniform draw when
    ``stratified=False``) and ``metrics.<metric>`` is computed on its test output.
    Everything is validated before the first fit.

    Args:
        name, hyperparameters: the calibrator (as for ``build_calibrator``).
        val_logits, val_labels, test_logits, test_labels: N×K logits and labels.
        sizes: subsample sizes, each in ``[1, N_val]``.
        seeds: subsample seeds (non-negative integers).
        metric: a key of ``calib_pipeline.calibration.metrics.metric_names()``, scored with
            its default options.
        stratified: stratify the subsamples by class.

    Returns:
        One row per (size, seed): ``calibrator, size, seed, metric, value,
        temperature`` (``None`` for calibrators without one), ``converged``,
        ``warnings`` (joined with ``"; "``).

    Raises:
        ValueError: invalid logits/labels, val and test with different class counts,
            a size outside ``[1, N_val]``, an unknown metric or calibrator.
    """
    build_calibrator(name, **hyperparameters)
    score = metrics.build_metric(metric)
    val_z, val_y, test_z, test_y = _checked_sweep_data(
        val_logits, val_labels, test_logits, test_labels, sizes, seeds
    )
    val_y_cpu = val_y.cpu()
    rows = []
    for size in sizes:
        for seed in seeds:
            index = _subsample(val_y_cpu, int(size), int(seed), stratified).to(val_z.device)
            calibrator = build_calibrator(name, **hyperparameters).fit(val_z[index], val_y[index])
            scores, inputs = calibrated_scores(calibrator, test_z)
            value = float(score(scores, test_y, inputs=inputs))
            rows.append(_sweep_row(name, calibrator, int(size), int(seed), metric, value))
    return rows


def _sweep_row(
    name: str, calibrator: Calibrator, size: int, seed: int, metric: str, value: float
) -> dict[str, Any]:
    """A row of :func:`validation_size_sweep`: the fit's score and how the fit went."""
    return {
        "calibrator": name,
        "size": size,
        "seed": seed,
        "metric": metric,
        "value": value,
        "temperature": getattr(calibrator, "temperature", None),
        "converged": calibrator.converged,
        "warnings": "; ".join(calibrator.warnings),
    }


def oracle_temperature(
    logits: Tensor | np.ndarray,
    labels: Tensor | np.ndarray,
    *,
    grid: str | Sequence[float] = "wang",
    n_bins: int = 15,
) -> dict[str, Any]:
    """ORACLE bound: the temperature minimising ECE on the evaluation set itself.

    Wang et al.'s "optimal ECE" (Fig. 4): T is searched on the very logits it is scored
    on, so the result is a lower bound on what any validation-fitted temperature can
    reach — report it apart from validation-fitted numbers, never mixed with them.

    Args:
        logits, labels: the evaluation set (N×K, N).
        grid: a preset of ``TEMPERATURE_GRIDS`` (default ``"wang"``: 0.01…10 step 0.01)
            or ``(start, stop, step)``.
        n_bins: ECE bins.

    Both ECEs are computed on float32 logits, as the grid search scores them.

    Returns:
        ``{"oracle": True, "oracle_temperature", "oracle_ece", "uncalibrated_ece",
        "at_grid_bound", "grid_start", "grid_stop", "grid_step", "n_bins"}``.
    """
    if isinstance(grid, str):
        calibrator = build_calibrator("temperature_grid_ece", preset=grid, n_bins=n_bins)
    else:
        start, stop, step = grid
        calibrator = build_calibrator(
            "temperature_grid_ece", start=start, stop=stop, step=step, n_bins=n_bins
        )
    z, y = check_logits_labels(logits, labels)
    calibrator.fit(z, y)
    options = calibrator.hyperparameters
    return {
        "oracle": True,
        "oracle_temperature": calibrator.temperature,
        "oracle_ece": calibrator.objective,
        "uncalibrated_ece": float(metrics.ece(z.detach().to(torch.float32), y, n_bins=n_bins)),
        "at_grid_bound": calibrator.at_bound,
        "grid_start": options["start"],
        "grid_stop": options["stop"],
        "grid_step": options["step"],
        "n_bins": n_bins,
    }
