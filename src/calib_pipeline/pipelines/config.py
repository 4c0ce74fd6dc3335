"""The structure of the studies, read from parameters when pipelines are built.

``parameters_methods.yml`` defines methods (an objective or a meta-learner with
hyperparameters, the split it trains on, training overrides); ``parameters_studies.yml``
lists each study's methods, seeds, calibrators and reports. This module turns them
into :class:`RunSpec`s -- one per trained (method, seed) -- and validates every name and
hyperparameter by building it, so a bad configuration fails before any training.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from calib_pipeline.calibration.methods import MethodSpec, check_method
from calib_pipeline.calibration.posthoc import build_calibrator
from calib_pipeline.data import check_fractions, dataset_names
from calib_pipeline.data.shift_suites import resolve_suites
from calib_pipeline.models import check_model_params
from calib_pipeline.registry import check_bool
from calib_pipeline.reports.ensembles import EnsembleSpec
from calib_pipeline.reports.registry import check_report, report_calibrators, uses_shift
from calib_pipeline.training.provenance import method_model, method_training

VALID_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
DEFAULT_REPORTS = {"summary": {}, "reliability": {}}
STUDY_FIELDS = (
    "methods",
    "seeds",
    "calibrators",
    "reports",
    "description",
    "on_request",
    "ensembles",
)
ENSEMBLE_FIELDS = ("methods", "seeds", "label")
METHOD_FIELDS = frozenset(
    {
        "objective",
        "meta_learner",
        "params",
        "split",
        "training",
        "model",
        "label",
        "group",
        "record_epoch_logits",
    }
)


@dataclass(frozen=True)
class StudySpec:
    name: str
    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    calibrators: tuple[str, ...]
    reports: dict[str, Any] = field(default_factory=dict)
    # Run by its own name only: not in the stage pipelines, ``__default__`` or the
    # replication report (a check of the tool itself, such as ``fast_modes``).
    on_request: bool = False
    # Deep ensembles of the study's runs, scored from their logits (reports.ensembles).
    ensembles: tuple[EnsembleSpec, ...] = ()


@dataclass(frozen=True)
class Structure:
    methods: dict[str, MethodSpec]
    studies: dict[str, StudySpec]
    splits: tuple[str, ...]
    calibrators: dict[str, dict[str, Any]]

    def default_studies(self) -> list[str]:
        """The studies every stage pipeline, ``__default__`` and the replication report
        cover: all but those run on request."""
        return [name for name, study in self.studies.items() if not study.on_request]

    def shift_runs(self, study_names: list[str], shifted_val: bool) -> list[tuple[str, int]]:
        """The runs whose shifted sets some report reads (every run when calibrators are
        also fitted on shifted validation sets): the shift stage is spent on these only."""
        if shifted_val:
            return self.runs(study_names)
        readers = [name for name in study_names if study_uses_shift(self.studies[name])]
        return self.runs(readers) if readers else []

    def run_calibrators(self, method: str, seed: int) -> tuple[str, ...]:
        """The calibrator keys fitted for run (``method``, ``seed``): those of every study
        of the configuration that has the run, whichever studies a pipeline runs -- so the
        run's stored calibrators serve each of them."""
        keys = [
            key
            for study in self.studies.values()
            if method in study.methods and seed in study.seeds
            for key in study.calibrators
        ]
        return tuple(dict.fromkeys(keys))

    def runs(self, study_names: list[str] | None = None) -> list[tuple[str, int]]:
        """(method, seed) pairs of the given studies (all by default), deduplicated, ordered."""
        names = study_names or list(self.studies)
        seen: dict[tuple[str, int], None] = {}
        for name in names:
            study = self.studies[name]
            for method in study.methods:
                for seed in study.seeds:
                    seen[(method, seed)] = None
        return list(seen)


def study_uses_shift(study: StudySpec) -> bool:
    """Whether any report of ``study`` reads shifted sets."""
    return any(uses_shift(name, options) for name, options in study.reports.items())


def _check_key(kind: str, key: str) -> None:
    if not VALID_KEY.match(key):
        raise ValueError(
            f"{kind} key {key!r} must start with a letter and contain only letters, digits "
            "and underscores (it names Kedro namespaces and catalog entries)"
        )


def _format_value(value: Any) -> str:
    return str(value).replace(".", "p").replace("-", "m")


def expand_methods(raw: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Expand ``sweep: {param: [v1, v2, ...]}`` entries into one method per value.

    ``ls: {objective: label_smoothing, sweep: {epsilon: [0.01, 0.03]}}`` becomes
    ``ls_epsilon_0p01`` and ``ls_epsilon_0p03``, each with ``group: ls`` so a selection
    step can pick one per group. A label with a ``{param}`` placeholder is formatted with
    the value (``"LS-{epsilon}"`` -> ``LS-0.01``); otherwise `` (param=value)`` is appended.
    A dotted name sweeps a nested hyperparameter: ``sweep: {secondary.kappa: [0.2, 0.5]}`` on
    a ``composite`` method makes ``<key>_secondary_kappa_0p2`` ... (label placeholder
    ``{kappa}``).
    """
    expanded: dict[str, dict[str, Any]] = {}
    made_by: dict[str, str] = {}

    def add(name: str, source: str, method: dict[str, Any]) -> None:
        # a key made twice would silently replace the first (e.g. `methods.focal_gamma_3`
        # set beside the focal sweep that makes focal_gamma_3)
        if name in expanded:
            raise ValueError(
                f"method {name!r} is defined twice: by {made_by[name]} and by {source}; rename "
                "one (to change a sweep member, change the sweep's own entry)"
            )
        expanded[name], made_by[name] = method, source

    for key, entry in raw.items():
        if not isinstance(entry, dict):
            raise ValueError(f"method {key!r} must be a mapping, got {entry!r}")
        if not entry.get("sweep"):
            add(key, f"its entry methods.{key}", {**entry, "group": entry.get("group", key)})
            continue
        for name, method in _sweep_members(key, entry):
            add(name, f"the sweep of methods.{key}", method)
    return expanded


_ABSENT = object()


def _sweep_members(key: str, entry: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, method) of each value of method ``key``'s sweep, in the sweep's order (made
    one at a time: a member that ``expand_methods`` refuses stops the sweep there)."""
    sweep = entry["sweep"]
    if len(sweep) != 1:
        raise ValueError(f"method {key!r}: sweep one hyperparameter at a time, got {list(sweep)}")
    ((param, values),) = sweep.items()
    if not isinstance(values, list) or not values:
        raise ValueError(f"method {key!r}: sweep values for {param!r} must be a non-empty list")
    path = str(param).split(".")  # "secondary.kappa": a nested hyperparameter (composite)
    if _nested_get(entry.get("params") or {}, path) is not _ABSENT:  # the sweep would replace it
        raise ValueError(
            f"method {key!r} sets {param!r} in params and sweeps it ({values}); set it in "
            "one place (the sweep's values, or remove the sweep)"
        )
    for value in values:
        yield (
            f"{key}_{'_'.join(path)}_{_format_value(value)}",
            {
                **{k: v for k, v in entry.items() if k != "sweep"},
                "params": _nested_set(entry.get("params") or {}, path, value),
                "label": _sweep_label(key, str(entry.get("label", key)), param, path, value),
                "group": key,
            },
        )


def _sweep_label(key: str, template: str, param: str, path: list[str], value: Any) -> str:
    """The member's label: ``template`` formatted with the value where it has a placeholder,
    else with `` (param=value)`` appended."""
    if "{" not in template:
        return f"{template} ({param}={value})"
    try:
        return template.format(**{path[-1]: value})
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as error:
        raise ValueError(
            f"method {key!r}: its label {template!r} must name only the swept parameter, "
            f"as {{{path[-1]}}} ({type(error).__name__}: {error})"
        ) from None


def _nested_get(params: dict[str, Any], path: list[str]) -> Any:
    """``params[a][b]...`` along ``path``; ``_ABSENT`` where any step is missing (a value
    set to null is present: a sweep must not silently replace it either)."""
    value: Any = params
    for step in path:
        if not isinstance(value, dict) or step not in value:
            return _ABSENT
        value = value[step]
    return value


def _nested_set(params: dict[str, Any], path: list[str], value: Any) -> dict[str, Any]:
    """A copy of ``params`` with ``value`` at ``path`` (``secondary.kappa`` sets the kappa of
    the ``secondary`` mapping; a secondary given by name alone becomes ``{name: ...}``)."""
    out = dict(params)
    if len(path) == 1:
        out[path[0]] = value
        return out
    inner = out.get(path[0])
    if isinstance(inner, str):  # `secondary: avuc` is shorthand for `{name: avuc}`
        inner = {"name": inner}
    if not isinstance(inner, dict):
        raise ValueError(
            f"sweep of {'.'.join(path)!r}: params.{path[0]} is not a mapping ({inner!r})"
        )
    out[path[0]] = _nested_set(inner, path[1:], value)
    return out


def parse_structure(parameters: dict[str, Any]) -> Structure:
    """Validate and parse the structural parameters (methods, studies, splits, calibrators)."""
    for required in ("methods", "studies", "splits"):
        if required not in parameters:
            raise ValueError(f"parameters must define {required!r}")
    splits = tuple(parameters["splits"])
    calibrators = dict(parameters.get("calibrators") or {})
    methods = {
        key: _parse_method(key, entry, splits)
        for key, entry in expand_methods(parameters["methods"]).items()
    }
    default_seeds = parameters.get("seeds", [0])
    studies = {
        name: _parse_study(name, entry, parameters["studies"], methods, calibrators, default_seeds)
        for name, entry in parameters["studies"].items()
    }
    return Structure(methods, studies, splits, calibrators)


def _parse_method(key: str, entry: dict[str, Any], splits: tuple[str, ...]) -> MethodSpec:
    """Method ``key`` of the expanded ``methods`` parameters, its fields checked."""
    _check_key("method", key)
    objective, meta = entry.get("objective"), entry.get("meta_learner")
    if (objective is None) == (meta is None):
        raise ValueError(f"method {key!r} needs exactly one of 'objective' or 'meta_learner'")
    split = entry.get("split", "standard")
    if split not in splits:
        raise ValueError(f"method {key!r} uses unknown split {split!r}; splits are {list(splits)}")
    unknown = sorted(set(entry) - METHOD_FIELDS)
    if unknown:
        raise ValueError(f"method {key!r} has unknown field(s) {unknown}")
    return MethodSpec(
        key=key,
        label=str(entry.get("label", key)),
        split=split,
        objective=objective,
        meta_learner=meta,
        params=dict(entry.get("params") or {}),
        training=dict(entry.get("training") or {}),
        model=entry.get("model"),
        group=str(entry.get("group", key)),
        record_epoch_logits=check_bool(
            f"methods.{key}.record_epoch_logits", entry.get("record_epoch_logits", False)
        ),
    )


def _parse_study(
    name: str,
    entry: dict[str, Any],
    all_studies: dict[str, Any],
    methods: dict[str, MethodSpec],
    calibrators: dict[str, Any],
    default_seeds: Any,
) -> StudySpec:
    """Study ``name``: its members, calibrators, reports and seeds, checked."""
    _check_key("study", name)
    unknown_fields = sorted(set(entry) - set(STUDY_FIELDS))
    if unknown_fields:
        raise ValueError(
            f"study {name!r} has unknown field(s) {unknown_fields}; valid: {list(STUDY_FIELDS)}"
        )
    members = _study_members(name, entry.get("methods") or [], all_studies, methods)
    _check_distinct_labels(name, members, methods)
    reports = dict(entry.get("reports") or DEFAULT_REPORTS)
    study_calibrators = study_calibrator_keys(name, entry.get("calibrators"), reports, calibrators)
    seeds = _study_seeds(name, entry.get("seeds", default_seeds))
    return StudySpec(
        name=name,
        methods=tuple(members),
        seeds=tuple(seeds),
        calibrators=study_calibrators,
        reports=reports,
        on_request=check_bool(f"studies.{name}.on_request", entry.get("on_request", False)),
        ensembles=_study_ensembles(name, entry.get("ensembles"), members, seeds, methods),
    )


def _study_ensembles(
    study: str,
    raw: Any,
    members: list[str],
    seeds: list[int],
    methods: dict[str, MethodSpec],
) -> tuple[EnsembleSpec, ...]:
    """The study's ``ensembles``: a list of its method keys (``[ce]``: ``ce_ensemble`` of
    every seed) or a mapping key -> ``{methods, seeds, label}``.

    Raises:
        ValueError: not a list or mapping; a bad key or field; a method or seed the study
            lacks; fewer than 2 members; members trained on different splits; a key that
            names a method or a label that another row of the study's tables has.
    """
    if raw is None:
        return ()
    if isinstance(raw, list) and all(isinstance(m, str) for m in raw):
        raw = {f"{method}_ensemble": {"methods": [method]} for method in raw}
    if not isinstance(raw, dict) or not raw:
        raise ValueError(
            f"study {study!r}: ensembles must be a list of the study's method keys or a "
            f"mapping ensemble key -> {{methods, seeds, label}}, got {raw!r}"
        )
    specs = tuple(
        _ensemble(study, key, entry, members, seeds, methods) for key, entry in raw.items()
    )
    labels = [methods[m].label for m in members] + [spec.label for spec in specs]
    shared = sorted({label for label in labels if labels.count(label) > 1})
    if shared:
        raise ValueError(
            f"study {study!r}: ensemble label(s) {shared} are also another row's label; the "
            "tables would pool them into one row -- give each ensemble its own `label`"
        )
    return specs


def _ensemble(
    study: str,
    key: str,
    entry: Any,
    members: list[str],
    seeds: list[int],
    methods: dict[str, MethodSpec],
) -> EnsembleSpec:
    """Ensemble ``key`` of study ``study``, checked (``_study_ensembles``)."""
    where = f"study {study!r}: ensemble {key!r}"
    _check_key("ensemble", key)
    if key in methods:
        raise ValueError(f"{where} has the key of a method; its rows would mix with the method's")
    if not isinstance(entry, dict) or set(entry) - set(ENSEMBLE_FIELDS):
        raise ValueError(
            f"{where} must be a mapping with fields {list(ENSEMBLE_FIELDS)}, got {entry!r}"
        )
    listed = entry.get("methods")
    if not isinstance(listed, list) or not listed:
        raise ValueError(f"{where}: methods must be a non-empty list of the study's methods")
    chosen = _expand_members(listed, methods)
    unknown = [m for m in chosen if m not in members]
    if unknown:
        raise ValueError(
            f"{where} names method(s) {unknown} the study lacks; its methods: {members}"
        )
    chosen_seeds = _study_seeds(f"{study}.ensembles.{key}", entry.get("seeds", seeds))
    absent = [s for s in chosen_seeds if s not in seeds]
    if absent:
        raise ValueError(f"{where} names seed(s) {absent} the study lacks; its seeds: {seeds}")
    runs = tuple((m, s) for m in chosen for s in chosen_seeds)
    if len(runs) < 2:
        raise ValueError(
            f"{where} has {len(runs)} member run(s) ({runs}); an ensemble needs at least 2: "
            "more seeds or methods (an environment with one seed can set the study's `seeds`, "
            "or `ensembles: null` to have none)"
        )
    splits = sorted({methods[m].split for m in chosen})
    if len(splits) > 1:
        raise ValueError(
            f"{where}: its methods train on different splits {splits}; members must be "
            "evaluated on the same validation and test samples"
        )
    names = " + ".join(methods[m].label for m in chosen)
    label = entry.get("label", f"Ensemble of {names} ({len(runs)})")
    if not isinstance(label, str) or not label:
        raise ValueError(f"{where}: label must be a non-empty string, got {label!r}")
    return EnsembleSpec(key=key, label=label, members=runs)


def _study_members(
    name: str, members: Any, all_studies: dict[str, Any], methods: dict[str, MethodSpec]
) -> list[str]:
    """The method keys study ``name`` lists, sweeps expanded.

    Raises:
        ValueError: not a list, an empty list (naming the studies that list methods), or
            unknown methods.
    """
    if not isinstance(members, (list, tuple)):  # a string would be read letter by letter
        raise ValueError(
            f"study {name!r}: methods must be a list of method keys, got {members!r} "
            "(--params takes one key as methods=[ce]; it splits values at commas, so a "
            "list of several needs a run file: `kedro run --config`, docs/models.md)"
        )
    if not members:  # e.g. a misspelt `--params=studies.baselin.seeds=[1]` makes one
        raise ValueError(
            f"study {name!r} lists no methods; defined studies with methods: "
            f"{sorted(k for k, v in all_studies.items() if (v or {}).get('methods'))}"
        )
    missing = [m for m in _expand_members(members, methods) if m not in methods]
    if missing:
        raise ValueError(
            f"study {name!r} lists unknown method(s) {missing}; defined methods: {sorted(methods)}"
        )
    return _expand_members(members, methods)


def _check_distinct_labels(study: str, members: list[str], methods: dict[str, MethodSpec]) -> None:
    """Tables group rows by label: two methods of one label would be pooled into one row."""
    labelled: dict[str, list[str]] = {}
    for member in members:
        labelled.setdefault(methods[member].label, []).append(member)
    shared = {label: keys for label, keys in labelled.items() if len(keys) > 1}
    if shared:
        raise ValueError(
            f"study {study!r}: methods {shared} share a label; the study's tables would pool "
            "them into one row -- give each its own `label`"
        )


def _study_seeds(study: str, seeds: Any) -> list[int]:
    """A study's seeds: a non-empty list of distinct non-negative integers (not booleans)."""
    if (
        not isinstance(seeds, (list, tuple))
        or not seeds
        or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds)
    ):
        raise ValueError(f"study {study!r}: seeds must be non-negative integers, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"study {study!r} lists a seed twice: {list(seeds)}")
    return list(seeds)


def study_calibrator_keys(
    study: str, listed: Any, reports: dict[str, Any], defined: dict[str, Any]
) -> tuple[str, ...]:
    """The calibrators study ``study`` evaluates: those it lists itself (``listed``, its
    ``calibrators`` field), then those its reports read (``report_calibrators``).

    Raises:
        ValueError: ``listed`` is not a list, or a key that ``defined`` (the ``calibrators``
            parameters) lacks -- naming the study, the report that reads it and the
            defined keys.
    """
    if listed is not None and not isinstance(listed, list):
        raise ValueError(f"study {study!r}: calibrators must be a list of keys, got {listed!r}")
    named = dict.fromkeys(listed or [], "its `calibrators` list")
    for report, options in reports.items():
        try:
            keys = report_calibrators(report, dict(options or {}))
        except ValueError as error:
            raise ValueError(f"study {study!r}: {error}") from None
        for key in keys:
            named.setdefault(key, f"report {report!r}")
    for key, where in named.items():
        if key not in defined:
            raise ValueError(
                f"study {study!r}: {where} names unknown calibrator {key!r}; defined "
                f"calibrators (`calibrators` in parameters.yml): {sorted(defined)}"
            )
    return tuple(named)


def _expand_members(members: list[str], methods: dict[str, MethodSpec]) -> list[str]:
    """A study may name a sweep's group; it stands for every method of that group."""
    out: list[str] = []
    for member in members:
        group = [k for k, m in methods.items() if m.group == member and k != member]
        out.extend(group if member not in methods and group else [member])
    return out


def validate_buildable(structure: Structure, parameters: dict[str, Any]) -> None:
    """Check every named thing -- dataset, splits, models, methods, reports and their
    options, shift suites, calibrators -- so bad names and hyperparameters fail now."""
    dataset = parameters.get("dataset", {}).get("name")
    if dataset not in dataset_names():
        raise ValueError(
            f"unknown dataset {dataset!r}; valid dataset names are: {', '.join(dataset_names())}"
        )
    for name, split in parameters["splits"].items():
        try:
            check_fractions(split.get("fractions", {}))
        except ValueError as error:
            raise ValueError(f"split {name!r}: {error}") from None
    base_model = parameters.get("model", {})
    for method in structure.methods.values():
        model = method_model(base_model, method.model)
        try:
            check_model_params(model.get("name"), model.get("params"))
            training = method_training(parameters.get("training"), method.training)
        except ValueError as error:
            raise ValueError(f"method {method.key!r}: {error}") from None
        check_method(method, training)
    for study in structure.studies.values():
        for report, options in study.reports.items():
            try:
                check_report(report, dict(options or {}))
            except ValueError as error:
                raise ValueError(f"study {study.name!r}: {error}") from None
    resolve_suites(parameters.get("shift") or {}, dataset)
    for key, entry in structure.calibrators.items():
        try:
            build_calibrator(entry["name"], **(entry.get("params") or {}))
        except (KeyError, TypeError, ValueError) as error:  # TypeError: params not a mapping
            raise ValueError(f"calibrator {key!r}: {error}") from None
