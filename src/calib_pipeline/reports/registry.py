"""Study reports registered by name, each with the options it declares.

A report is a function ``report(results: StudyResults, **options) -> dict[str, artifact]``
where an artifact is a ``pandas.DataFrame`` (saved as CSV and Markdown), a ``str``
(Markdown) or a matplotlib ``Figure`` (PNG). A study lists its reports in
``parameters_studies.yml`` (``reports: {name: {options}}``).

Register one with ``@report("name", needs=(...), options={...})``:

- ``needs`` says which per-run artifacts beyond the tidy metrics and reliability tables it
  reads: ``"histories"``, ``"logits"``, ``"calibrators"``, ``"shift"``;
- ``options`` maps every keyword option of the function to an :class:`Option` saying
  which values it accepts, built from :func:`choice`, :func:`integer`, :func:`number`,
  :data:`BOOLEAN`, :data:`TEXT`, :data:`METRIC`, :data:`SIGNIFICANCE`, :func:`optional`,
  :func:`either`, :func:`list_of` and :func:`mapping`, e.g.
  ``{"spread": choice("std", "sem"), "digits": integer(low=0)}``.
  Registration fails if the declaration and the function's signature disagree, or if a
  default value breaks its own declaration;
- ``shifted`` says whether it reads the tidy table's shifted rows: a bool, or a function
  of the study's options (e.g. the claims report reads them only for claims on shifted sets);
- ``calibrators`` says which calibrator keys it reads: a function of its options (their
  defaults filled in) returning the keys, e.g. :func:`calibrators_in` ``("calibrator")``.
  A study evaluates -- and the posthoc stage fits -- the calibrators its reports declare
  (plus those the study lists itself); a report that reads "every calibrator of the
  study" (summary, reliability) declares none;
- ``study_check(study, options)``, when given, validates the options against the study
  itself (its methods, sweep groups, calibrators: a :class:`StudyOutline`).
- ``ensembles=True`` says it shows the study's ensemble rows (``reports.ensembles``: seed
  ``ENSEMBLE_SEED``, one run each); the others get the study without them (they read
  per-run artifacts an ensemble lacks, or lay out a paper's grid of methods).

:func:`check_report` validates a study's options against the declaration without running
anything (the pipelines call it when they are built; given the study's outline it also
runs the report's ``study_check``); :func:`build_report` checks, then runs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from calib_pipeline.calibration.metrics import metric_names
from calib_pipeline.registry import Registry, check_bool, check_choice, check_int, check_range
from calib_pipeline.reports.ensembles import ENSEMBLE_SEED

ReportFunction = Callable[..., dict[str, Any]]
REPORTS: Registry[ReportFunction] = Registry("report")
RUN_ARTIFACTS = ("histories", "logits", "calibrators", "shift")


@dataclass
class StudyResults:
    """Everything a report may read about one study.

    ``metrics`` is the tidy table and ``bins`` the per-bin reliability table of the
    evaluation; the per-run mappings are keyed by ``(method, seed)`` and filled only for
    the artifacts the report declared in ``needs``.
    """

    study: str
    dataset: str
    methods: list[str]
    seeds: list[int]
    labels: dict[str, str]
    groups: dict[str, str]
    metrics: pd.DataFrame
    bins: pd.DataFrame
    protocol: str = ""  # the configuration environment's protocol; "" when unknown
    histories: dict[tuple[str, int], pd.DataFrame] = field(default_factory=dict)
    logits: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    calibrators: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    shift: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)
    """Method -> the architecture it was trained with, as ``models.architecture_tag`` writes
    it (name plus non-default options: ``resnet32[shortcut=zero_pad]``); empty when
    unknown (e.g. results assembled in a notebook)."""
    schedules: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Method -> the training settings it was trained with (every ``TrainConfig`` field,
    its own ``training`` over the study's); empty when unknown."""
    ensembles: list[dict[str, Any]] = field(default_factory=list)
    """The study's ensembles (``reports.ensembles.EnsembleSpec.record``: key, label,
    members); their rows in ``metrics`` and ``bins`` have seed ``ENSEMBLE_SEED``."""

    @property
    def row_methods(self) -> list[str]:
        """The ``method`` keys of the tidy table's rows: the study's methods, then the keys
        of its ensembles (which have rows but no per-run artifacts)."""
        return [*self.methods, *(record["key"] for record in self.ensembles)]

    @property
    def row_labels(self) -> dict[str, str]:
        """Method key -> label of every :attr:`row_methods` entry."""
        return {**self.labels, **{record["key"]: record["label"] for record in self.ensembles}}

    @property
    def dataset_label(self) -> str:
        """The dataset and protocol, as report titles name them: ``digits (protocol test)``;
        the dataset alone when the protocol is unknown (results assembled in a notebook)."""
        return f"{self.dataset} (protocol {self.protocol})" if self.protocol else self.dataset


@dataclass(frozen=True)
class StudyOutline:
    """What is known of a study when the pipelines are built: its name, its methods (in
    order), each method's sweep group, the calibrator keys it evaluates and the keys of its
    ensembles (``reports.ensembles``)."""

    name: str
    methods: tuple[str, ...]
    groups: Mapping[str, str]
    calibrators: tuple[str, ...]
    ensembles: tuple[str, ...] = ()


# --- option declarations -----------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """The values one report option accepts.

    ``description`` completes "<option> must be ..."; ``validate(name, value)`` returns the
    value or raises ``ValueError`` naming the option and quoting the value.
    """

    description: str
    validate: Callable[[str, Any], Any]

    def accepts(self, value: Any) -> bool:
        try:
            self.validate("value", value)
        except ValueError:
            return False
        return True


def choice(*values: Any) -> Option:
    """One of ``values`` (of their own type: ``True`` is not ``1``)."""
    return Option(
        f"one of {', '.join(map(repr, values))}",
        lambda name, value: check_choice(name, value, values),
    )


def integer(*, low: int | None = None, high: int | None = None) -> Option:
    """An integer (not a bool) within ``[low, high]``."""
    bounds = [f">= {low}"] * (low is not None) + [f"<= {high}"] * (high is not None)
    return Option(
        " ".join(["an integer", " and ".join(bounds)]).strip(),
        lambda name, value: check_int(name, value, low=low, high=high),
    )


def number(
    *,
    low: float | None = None,
    high: float | None = None,
    low_inclusive: bool = True,
    high_inclusive: bool = True,
) -> Option:
    """A real number within the given bounds."""
    left = "[" if low_inclusive and low is not None else "("
    right = "]" if high_inclusive and high is not None else ")"
    interval = f"{left}{'-inf' if low is None else low}, {'inf' if high is None else high}{right}"
    return Option(
        f"a number in {interval}",
        lambda name, value: check_range(
            name,
            value,
            low=low,
            high=high,
            low_inclusive=low_inclusive,
            high_inclusive=high_inclusive,
        ),
    )


# The level of a significance test.
SIGNIFICANCE = number(low=0.0, high=1.0, low_inclusive=False, high_inclusive=False)


def _check_text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        # ValueError, like every shared check: a bad option fails alike whatever is wrong
        raise ValueError(f"{name} must be a string, got {value!r}")
    return value


BOOLEAN = Option("true or false", check_bool)
TEXT = Option("a string", _check_text)
METRIC = choice(*metric_names())  # a key of calibration.metrics


def optional(option: Option) -> Option:
    """``None`` (YAML ``null``) or a value ``option`` accepts."""

    def validate(name: str, value: Any) -> Any:
        return None if value is None else option.validate(name, value)

    return Option(f"{option.description} or null", validate)


def either(*options: Option) -> Option:
    """A value any of ``options`` accepts, e.g. one bin count or a list of them."""
    description = " or ".join(o.description for o in options)

    def validate(name: str, value: Any) -> Any:
        if not any(o.accepts(value) for o in options):
            raise ValueError(f"{name} must be {description}, got {value!r}")
        return value

    return Option(description, validate)


def list_of(item: Option, *, length: int | None = None) -> Option:
    """A non-empty list (or tuple) of values ``item`` accepts; ``length`` fixes its size."""
    size = "a non-empty list" if length is None else f"a list of {length} values"
    description = f"{size}, each {item.description}"

    def validate(name: str, value: Any) -> Any:
        if (
            not isinstance(value, (list, tuple))
            or not value
            or (length is not None and len(value) != length)
        ):
            raise ValueError(f"{name} must be {description}, got {value!r}")
        for index, entry in enumerate(value):
            item.validate(f"{name}[{index}]", entry)
        return value

    return Option(description, validate)


def mapping(key: Option, value: Option) -> Option:
    """A non-empty mapping whose keys ``key`` and values ``value`` accept."""
    description = f"a mapping, each key {key.description} and each value {value.description}"

    def validate(name: str, given: Any) -> Any:
        if not isinstance(given, Mapping) or not given:
            raise ValueError(f"{name} must be {description}, got {given!r}")
        for entry_key, entry in given.items():
            key.validate(f"a key of {name}", entry_key)
            value.validate(f"{name}[{entry_key!r}]", entry)
        return given

    return Option(description, validate)


# --- the registry ------------------------------------------------------------------------


@dataclass(frozen=True)
class Declaration:
    """What a registered report reads besides the tidy tables, and the options it takes."""

    needs: tuple[str, ...]
    options: dict[str, Option]
    shifted: bool | Callable[[Mapping[str, Any]], bool] = False
    study_check: Callable[[StudyOutline, Mapping[str, Any]], None] | None = None
    calibrators: Callable[[Mapping[str, Any]], Iterable[str]] | None = None
    defaults: dict[str, Any] = field(default_factory=dict)
    ensembles: bool = False


_DECLARATIONS: dict[str, Declaration] = {}


def report(
    name: str,
    needs: tuple[str, ...] = (),
    options: dict[str, Option] | None = None,
    shifted: bool | Callable[[Mapping[str, Any]], bool] = False,
    study_check: Callable[[StudyOutline, Mapping[str, Any]], None] | None = None,
    calibrators: Callable[[Mapping[str, Any]], Iterable[str]] | None = None,
    ensembles: bool = False,
) -> Callable[[ReportFunction], ReportFunction]:
    """Register ``func`` as report ``name`` reading ``needs`` and taking ``options``;
    ``shifted`` says it reads the tidy table's shifted rows (the studies that list it get
    the shift stage; the others skip it) -- a bool, or a function of the study's options;
    ``study_check(study, options)`` validates the options against a :class:`StudyOutline`;
    ``calibrators(options)`` gives the calibrator keys the report reads (the studies that
    list it evaluate them, and the posthoc stage fits them for the studies' runs);
    ``ensembles`` says it shows ensemble rows (else :func:`build_report` removes them).

    Raises:
        ValueError: an unknown kind in ``needs``, declared options that are not the
            function's keyword parameters (or the reverse), or a default value that its
            declaration refuses.
    """
    unknown = sorted(set(needs) - set(RUN_ARTIFACTS))
    if unknown:
        raise ValueError(f"report {name!r}: unknown needs {unknown}; valid: {list(RUN_ARTIFACTS)}")
    declared = dict(options or {})

    def decorator(func: ReportFunction) -> ReportFunction:
        parameters = dict(list(inspect.signature(func).parameters.items())[1:])
        if set(parameters) != set(declared):
            raise ValueError(
                f"report {name!r} declares options {sorted(declared)} but its function takes "
                f"{sorted(parameters)}"
            )
        for option, parameter in parameters.items():
            declared[option].validate(f"default of {name}.{option}", parameter.default)
        REPORTS.register(name)(func)
        defaults = {option: parameter.default for option, parameter in parameters.items()}
        _DECLARATIONS[name] = Declaration(
            tuple(needs), declared, shifted, study_check, calibrators, defaults, ensembles
        )
        return func

    return decorator


def report_names() -> list[str]:
    """Every registered report, sorted."""
    return REPORTS.names()


def report_needs(name: str) -> tuple[str, ...]:
    """The per-run artifacts report ``name`` reads; an unknown name lists the valid ones."""
    REPORTS.factory(name)
    return _DECLARATIONS[name].needs


def uses_shift(name: str, options: Mapping[str, Any] | None = None) -> bool:
    """Whether report ``name`` with ``options`` reads shifted sets: it declared ``shifted``,
    needs the per-run shift logits, or is asked for some through a ``shifts`` option."""
    REPORTS.factory(name)
    declaration = _DECLARATIONS[name]
    shifted = declaration.shifted
    if callable(shifted):
        shifted = shifted(dict(options or {}))
    return shifted or "shift" in declaration.needs or bool((options or {}).get("shifts"))


def report_calibrators(name: str, options: Mapping[str, Any] | None = None) -> tuple[str, ...]:
    """The calibrator keys report ``name`` reads with ``options`` (its defaults filled in),
    in the order it names them; none when it declared none."""
    REPORTS.factory(name)
    declaration = _DECLARATIONS[name]
    if declaration.calibrators is None:
        return ()
    keys = declaration.calibrators({**declaration.defaults, **(options or {})})
    return tuple(dict.fromkeys(keys))


def calibrators_in(*names: str) -> Callable[[Mapping[str, Any]], list[str]]:
    """A report's ``calibrators`` declaration: the keys given in its options ``names``,
    each a key, a list of keys or a mapping whose values are keys (``None``: none).

    >>> calibrators_in("ts", "others")({"ts": "ts_nll", "others": ["hb"], "digits": 2})
    ['ts_nll', 'hb']
    """

    def keys(options: Mapping[str, Any]) -> list[str]:
        found: list[str] = []
        for name in names:
            value = options.get(name)
            if isinstance(value, str):
                value = [value]
            elif isinstance(value, Mapping):
                value = list(value.values())
            found += [key for key in value or [] if isinstance(key, str)]
        return found

    return keys


def study_needs_calibrator(option: str) -> Callable[[StudyOutline, Mapping[str, Any]], None]:
    """A report's ``study_check`` for an option that defaults to the study's first
    calibrator: without the option, the study must evaluate some calibrator."""

    def check(study: StudyOutline, options: Mapping[str, Any]) -> None:
        if options.get(option) is None and not study.calibrators:
            raise ValueError(
                f"option {option!r} is not given and study {study.name!r} evaluates no "
                f"calibrator: name one (e.g. `{option}: ts`) or list it in the study's "
                "`calibrators`"
            )

    return check


def report_options(name: str) -> dict[str, Option]:
    """Option name -> :class:`Option` of report ``name``, in the function's order."""
    REPORTS.factory(name)
    return dict(_DECLARATIONS[name].options)


def check_report(
    name: str, options: Mapping[str, Any] | None = None, study: StudyOutline | None = None
) -> None:
    """Validate a study's ``options`` for report ``name`` without running it.

    Args:
        name: a registered report name.
        options: option name -> value, as the study's ``reports`` entry gives them
            (``None`` for none).
        study: the study's outline; when given, the report's ``study_check`` (if it
            declared one) also validates the options against the study.

    Raises:
        ValueError: an unknown report (the message lists the valid names), an unknown
            option (lists the report's options), or a value of the wrong type or out of
            range (names the option, quotes the value and says what it accepts); with
            ``study``, whatever the report's ``study_check`` refuses (e.g. a claim naming
            a method the study lacks).
    """
    declared = report_options(name)
    given = dict(options or {})
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise ValueError(
            f"report {name!r} got unknown option(s) {unknown}; valid options: "
            + (", ".join(declared) or "none")
        )
    for option, value in given.items():
        try:
            declared[option].validate(option, value)
        except ValueError as error:
            raise ValueError(f"report {name!r}: {error}") from None
    study_check = _DECLARATIONS[name].study_check
    if study is not None and study_check is not None:
        try:
            study_check(study, given)
        except ValueError as error:
            message = str(error)
            if not message.startswith(f"report {name!r}"):
                message = f"report {name!r}: {message}"
            raise ValueError(message) from None


def shows_ensembles(name: str) -> bool:
    """Whether report ``name`` shows a study's ensemble rows (it declared ``ensembles``)."""
    REPORTS.factory(name)
    return _DECLARATIONS[name].ensembles


def without_ensembles(results: StudyResults) -> StudyResults:
    """``results`` without its ensembles' rows (seed ``ENSEMBLE_SEED``) and records; itself
    when it has none."""
    seeds = results.metrics.get("seed")
    if not results.ensembles and (seeds is None or not (seeds == ENSEMBLE_SEED).any()):
        return results
    bins = results.bins
    if "seed" in bins:
        bins = bins[bins["seed"] != ENSEMBLE_SEED]
    metrics = results.metrics[results.metrics["seed"] != ENSEMBLE_SEED]
    return replace(results, metrics=metrics, bins=bins, ensembles=[])


def build_report(name: str, results: StudyResults, **options: Any) -> dict[str, Any]:
    """Check the options of report ``name`` (:func:`check_report`), then run it -- without
    the study's ensemble rows unless it declared ``ensembles``.

    Args:
        name: a registered report name.
        results: the study.
        **options: the report's options.

    Returns:
        Artifact name -> DataFrame / Markdown string / Figure.
    """
    check_report(name, options)
    if not _DECLARATIONS[name].ensembles:
        results = without_ensembles(results)
    artifacts = REPORTS.factory(name)(results, **options)
    if not isinstance(artifacts, dict) or not artifacts:
        raise ValueError(f"report {name!r} must return a non-empty dict of artifacts")
    return artifacts
