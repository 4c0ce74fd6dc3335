"""The calibrator interface, its registry, and the helpers every calibrator shares.

A calibrator is fitted on validation logits and labels and maps logits to calibrated
probabilities. Fitting always runs in float64: calibration maps are fitted on a few
thousand rows, so the cost is negligible and float32 rounding cannot stop an
optimiser early or flatten an objective (netcal's float32 temperature fit is the
cautionary tale). Inputs may be torch tensors on any device or NumPy arrays; outputs are
float64 tensors on the input's device (CPU for NumPy input).

A fitted calibrator turns into plain data (``state_dict``: tensors, numbers, strings and
lists) and back (``load_state_dict``), so it can be stored in a file that loads with
``torch.load(weights_only=True)``: loading a calibrator never runs code from the file.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar, NamedTuple, Self

import numpy as np
import torch
from torch import Tensor

from calib_pipeline.calibration.validation import check_logits_labels, to_tensor
from calib_pipeline.registry import Registry

logger = logging.getLogger("calib_pipeline.calibration.posthoc")

CALIBRATORS: Registry[Calibrator] = Registry("calibrator")

# The layout of ``Calibrator.state_dict()``; a state of another format is refused.
STATE_FORMAT = 1
STATE_KEYS = ("format", "name", "arguments", "n_classes", "converged", "warnings", "fitted")


def register(cls: type[Calibrator]) -> type[Calibrator]:
    """Class decorator: register ``cls`` under its ``name`` class attribute."""
    return CALIBRATORS.register(cls.name)(cls)


def validated_logits(logits: Tensor | np.ndarray) -> Tensor:
    """Validated float64 N×K logits (1-D binary logits ``z`` become ``[0, z]``).

    ``check_logits_labels`` validates the logits alongside placeholder labels of class 0,
    which are valid for any K.
    """
    scores = to_tensor(logits, name="logits")
    placeholder = torch.zeros(scores.shape[:1], dtype=torch.int64)
    return check_logits_labels(scores, placeholder)[0].detach().to(torch.float64)


class FittedMap:
    """A map a fitted calibrator holds (binned, isotonic), stored as a dict of tensors.

    Subclasses are recorded by class name: a stored state names its map, and loading
    rebuilds it through this table, never through an import path read from a file.
    """

    stored: ClassVar[dict[str, type[FittedMap]]] = {}
    tensor_names: ClassVar[tuple[str, ...]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        FittedMap.stored[cls.__name__] = cls

    def state_dict(self) -> dict[str, Tensor]:
        """The map's tensors by name (``tensor_names``), on the CPU."""
        return {name: getattr(self, name).detach().cpu() for name in self.tensor_names}

    @classmethod
    def from_state_dict(cls, state: Any) -> Self:
        """The map rebuilt from ``state_dict()`` output.

        Raises:
            ValueError: ``state`` is not a dict of exactly the map's tensors.
        """
        is_tensors = isinstance(state, dict) and all(isinstance(v, Tensor) for v in state.values())
        if not is_tensors or set(state) != set(cls.tensor_names):
            raise ValueError(
                f"a stored {cls.__name__} must be a dict of the tensors "
                f"{', '.join(cls.tensor_names)}"
            )
        return cls(*(state[name] for name in cls.tensor_names))


def _plain_value(value: Any, attribute: str) -> Any:
    """``value`` as data ``torch.load(weights_only=True)`` accepts (a map as its tensors)."""
    if isinstance(value, FittedMap):
        return {"map": type(value).__name__, "state": value.state_dict()}
    if isinstance(value, list):
        return [_plain_value(item, attribute) for item in value]
    if isinstance(value, Tensor):
        return value.detach().cpu()
    if isinstance(value, np.generic):  # e.g. a NumPy float64 minimum of an objective
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(
        f"fitted attribute {attribute!r} holds a {type(value).__name__}, which a calibrator "
        "state cannot store (tensors, numbers, strings, lists and fitted maps only)"
    )


def _restored_value(value: Any, attribute: str) -> Any:
    """The inverse of ``_plain_value``, checking that ``value`` is plain data."""
    if isinstance(value, dict):
        if set(value) != {"map", "state"} or value["map"] not in FittedMap.stored:
            raise ValueError(
                f"fitted attribute {attribute!r} holds a dict that is not a stored map of "
                f"a known kind ({', '.join(sorted(FittedMap.stored))})"
            )
        return FittedMap.stored[value["map"]].from_state_dict(value["state"])
    if isinstance(value, list):
        return [_restored_value(item, attribute) for item in value]
    if value is None or isinstance(value, (bool, int, float, str, Tensor)):
        return value
    raise ValueError(f"fitted attribute {attribute!r} holds a {type(value).__name__}")


class Calibrator:
    """Base class: validation, fitted-state bookkeeping and degenerate-fit warnings.

    Subclasses set ``name`` and implement ``_fit`` (returning the convergence flag),
    ``_predict_proba`` and ``_learned``; they receive validated float64 logits. They list
    the attributes ``_fit`` sets in ``fitted_attributes`` (stored by ``state_dict``).

    Attributes:
        name: the registry name.
        hyperparameters: the validated constructor arguments, JSON-friendly.
        converged: whether the last fit's optimiser met its stopping criterion.
        warnings: degenerate-fit messages of the last fit (also logged as warnings).
        n_classes: number of classes seen by ``fit`` (``None`` before fitting).
        needs_logits: whether the fit and the predictions depend on the logits themselves;
            false when they depend only on ``softmax(logits)`` (equivalently, adding a
            constant to a row changes nothing), so that log-probabilities stand in for the
            logits exactly and the calibrator can run on a model's probabilities.
    """

    name: ClassVar[str]
    fitted_attributes: ClassVar[tuple[str, ...]] = ()
    needs_logits: ClassVar[bool] = False

    def __init__(self, **hyperparameters: Any) -> None:
        self.hyperparameters = hyperparameters
        self.converged = False
        self.warnings: list[str] = []
        self.n_classes: int | None = None

    def __repr__(self) -> str:
        arguments = ", ".join(f"{key}={value!r}" for key, value in self.hyperparameters.items())
        return f"{type(self).__name__}({arguments})"

    def fit(self, logits: Tensor | np.ndarray, labels: Tensor | np.ndarray) -> Self:
        """Fit the calibration map on validation ``logits`` (N×K) and ``labels`` (N,).

        Raises:
            ValueError: on invalid input (empty, NaN/inf logits, labels outside
                ``[0, K)``, mismatched lengths), before any fitting.
        """
        z, y = check_logits_labels(logits, labels)
        z = z.detach().to(torch.float64)
        if z.shape[1] < 2:
            raise ValueError(
                f"calibration needs at least 2 classes, got logits of shape {tuple(z.shape)}"
            )
        self.warnings = []
        self.n_classes = None  # a fit that raises leaves the calibrator unfitted
        present = torch.unique(y)
        if present.numel() == 1:
            self._warn(
                f"validation labels contain a single class ({int(present[0])}); "
                "the fitted map is degenerate"
            )
        self.converged = self._fit(z, y)
        self.n_classes = z.shape[1]
        return self

    def predict_proba(self, logits: Tensor | np.ndarray) -> Tensor:
        """Calibrated probabilities, float64 (N×K) with rows summing to 1."""
        return self._predict_proba(self._checked_logits(logits))

    def learned(self) -> dict[str, Any]:
        """What the fit learned (temperature, bins, weights) as JSON-friendly values."""
        self._require_fitted()
        return self._learned()

    def build_arguments(self) -> dict[str, Any]:
        """The keywords of ``build_calibrator(name, **arguments)`` that rebuild this
        calibrator unfitted (``hyperparameters``, unless a subclass derives some of them)."""
        return dict(self.hyperparameters)

    def state_dict(self) -> dict[str, Any]:
        """The calibrator as plain data: tensors, numbers, strings, ``None``, lists, dicts.

        ``torch.save`` writes it and ``torch.load(weights_only=True)`` reads it back
        without running code; ``posthoc.calibrator_from_state`` rebuilds the calibrator.

        Returns:
            ``{"format": STATE_FORMAT, "name", "arguments"`` (``build_arguments()``),
            ``"n_classes", "converged", "warnings", "fitted"}`` with ``fitted`` the
            ``fitted_attributes`` by name (a fitted map as ``{"map": kind, "state":
            tensors}``), or ``None`` before fitting.
        """
        fitted = None
        if self.n_classes is not None:
            fitted = {a: _plain_value(getattr(self, a), a) for a in self.fitted_attributes}
        return {
            "format": STATE_FORMAT,
            "name": self.name,
            "arguments": self.build_arguments(),
            "n_classes": self.n_classes,
            "converged": self.converged,
            "warnings": list(self.warnings),
            "fitted": fitted,
        }

    def load_state_dict(self, state: dict[str, Any]) -> Self:
        """Restore a fit from ``state_dict()`` output; its warnings are not logged again.

        Args:
            state: the state of a calibrator of this name and ``build_arguments()``.

        Returns:
            this calibrator, predicting as the one whose state it was.

        Raises:
            ValueError: ``state`` is not such a state (wrong format, name or arguments,
                a missing or extra fitted attribute, a value that is not plain data).
        """
        fitted = self._checked_state(state)
        restored = {a: _restored_value(fitted[a], a) for a in fitted}
        for attribute, value in restored.items():
            setattr(self, attribute, value)
        self.converged = state["converged"]
        self.warnings = list(state["warnings"])
        self.n_classes = state["n_classes"]
        return self

    def _checked_state(self, state: Any) -> dict[str, Any]:
        """The ``fitted`` entry of ``state`` (``{}`` when unfitted), once ``state`` is
        checked to be a state of this calibrator."""
        if not isinstance(state, dict) or set(state) != set(STATE_KEYS):
            raise ValueError(f"a calibrator state is a dict with the keys {', '.join(STATE_KEYS)}")
        if state["format"] != STATE_FORMAT:
            raise ValueError(
                f"calibrator state format {state['format']!r} is not supported "
                f"(this version reads format {STATE_FORMAT})"
            )
        if (state["name"], state["arguments"]) != (self.name, self.build_arguments()):
            raise ValueError(
                f"the state of {state['name']!r} with arguments {state['arguments']!r} does not "
                f"belong to {self.name!r} with arguments {self.build_arguments()!r}"
            )
        n_classes, warnings, fitted = state["n_classes"], state["warnings"], state["fitted"]
        valid_classes = n_classes is None or (type(n_classes) is int and n_classes >= 2)
        valid_warnings = isinstance(warnings, list) and all(isinstance(w, str) for w in warnings)
        if not (valid_classes and valid_warnings and isinstance(state["converged"], bool)):
            raise ValueError(
                "a calibrator state needs n_classes (None or an integer >= 2), converged "
                "(a bool) and warnings (a list of strings)"
            )
        if n_classes is None:
            if fitted is not None:
                raise ValueError("an unfitted calibrator state (n_classes None) has fitted values")
            return {}
        if not isinstance(fitted, dict) or set(fitted) != set(self.fitted_attributes):
            raise ValueError(
                f"a fitted {self.name!r} state holds the attributes "
                f"{', '.join(self.fitted_attributes) or '(none)'}"
            )
        return fitted

    def _checked_logits(self, logits: Tensor | np.ndarray) -> Tensor:
        self._require_fitted()
        z = validated_logits(logits)
        if z.shape[1] != self.n_classes:
            raise ValueError(
                f"calibrator {self.name!r} was fitted on {self.n_classes} classes but got "
                f"logits with {z.shape[1]} classes"
            )
        return z

    def _require_fitted(self) -> None:
        if self.n_classes is None:
            raise ValueError(f"calibrator {self.name!r} is not fitted; call fit(logits, labels)")

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        logger.warning("%s: %s", self.name, message)

    def _checked_convergence(self, converged: bool, message: str) -> bool:
        """``converged``, warning with the optimiser's ``message`` when it is False."""
        if not converged:
            self._warn(f"the optimiser stopped without converging: {message}")
        return converged

    def _fit(self, logits: Tensor, labels: Tensor) -> bool:
        raise NotImplementedError

    def _predict_proba(self, logits: Tensor) -> Tensor:
        raise NotImplementedError

    def _learned(self) -> dict[str, Any]:
        raise NotImplementedError


class LogitCalibrator(Calibrator):
    """A calibrator that maps logits to logits; probabilities are their softmax."""

    def transform_logits(self, logits: Tensor | np.ndarray) -> Tensor:
        """Calibrated logits (float64, N×K) whose softmax is ``predict_proba``."""
        return self._transform_logits(self._checked_logits(logits))

    def _predict_proba(self, logits: Tensor) -> Tensor:
        return torch.softmax(self._transform_logits(logits), dim=1)

    def _transform_logits(self, logits: Tensor) -> Tensor:
        raise NotImplementedError


class TopLabel(NamedTuple):
    """Top-label view of float64 logits (see ``top_label``)."""

    prediction: Tensor
    confidence: Tensor
    log_odds: Tensor


def top_label(logits: Tensor) -> TopLabel:
    """Predicted class, top-label confidence and its log-odds, all from float64 logits.

    Returns:
        ``TopLabel(prediction, confidence, log_odds)`` with ``prediction`` the first
        maximal class, ``confidence = max_k softmax(z)_k`` and
        ``log_odds = log c − log(1 − c) = −log Σ_{k≠top} exp(z_k − z_top)``, computed
        from the logits so that it stays finite when ``c`` rounds to 1.
    """
    top, prediction = logits.max(dim=1)
    gaps = logits - top.unsqueeze(1)
    gaps.scatter_(1, prediction.unsqueeze(1), float("-inf"))
    log_odds = -torch.logsumexp(gaps, dim=1)
    return TopLabel(prediction, torch.sigmoid(log_odds), log_odds)


# A calibrated top-label confidence at or below 1/K cannot stay the strict argmax of K
# probabilities, so it is floored just above 1/K.
CONFIDENCE_FLOOR_MARGIN = 1e-9


def redistribute_top_label(
    logits: Tensor, prediction: Tensor, calibrated_confidence: Tensor
) -> Tensor:
    """N×K probabilities whose predicted class carries ``calibrated_confidence``.

    The predicted class gets ``c' = max(c_calibrated, 1/K + 1e-9)`` (below 1/K it could
    not remain the argmax). The remaining mass ``1 − c'`` goes to the other classes in
    proportion to their uncalibrated probabilities; if that would give another class
    more than ``m = (c' + (1 − c')/(K − 1))/2`` — halfway between ``c'`` and an even
    split of the rest, so strictly below ``c'`` — the other classes are blended towards
    uniform by the smallest amount that caps them at ``m``. The predicted class thus
    stays the strict argmax: accuracy is unchanged.

    Args:
        logits: float64 logits (N×K), K ≥ 2.
        prediction: the predicted class of each row (N,).
        calibrated_confidence: the calibrated top-label confidence (N,).

    Returns:
        float64 probabilities (N×K), rows summing to 1.
    """
    k = logits.shape[1]
    top_index = prediction.unsqueeze(1)
    confidence = calibrated_confidence.clamp(min=1.0 / k + CONFIDENCE_FLOOR_MARGIN, max=1.0)
    # softmax over the non-top classes: their shares of the remaining mass
    shares = torch.softmax(logits.scatter(1, top_index, float("-inf")), dim=1)
    remaining = 1.0 - confidence
    even_share = 1.0 / (k - 1)
    cap = (confidence + remaining * even_share) / 2
    largest = remaining * shares.max(dim=1).values
    # blend λ solves remaining·((1 − λ)·largest_share + λ·even_share) = cap
    blend = (largest - cap) / (largest - remaining * even_share).clamp(min=1e-300)
    blend = blend.clamp(min=0.0, max=1.0).unsqueeze(1)
    others = remaining.unsqueeze(1) * ((1.0 - blend) * shares + blend * even_share)
    return others.scatter(1, top_index, confidence.unsqueeze(1))


class TopLabelCalibrator(Calibrator):
    """A calibrator of the top-label confidence; the predicted class never changes.

    Subclasses implement ``_fit_top_label`` and ``_calibrate_top_label``;
    ``redistribute_top_label`` rebuilds N×K probabilities from the calibrated confidence.
    """

    def _fit(self, logits: Tensor, labels: Tensor) -> bool:
        top = top_label(logits)
        correct = (top.prediction == labels).to(torch.float64)
        n_correct = int(correct.sum())
        if n_correct in (0, correct.numel()):
            outcome = "correct" if n_correct else "wrong"
            self._warn(f"every validation prediction is {outcome}; the fitted map is degenerate")
        return self._fit_top_label(logits, labels, top, correct)

    def _predict_proba(self, logits: Tensor) -> Tensor:
        top = top_label(logits)
        return redistribute_top_label(logits, top.prediction, self._calibrate_top_label(top))

    def calibrate_confidence(self, logits: Tensor | np.ndarray) -> Tensor:
        """The calibrated top-label confidence alone (N,), before any flooring at 1/K."""
        return self._calibrate_top_label(top_label(self._checked_logits(logits)))

    def _fit_top_label(
        self, logits: Tensor, labels: Tensor, top: TopLabel, correct: Tensor
    ) -> bool:
        raise NotImplementedError

    def _calibrate_top_label(self, top: TopLabel) -> Tensor:
        raise NotImplementedError
