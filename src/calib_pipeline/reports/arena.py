"""The calibrator arena: every calibrator on every prediction set, ranked by its post-hoc
improvement, as CalArena (Berta, Holzmüller, Bach & Jordan, arXiv 2605.30188) ranks them.

A *run* is a model's validation and test scores (a (method, seed) run's cached logits, or a
predictions file); each calibrator is fitted once on the run's validation split and scored
on each of its test sets -- the clean test split and, optionally, its shifted test sets. A
*prediction set* is one (run, test set). Computation and drawing are apart:

- :func:`arena_scores` fits and scores: one tidy row per (set, calibrator, metric) with the
  uncalibrated value and the post-hoc improvement; a calibrator that cannot fit a set is a
  row with its status and reason, never left out;
- :func:`arena_tables` ranks: mean PHI, mean rank, win rate against the field and pairwise
  win rates, with bootstrap intervals over the runs, overall and per training method;
- :func:`arena_report` adds the leaderboard figure and the summary.

Post-hoc improvement (PHI) of calibrator ``c`` on set ``s`` in score ``L``: ``L(uncalibrated)
- L(c)`` for a lower-is-better score (the other way round for a higher-is-better metric), in
the score's own units: positive when calibrating helped. This is CalArena's improvement over
its ``Base-model`` (``compute_absolute_improvements`` in probkit/CalArena, which prints it
×100); the relative PHI divides it by the uncalibrated score. No Kedro here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from torch import Tensor

from calib_pipeline.calibration.metrics import METRIC_DIRECTIONS, calibration_metrics, metric_names
from calib_pipeline.calibration.posthoc import (
    CALIBRATORS,
    Calibrator,
    build_calibrator,
    calibrated_scores,
)
from calib_pipeline.calibration.predictions import PredictionsFile, log_probabilities
from calib_pipeline.reports.common import UNCALIBRATED, metric_name

if TYPE_CHECKING:
    from matplotlib.figure import Figure

logger = logging.getLogger(__name__)

#: The test split of a run; its shifted test sets are named by their shift key.
CLEAN_TEST = "test"
OK, FAILED, NOT_APPLICABLE = "ok", "failed", "not applicable"
SCORE_COLUMNS = (
    "set",
    "run",
    "method",
    "test_set",
    "calibrator",
    "status",
    "reason",
    "metric",
    "value",
    "uncalibrated",
    "phi",
    "phi_relative",
)


class NoPredictionSetsError(ValueError):
    """The arena was given no prediction set to rank calibrators on."""


@dataclass(frozen=True)
class ArenaRun:
    """One model's predictions: what calibrators fit on and the test sets they are scored on.

    Attributes:
        name: the run's name, e.g. ``focal_gamma_3.seed_0`` or ``score.<file name>``.
        method: the training method, which the per-method tables group by.
        val: validation ``(scores, labels)``.
        tests: test set name -> ``(scores, labels)``: ``test`` and any shifted test sets.
        inputs: ``"logits"`` or ``"probs"`` (a predictions file of probabilities: calibrators
            fit on log-probabilities, and those that need logits are not applicable).
    """

    name: str
    method: str
    val: tuple[Tensor, Tensor]
    tests: dict[str, tuple[Tensor, Tensor]] = field(default_factory=dict)
    inputs: str = "logits"

    def calibration_logits(self, scores: Tensor) -> Tensor:
        """What calibrators transform: the logits, or log-probabilities of probabilities."""
        return scores if self.inputs == "logits" else log_probabilities(scores)

    @classmethod
    def from_predictions(cls, name: str, predictions: PredictionsFile) -> ArenaRun:
        """The run of a predictions file (``score`` pipeline's layout), method ``score``."""
        scores, labels = predictions.scores, predictions.labels
        return cls(
            name,
            "score",
            (scores["val"], labels["val"]),
            {CLEAN_TEST: (scores["test"], labels["test"])},
            predictions.inputs,
        )

    def set_name(self, test_set: str) -> str:
        """The prediction set's name: the run's for its clean test split, else
        ``<run>/<test set>``."""
        return self.name if test_set == CLEAN_TEST else f"{self.name}/{test_set}"


def check_arena_metrics(metrics: Sequence[str], rank_by: Sequence[str]) -> None:
    """Refuse metrics the arena cannot rank or improve on, naming the valid ones.

    Raises:
        ValueError: an unknown metric, one without a better direction (an improvement needs
            one), an empty ``rank_by`` or a ``rank_by`` score not among ``metrics``.
    """
    directed = [m for m in metric_names() if METRIC_DIRECTIONS.get(m)]
    bad = [m for m in metrics if m not in directed]
    if bad:
        raise ValueError(
            f"posthoc_arena.metrics {bad} are not metrics with a better direction; valid: "
            f"{directed}"
        )
    if not rank_by or any(m not in metrics for m in rank_by):
        raise ValueError(
            f"posthoc_arena.rank_by {list(rank_by)} must name one or more of posthoc_arena.metrics "
            f"{list(metrics)}"
        )


@dataclass(frozen=True)
class RankOptions:
    """How :func:`arena_tables` ranks: the scores to rank by (the first orders the tables)
    and the bootstrap of the win rates' intervals."""

    rank_by: tuple[str, ...] = ("nll", "brier")
    n_resamples: int = 1000
    level: float = 0.95
    seed: int = 0


#: The metrics scored when ``posthoc_arena.metrics`` is not given: the two proper scores,
#: ECE variants and accuracy (which a calibrator that keeps the argmax leaves unchanged).
DEFAULT_METRICS = ("nll", "brier", "ece", "ece_em", "classwise_ece", "accuracy")
ARENA_KEYS = ("calibrators", "metrics", "rank_by", "shifted", "ci_resamples", "ci_level", "ci_seed")


@dataclass(frozen=True)
class ArenaOptions:
    """The ``posthoc_arena`` parameters, checked (:meth:`from_params`).

    Attributes:
        calibrators: entrant key -> ``{"name": registry name, "params": {...}}``.
        metrics: the metrics scored on every set (each with a better direction).
        rank: what the tables rank by and the bootstrap of their intervals.
        shifted: whether each run's shifted test sets are prediction sets too.
    """

    calibrators: dict[str, dict[str, Any]]
    metrics: tuple[str, ...]
    rank: RankOptions
    shifted: bool = False

    @classmethod
    def from_params(
        cls, entry: Mapping[str, Any] | None, calibrators: Mapping[str, Any]
    ) -> ArenaOptions:
        """Check ``posthoc_arena`` against the ``calibrators`` parameters and the registries.

        ``calibrators: null`` enters every registered calibrator with its defaults; a list
        names keys of the ``calibrators`` parameters (with their hyperparameters) or
        registry names (defaults).

        Raises:
            ValueError: an unknown key, calibrator or metric (the message lists the valid
                ones), or a calibrator whose hyperparameters its registry refuses.
        """
        entry = dict(entry or {})
        unknown = sorted(set(entry) - set(ARENA_KEYS))
        if unknown:
            raise ValueError(f"posthoc_arena: unknown key(s) {unknown}; valid: {list(ARENA_KEYS)}")
        metrics = tuple(entry.get("metrics") or DEFAULT_METRICS)
        rank_by = tuple(entry.get("rank_by") or RankOptions.rank_by)
        check_arena_metrics(metrics, rank_by)
        level = float(entry.get("ci_level", 0.95))
        resamples = int(entry.get("ci_resamples", 1000))
        if not 0 < level < 1 or resamples < 1:
            raise ValueError(
                f"posthoc_arena: ci_level must be in (0, 1) and ci_resamples >= 1, got {level} "
                f"and {resamples}"
            )
        shifted = entry.get("shifted", False)
        if not isinstance(shifted, bool):
            raise ValueError(f"posthoc_arena.shifted must be true or false, got {shifted!r}")
        rank = RankOptions(rank_by, resamples, level, int(entry.get("ci_seed", 0)))
        return cls(_entrants(entry.get("calibrators"), calibrators), metrics, rank, shifted)

    def factories(self) -> dict[str, Callable[[], Calibrator]]:
        """Entrant key -> a function building it unfitted."""
        return {
            key: partial(build_calibrator, spec["name"], **(spec.get("params") or {}))
            for key, spec in self.calibrators.items()
        }


def _entrants(
    requested: Sequence[str] | None, configured: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    """The arena's calibrators: every registered one (``None``) or those named."""
    if requested is None:
        requested = CALIBRATORS.names()
    if isinstance(requested, str) or not requested:
        raise ValueError(
            f"posthoc_arena.calibrators must be a non-empty list or null, got {requested!r}"
        )
    entrants = {}
    for key in requested:
        if key == UNCALIBRATED:
            raise ValueError(f"posthoc_arena.calibrators: {key!r} names the uncalibrated model")
        if key in configured:
            spec = dict(configured[key])
        elif key in CALIBRATORS:
            spec = {"name": key}
        else:
            raise ValueError(
                f"posthoc_arena.calibrators: {key!r} is neither a key of the calibrators "
                f"parameters ({sorted(configured)}) nor a registered calibrator "
                f"({CALIBRATORS.names()})"
            )
        try:
            build_calibrator(spec["name"], **(spec.get("params") or {}))
        except ValueError as error:
            raise ValueError(f"posthoc_arena.calibrators: {key!r}: {error}") from None
        entrants[key] = spec
    return entrants


# --- fit and score ------------------------------------------------------------------------


def _fitted(factory: Callable[[], Calibrator], run: ArenaRun) -> tuple[Calibrator | None, str, str]:
    """The calibrator fitted on the run's val split, or None with its status and reason."""
    calibrator = factory()
    if run.inputs == "probs" and calibrator.needs_logits:
        return None, NOT_APPLICABLE, "maps logits; the run holds probabilities"
    scores, labels = run.val
    try:
        calibrator.fit(run.calibration_logits(scores), labels)
    except (ValueError, RuntimeError, ArithmeticError) as error:
        return None, FAILED, f"fit: {type(error).__name__}: {error}"
    return calibrator, OK, "; ".join(calibrator.warnings)


def _scored(
    calibrator: Calibrator, run: ArenaRun, test: tuple[Tensor, Tensor], **metric_options: Any
) -> tuple[dict[str, float] | None, str]:
    """The calibrated test scores' metrics, or None with the reason they could not be had."""
    try:
        scores, inputs = calibrated_scores(calibrator, run.calibration_logits(test[0]))
        values = calibration_metrics(scores, test[1], inputs=inputs, **metric_options)
    except (ValueError, RuntimeError, ArithmeticError) as error:
        return None, f"predict: {type(error).__name__}: {error}"
    undefined = [metric for metric, value in values.items() if np.isnan(value)]
    if undefined:
        return None, f"predict: {', '.join(undefined)} undefined (NaN) on the calibrated scores"
    # an infinite NLL (a label given probability 0) is a score, the worst: it stays and loses
    infinite = [metric for metric, value in values.items() if np.isinf(value)]
    return values, f"infinite {', '.join(infinite)}" if infinite else ""


def _rows(
    run: ArenaRun, test_set: str, calibrator: str, status: str, reason: str, values, baseline
) -> list[dict[str, Any]]:
    rows = []
    for metric, base in baseline.items():
        value = values[metric] if values is not None else np.nan
        gain = base - value if METRIC_DIRECTIONS[metric] == "lower" else value - base
        rows.append(
            {
                "set": run.set_name(test_set),
                "run": run.name,
                "method": run.method,
                "test_set": test_set,
                "calibrator": calibrator,
                "status": status,
                "reason": reason,
                "metric": metric,
                "value": value,
                "uncalibrated": base,
                "phi": gain,
                "phi_relative": gain / abs(base) if base != 0 else np.nan,
            }
        )
    return rows


def _run_rows(
    run: ArenaRun, calibrators: Mapping[str, Callable[[], Calibrator]], options: dict[str, Any]
) -> list[dict[str, Any]]:
    """Every calibrator of ``calibrators`` on every test set of ``run``."""
    baselines = {
        name: calibration_metrics(scores, labels, inputs=run.inputs, **options)
        for name, (scores, labels) in run.tests.items()
    }
    rows = []
    for name, baseline in baselines.items():
        rows += _rows(run, name, UNCALIBRATED, OK, "", baseline, baseline)
    for key, factory in calibrators.items():
        calibrator, status, reason = _fitted(factory, run)
        if calibrator is None:
            logger.warning("%s: calibrator %s %s (%s)", run.name, key, status, reason)
        for name, baseline in baselines.items():
            values, test_status, test_reason = None, status, reason
            if calibrator is not None:
                values, note = _scored(calibrator, run, run.tests[name], **options)
                test_status = OK if values is not None else FAILED
                test_reason = "; ".join(r for r in (reason, note) if r)
            rows += _rows(run, name, key, test_status, test_reason, values, baseline)
    return rows


def arena_scores(
    runs: Iterable[ArenaRun],
    calibrators: Mapping[str, Callable[[], Calibrator]],
    metrics: Sequence[str],
    *,
    n_bins: int = 15,
) -> pd.DataFrame:
    """Fit every calibrator on every run's val split and score it on each of its test sets.

    Args:
        runs: the runs (consumed one at a time: a lazily loaded collection stays small).
        calibrators: key -> a function building the unfitted calibrator.
        metrics: metric keys with a direction (:func:`check_arena_metrics`).
        n_bins: bins of the binned metrics.

    Returns:
        The tidy table of :data:`SCORE_COLUMNS`: one row per (set, calibrator, metric), the
        uncalibrated scores as calibrator ``none``; a calibrator that failed (or does not
        apply) on a set has its status, its reason and NaN values.

    Raises:
        NoPredictionSetsError: no run has a test set.
    """
    options = {"keys": list(metrics), "n_bins": n_bins}
    rows: list[dict[str, Any]] = []
    for run in runs:
        rows += _run_rows(run, calibrators, options)
    if not rows:
        raise NoPredictionSetsError("the calibrator arena got no prediction set")
    return pd.DataFrame(rows, columns=list(SCORE_COLUMNS))


# --- rank ---------------------------------------------------------------------------------


def set_losses(scores: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Sets x calibrators of ``metric``, oriented so that lower is better (NaN: failed)."""
    table = scores[scores["metric"] == metric].pivot_table(
        index="set", columns="calibrator", values="value", aggfunc="first", dropna=False, sort=False
    )
    order = list(dict.fromkeys(scores["calibrator"]))
    table = table.reindex(columns=order)
    return table if METRIC_DIRECTIONS[metric] == "lower" else -table


def pairwise_wins(losses: np.ndarray) -> np.ndarray:
    """``W[s, a, b]``: 1 where ``a`` beats ``b`` on set ``s`` (lower loss), ½ for a tie, 0
    else; a failed calibrator (NaN) loses to every one that ran and ties another failure."""
    filled = np.where(np.isnan(losses), np.inf, losses)
    a, b = filled[:, :, None], filled[:, None, :]
    return (a < b) + 0.5 * (a == b)


def mean_ranks(losses: np.ndarray) -> np.ndarray:
    """Each calibrator's rank on each set (1 best, ties averaged, failures last), averaged
    over the sets; equal to ``1 + (C - 1) x (1 - win rate against the field)``."""
    wins = pairwise_wins(losses)
    return (1.0 + (1.0 - wins).sum(axis=2) - 0.5).mean(axis=0)


def bootstrap_weights(groups: Sequence[str], n_resamples: int, seed: int) -> np.ndarray:
    """``n_resamples`` x sets weights of a bootstrap over the groups (the runs): each
    resample draws as many groups as there are, with replacement, and a set counts as
    often as its group was drawn (a block bootstrap: a run's shifted sets go together)."""
    codes, uniques = pd.factorize(pd.Series(list(groups)))
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(uniques), size=(n_resamples, len(uniques)))
    counts = np.stack([np.bincount(d, minlength=len(uniques)) for d in draws])
    return counts[:, codes].astype(float)


@dataclass(frozen=True)
class WinRates:
    """Win rates over the sets: ``pairwise[a, b]`` of ``a`` against ``b`` with percentile
    bootstrap bounds, and ``field[a]`` (against every other entrant, CalArena's win rate)."""

    pairwise: np.ndarray
    pairwise_low: np.ndarray
    pairwise_high: np.ndarray
    field: np.ndarray
    field_low: np.ndarray
    field_high: np.ndarray


def win_rates(
    losses: np.ndarray, groups: Sequence[str], n_resamples: int, level: float, seed: int
) -> WinRates:
    """Pairwise and field win rates of ``losses`` (sets x entrants) with bootstrap intervals
    at ``level`` over the ``groups`` of the sets (:func:`bootstrap_weights`)."""
    sets, entrants = losses.shape
    wins = pairwise_wins(losses).reshape(sets, entrants * entrants)
    weights = bootstrap_weights(groups, n_resamples, seed)
    boot = (weights @ wins / weights.sum(axis=1, keepdims=True)).reshape(-1, entrants, entrants)
    point = wins.mean(axis=0).reshape(entrants, entrants)

    def field(matrix: np.ndarray) -> np.ndarray:
        return (matrix.sum(axis=-1) - 0.5) / max(entrants - 1, 1)

    tail = 100 * (1 - level) / 2
    low, high = np.percentile(boot, [tail, 100 - tail], axis=0)
    field_low, field_high = np.percentile(field(boot), [tail, 100 - tail], axis=0)
    return WinRates(point, low, high, field(point), field_low, field_high)


def _score_columns(
    scores: pd.DataFrame, metric: str, entrants: list[str], options: RankOptions
) -> tuple[pd.DataFrame, WinRates]:
    """Mean rank and field win rate (with its interval) of each entrant in ``metric``."""
    losses = set_losses(scores, metric)
    groups = scores.drop_duplicates("set").set_index("set").loc[losses.index, "run"]
    rates = win_rates(
        losses[entrants].to_numpy(), list(groups), options.n_resamples, options.level, options.seed
    )
    columns = pd.DataFrame(
        {
            f"rank_{metric}": mean_ranks(losses[entrants].to_numpy()),
            f"win_{metric}": rates.field,
            f"win_{metric}_low": rates.field_low,
            f"win_{metric}_high": rates.field_high,
        },
        index=entrants,
    )
    return columns, rates


def leaderboard(scores: pd.DataFrame, options: RankOptions) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The leaderboard of ``scores`` (every entrant, ``none`` included) and its pairwise
    win rates in each ``rank_by`` score.

    Returns:
        ``(board, pairwise)``: per calibrator the sets it ran on and failed on, the mean PHI
        (and relative PHI) of every metric over the sets it ran on, and per ``rank_by``
        score the mean rank and the field win rate with its interval, best first; and the
        long table (calibrator, opponent, score, win_rate, ci_low, ci_high).
    """
    entrants = list(dict.fromkeys(scores["calibrator"]))
    ran = scores[scores["status"] == OK]
    per_set = scores.drop_duplicates(["set", "calibrator"])
    board = pd.DataFrame(index=pd.Index(entrants, name="calibrator"))
    board["n_sets"] = per_set.groupby("calibrator")["set"].size().reindex(entrants)
    board["n_failed"] = (per_set["status"] != OK).groupby(per_set["calibrator"]).sum()
    for metric in dict.fromkeys(scores["metric"]):
        mine = ran[ran["metric"] == metric].groupby("calibrator")
        board[f"phi_{metric}"] = mine["phi"].mean()
        if metric in options.rank_by:  # the median: a few blown-up fits dominate a mean
            board[f"phi_{metric}_median"] = mine["phi"].median()
            board[f"phi_{metric}_relative"] = mine["phi_relative"].mean()
    pairwise = []
    for metric in options.rank_by:
        columns, rates = _score_columns(scores, metric, entrants, options)
        board = board.join(columns)
        pairwise.append(_pairwise_table(entrants, metric, rates))
    first = options.rank_by[0]
    board = board.sort_values([f"win_{first}", f"phi_{first}"], ascending=False)
    return board.reset_index(), pd.concat(pairwise, ignore_index=True)


def _pairwise_table(entrants: list[str], metric: str, rates: WinRates) -> pd.DataFrame:
    rows = [
        {
            "calibrator": a,
            "opponent": b,
            "score": metric,
            "win_rate": rates.pairwise[i, j],
            "ci_low": rates.pairwise_low[i, j],
            "ci_high": rates.pairwise_high[i, j],
        }
        for i, a in enumerate(entrants)
        for j, b in enumerate(entrants)
        if i != j
    ]
    return pd.DataFrame(rows)


def arena_tables(scores: pd.DataFrame, options: RankOptions) -> dict[str, pd.DataFrame]:
    """The arena's tables from :func:`arena_scores`' table.

    Returns:
        ``leaderboard`` and ``pairwise`` over every set (:func:`leaderboard`);
        ``by_method``, the leaderboard of each training method's sets (a ``method``
        column first); ``failures``, each (set, calibrator) that did not run, with why.
    """
    board, pairwise = leaderboard(scores, options)
    by_method = pd.concat(
        [
            leaderboard(scores[scores["method"] == method], options)[0].assign(method=method)
            for method in dict.fromkeys(scores["method"])
        ],
        ignore_index=True,
    )
    by_method = by_method[["method", *board.columns]]
    failed = scores[scores["status"] != OK].drop_duplicates(["set", "calibrator"])
    failures = failed[["set", "method", "calibrator", "status", "reason"]].reset_index(drop=True)
    return {
        "leaderboard": board,
        "pairwise": pairwise,
        "by_method": by_method,
        "failures": failures,
    }


# --- draw ---------------------------------------------------------------------------------


def leaderboard_figure(board: pd.DataFrame, rank_by: Sequence[str]) -> Figure:
    """One panel per ``rank_by`` score: each calibrator's win rate against the field with
    its bootstrap interval, best on top; the uncalibrated model's as a dashed line (as
    CalArena draws its ``Base-model``)."""
    from matplotlib.figure import Figure

    entrants = board[board["calibrator"] != UNCALIBRATED]
    fig = Figure(
        figsize=(3.2 * len(rank_by) + 1.2, 0.3 * len(entrants) + 1.4), layout="constrained"
    )
    axes = fig.subplots(1, len(rank_by), sharey=True, squeeze=False)[0]
    order = entrants.iloc[::-1]
    for ax, metric in zip(axes, rank_by):
        rate = order[f"win_{metric}"].to_numpy()
        errors = [rate - order[f"win_{metric}_low"], order[f"win_{metric}_high"] - rate]
        ax.barh(order["calibrator"], rate, xerr=errors, color="#4C72B0", capsize=2)
        base = board.loc[board["calibrator"] == UNCALIBRATED, f"win_{metric}"]
        if len(base):
            ax.axvline(base.iloc[0], color="black", linestyle="--", label="uncalibrated")
        ax.set_xlim(0, 1)
        ax.set_xlabel(f"win rate in {metric_name(metric)}")
        ax.grid(axis="x", alpha=0.3)
    axes[0].legend(fontsize=7, loc="lower right")
    fig.suptitle("Calibrator arena: win rate against every other entrant", fontsize=9)
    return fig


def phi_by_method_figure(by_method: pd.DataFrame, metric: str, order: Sequence[str]) -> Figure:
    """Mean PHI in ``metric`` per training method (rows) and calibrator (columns, in
    ``order``), each cell annotated: which calibrator helps which training most. The colour
    scale is symmetric-logarithmic over the finite values (linear within the median
    absolute one), so that gains of 0.01 stay visible beside a fit that lost 50; an
    infinite mean (a label given probability 0) takes the scale's end and reads ``-inf``."""
    from matplotlib.colors import SymLogNorm
    from matplotlib.figure import Figure

    columns = [c for c in order if c != UNCALIBRATED]
    table = by_method.pivot(index="method", columns="calibrator", values=f"phi_{metric}")
    values = table.reindex(columns=columns).to_numpy(dtype=float)
    finite = np.abs(values[np.isfinite(values)])
    bound = float(finite.max()) if finite.size and finite.max() > 0 else 1.0
    small = finite[finite > 0]
    norm = SymLogNorm(float(np.median(small)) if small.size else bound, vmin=-bound, vmax=bound)
    fig = Figure(figsize=(0.6 * len(columns) + 2.8, 0.45 * len(table) + 2.0), layout="constrained")
    ax = fig.subplots()
    image = ax.imshow(np.clip(values, -bound, bound), cmap="RdBu", norm=norm, aspect="auto")
    for (row, column), value in np.ndenumerate(values):
        text = "" if np.isnan(value) else f"{value:.3g}"
        dark = abs(norm(np.clip(value, -bound, bound)) - 0.5) > 0.3  # white on the dark ends
        ax.text(
            column,
            row,
            text,
            ha="center",
            va="center",
            fontsize=6,
            color="white" if dark else "black",
        )
    ax.set_xticks(range(len(columns)), columns, rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(len(table)), table.index, fontsize=7)
    ax.set_xlabel("calibrator (overall leaderboard order)")
    ax.set_ylabel("training method")
    fig.colorbar(image, ax=ax, label=f"mean PHI in {metric_name(metric)} (> 0: helps)")
    return fig


def arena_summary(tables: dict[str, pd.DataFrame], options: RankOptions) -> str:
    """The report's Markdown summary: what was ranked, the winner, each method's best."""
    board, first = tables["leaderboard"], options.rank_by[0]
    sets = int(board["n_sets"].max())
    lines = [
        "# Calibrator arena",
        "",
        f"{len(board) - 1} calibrator(s) on {sets} prediction set(s), ranked by win rate in "
        f"{metric_name(first)} against every other entrant (the uncalibrated model included; "
        f"{options.level:.0%} bootstrap intervals over runs, {options.n_resamples} resamples).",
        "PHI: the uncalibrated score minus the calibrated one (> 0: calibrating helped).",
        "",
    ]
    best = board[board["calibrator"] != UNCALIBRATED].iloc[0]
    lines.append(
        f"Best overall: **{best['calibrator']}** (win rate {best[f'win_{first}']:.2f}, "
        f"mean PHI in {metric_name(first)} {best[f'phi_{first}']:+.4f})."
    )
    by_method = tables["by_method"]
    lines += ["", "Best per training method:", ""]
    for method, rows in by_method[by_method["calibrator"] != UNCALIBRATED].groupby(
        "method", sort=False
    ):
        top = rows.iloc[0]
        lines.append(
            f"- {method}: {top['calibrator']} (mean PHI {top[f'phi_{first}']:+.4f}, "
            f"{int(top['n_sets'])} set(s))"
        )
    failures = tables["failures"]
    if len(failures):
        lines += ["", f"{len(failures)} (set, calibrator) pair(s) did not run: table `failures`."]
    return "\n".join(lines) + "\n"


def arena_report(scores: pd.DataFrame, options: RankOptions) -> dict[str, Any]:
    """The arena's report: its tables, the leaderboard figure, the PHI-by-method heatmap
    and the summary (artifacts for :func:`calib_pipeline.reports.common.write_artifacts`)."""
    tables = arena_tables(scores, options)
    return {
        "summary": arena_summary(tables, options),
        **tables,
        "leaderboard_figure": leaderboard_figure(tables["leaderboard"], options.rank_by),
        "phi_by_method": phi_by_method_figure(
            tables["by_method"], options.rank_by[0], list(tables["leaderboard"]["calibrator"])
        ),
    }
