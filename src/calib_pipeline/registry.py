"""A name -> factory registry shared by datasets, models, objectives, calibrators.

Every kind of thing the pipelines build by name goes through one ``Registry``.
An unknown name fails with the list of valid names, and factories validate
their hyperparameters eagerly, so a bad study configuration fails when the
pipeline is constructed -- long before any training starts.
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to factories; ``build(name, **params)`` is the single entry point.

    ``names()`` are sorted, or in registration order with ``keep_order=True`` (for kinds
    whose order is documented, such as the metric keys of a results table).
    """

    def __init__(self, kind: str, *, keep_order: bool = False) -> None:
        self.kind = kind
        self._keep_order = keep_order
        self._factories: dict[str, Callable[..., T]] = {}
        self._validators: dict[str, Callable[..., Any]] = {}

    def register(
        self, name: str | None = None, *, validate: Callable[..., Any] | None = None
    ) -> Callable[[Callable[..., T]], Callable[..., T]]:
        """Decorator registering ``factory`` under ``name`` (default: its ``__name__``).

        ``validate(**params)``, when given, checks the values of a configuration without
        building it (``Registry.check``); it raises ``ValueError`` on a bad value.
        """

        def decorator(factory: Callable[..., T]) -> Callable[..., T]:
            key = name or factory.__name__
            if key in self._factories:
                raise ValueError(f"{self.kind} {key!r} is registered twice")
            self._factories[key] = factory
            if validate is not None:
                self._validators[key] = validate
            return factory

        return decorator

    def names(self) -> list[str]:
        return list(self._factories) if self._keep_order else sorted(self._factories)

    def __contains__(self, name: object) -> bool:
        return name in self._factories

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def factory(self, name: str) -> Callable[..., T]:
        if name not in self._factories:
            raise ValueError(
                f"unknown {self.kind} {name!r}; valid {self.kind} names are: "
                + ", ".join(self.names())
            )
        return self._factories[name]

    def check(self, name: str, **params: Any) -> None:
        """Check ``name`` and the names of ``params`` without building anything.

        Raises ``ValueError`` naming the valid names, or the parameters the factory accepts.
        A factory registered with ``validate=`` also has its values checked by that function.
        """
        factory = self.factory(name)
        self._check_parameters(name, factory, params)
        validator = self._validators.get(name)
        if validator is not None:
            validator(**params)

    def build(self, name: str, **params: Any) -> T:
        """Build ``name`` with ``params``; unknown names and parameters raise ``ValueError``."""
        factory = self.factory(name)
        self._check_parameters(name, factory, params)
        return factory(**params)

    def _check_parameters(
        self, name: str, factory: Callable[..., T], params: dict[str, Any]
    ) -> None:
        signature = inspect.signature(factory)
        accepts_any = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
        if not accepts_any:
            allowed = [
                p.name
                for p in signature.parameters.values()
                if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
            ]
            unknown = sorted(set(params) - set(allowed))
            if unknown:
                raise ValueError(
                    f"{self.kind} {name!r} got unknown parameter(s) {unknown}; "
                    f"it accepts: {', '.join(allowed) or 'no parameters'}"
                )


def check_range(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
) -> float:
    """Validate a finite scalar hyperparameter; the error quotes the value and the valid range.

    ``True``/``False`` are not numbers here (YAML reads ``yes`` as ``True``, which would
    otherwise pass as 1.0), and neither NaN nor ±inf is: an infinite γ, α, λ or learning
    rate has no meaning and would only surface later as NaN weights.
    """
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    ok = True
    if low is not None:
        ok &= number >= low if low_inclusive else number > low
    if high is not None:
        ok &= number <= high if high_inclusive else number < high
    if not ok:
        left = "[" if low_inclusive and low is not None else "("
        right = "]" if high_inclusive and high is not None else ")"
        lo = "-inf" if low is None else low
        hi = "inf" if high is None else high
        raise ValueError(f"{name} must be in {left}{lo}, {hi}{right}, got {value!r}")
    return number


def check_positive(name: str, value: Any) -> float:
    """A positive finite number (a scale, a bandwidth, a temperature), as ``float``."""
    return check_range(
        name, value, low=0.0, high=math.inf, low_inclusive=False, high_inclusive=False
    )


def check_choice(name: str, value: Any, choices: Sequence[Any]) -> Any:
    """``value`` if it is one of ``choices``; otherwise ``ValueError`` listing them.

    The value must be of the choices' own kind: ``True`` does not pass for ``1``, nor
    ``2.0`` for ``2`` (YAML makes such slips easy and they would otherwise pass silently).
    """
    kinds = {type(choice) for choice in choices}
    if type(value) not in kinds or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    return value


#: The most bins any binned metric, reliability diagram or binning calibrator takes. More
#: bins than samples leave most bins empty; 100,000 is ten times the largest test set of the
#: papers' protocols (CIFAR's 10,000), and a typo such as 1e9 would allocate gigabytes only
#: after every run had trained -- so it is refused when the pipelines are built.
MAX_BINS = 100_000


def check_bins(name: str, value: Any) -> int:
    """A bin count: an integer >= 1 and at most ``MAX_BINS``."""
    bins = check_int(name, value, low=1)
    if bins > MAX_BINS:
        raise ValueError(
            f"{name} must be at most {MAX_BINS:,} bins, got {bins:,}: more bins than any "
            "evaluated split has samples (calib_pipeline.registry.MAX_BINS)"
        )
    return bins


def check_int(name: str, value: Any, *, low: int | None = None, high: int | None = None) -> int:
    """``value`` as an ``int`` if it is an integer (not a bool, not a float) in ``[low, high]``.

    NumPy integers count as integers: indices and counts often come out of NumPy.
    """
    is_integer = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    in_range = is_integer and (low is None or value >= low) and (high is None or value <= high)
    if not in_range:
        if low is not None and high is not None:
            bounds = f" in [{low}, {high}]"
        elif low is not None:
            bounds = f" >= {low}"
        elif high is not None:
            bounds = f" <= {high}"
        else:
            bounds = ""
        raise ValueError(f"{name} must be an integer{bounds}, got {value!r}")
    return int(value)


def check_bool(name: str, value: Any) -> bool:
    """``value`` if it is ``True`` or ``False`` (not ``1``, not ``"yes"``)."""
    if not isinstance(value, bool):
        # ValueError, not TypeError: every bad hyperparameter fails alike at build time.
        raise ValueError(f"{name} must be true or false, got {value!r}")
    return value
