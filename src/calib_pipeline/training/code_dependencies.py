"""Which code a training depends on: the one table that decides whether a completed
training is reused after the code changed (docs/reliability.md, "Reuse and code changes").

A training depends on four *parts*, each the closure (``code_units.SourceIndex.closure``:
the units it refers to, transitively) of its roots:

========================  ====================================================================
part                      roots
========================  ====================================================================
``engine``                ``training/run.py::train_run`` and ``::_train``: the run, the loop,
                          checkpoint and resume, optimiser and schedule, per-epoch evaluation,
                          splitting into tensors and augmentation (``training/data.py``). The
                          registries in :data:`DISPATCHED` are not followed from it: the engine
                          builds only the run's own objective or meta-learner, model and
                          dataset (parts of their own), and of the metrics only ``ece``, which
                          it names. The reuse decision (:data:`REUSE_DECISION`) is left out: it
                          decides whether to train, not what is learned.
``objective``             the factory registered under the run's objective name
(or ``meta_learner``)     (``calibration.losses.OBJECTIVES``; ``calibration.meta.META_LEARNERS``)
``model``                 the factory registered under the run's model name
                          (``models.registry.MODELS``)
``data``                  ``data/datasets.py::load_dataset`` and the entry registered under the
                          run's dataset name (``data.datasets.DATASETS``); the split's indices
                          are in the configuration's ``split_hash``
========================  ====================================================================

So adding an objective -- in its own file or appended to ``losses.py`` -- changes no other
method's parts; editing one changes the parts of the methods that reach it. A factory defined
outside the package (a notebook, a test) is one unit: its own source, without closure.

A run's **shifted-set logits** are reused by the same rule (:func:`shift_logits_code`): the
closure of :data:`SHIFT_LOGITS_ROOTS` -- planning and making the shifted sets (the generated
corruptions, the official sets' loaders) and predicting on them. The trained network is the
checkpoint's, whose own code is its training's.
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from calib_pipeline.calibration.losses import OBJECTIVES
from calib_pipeline.calibration.meta import META_LEARNERS
from calib_pipeline.code_units import PACKAGE, SourceIndex, digest_of, source_index
from calib_pipeline.data.datasets import DATASETS
from calib_pipeline.models.registry import MODELS
from calib_pipeline.registry import Registry

ENGINE_ROOTS = ("training/run.py::train_run", "training/run.py::_train")
DATA_ROOTS = ("data/datasets.py::load_dataset",)
# Which stored training to use and what to say about it -- and this table itself: left out of
# the engine (``_train``, which runs the engine, is a root of its own).
REUSE_DECISION = (
    "training/run.py::_train_or_reuse",
    "training/code_dependencies.py::training_code",
    "training/code_dependencies.py::part_digests",
)
# Registries whose lookups in the engine (and in the data path) are not followed: the run's
# own entry is its own part. ``metrics`` too: the engine scores with ``metrics.ece``, whose
# registering statement is in its closure.
DISPATCHED = (
    "calibration/losses.py::OBJECTIVES",
    "calibration/meta.py::META_LEARNERS",
    "models/registry.py::MODELS",
    "data/datasets.py::DATASETS",
    "calibration/metrics.py::METRICS",
)
# What makes a run's shifted-set logits besides its checkpoint (the shift stage's reuse).
SHIFT_LOGITS_ROOTS = (
    "data/shift_suites.py::plan_shift_sets",
    "data/shift_suites.py::predict_shift_sets",
    "training/predict.py::checkpoint_predictor",
)
# part -> the registry its entry is looked up in
ENTRY_REGISTRIES: dict[str, Registry[Any]] = {
    "objective": OBJECTIVES,
    "meta_learner": META_LEARNERS,
    "model": MODELS,
    "data": DATASETS,
}

# part -> unit name -> unit digest
CodeUnits = dict[str, dict[str, str]]


def training_code(
    *,
    objective: str | None,
    meta_learner: str | None,
    model: str,
    dataset: str,
    root: Path = PACKAGE,
) -> CodeUnits:
    """The units each part of a training depends on, as read from the sources under ``root``.

    Args:
        objective, meta_learner: the run's method (exactly one is set).
        model: the run's model name.
        dataset: the run's dataset name.
        root: the package's sources (another copy of them in tests).

    Returns:
        ``{part: {unit name: digest}}`` for the parts ``engine``, ``objective`` or
        ``meta_learner``, ``model`` and ``data``.
    """
    index = source_index(Path(root))
    method = ("objective", objective) if objective is not None else ("meta_learner", meta_learner)
    return {
        "engine": index.closure(ENGINE_ROOTS, not_followed=DISPATCHED, excluded=REUSE_DECISION),
        method[0]: _entry_closure(index, method[0], str(method[1])),
        "model": _entry_closure(index, "model", model),
        "data": {
            **index.closure(DATA_ROOTS, not_followed=DISPATCHED),
            **_entry_closure(index, "data", dataset),
        },
    }


def shift_logits_code(root: Path = PACKAGE) -> dict[str, str]:
    """The units a run's shifted-set logits depend on beyond its checkpoint (unit name ->
    digest): stored logits are reused only when these are unchanged."""
    return source_index(Path(root)).closure(SHIFT_LOGITS_ROOTS, not_followed=DISPATCHED)


def part_digests(code: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """One digest per part: what a run's configuration and provenance record."""
    return {part: digest_of(dict(units)) for part, units in sorted(code.items())}


def changed_units(
    before: Mapping[str, Mapping[str, str]], now: Mapping[str, Mapping[str, str]]
) -> dict[str, list[str]]:
    """Per part whose digest differs, the units added, removed or edited (sorted)."""
    changed = {}
    for part in sorted(set(before) | set(now)):
        old, new = before.get(part, {}), now.get(part, {})
        units = sorted(u for u in set(old) | set(new) if old.get(u) != new.get(u))
        if units:
            changed[part] = units
    return changed


def _entry_closure(index: SourceIndex, part: str, name: str) -> dict[str, str]:
    """The closure of the unit that registers ``name`` in the part's registry."""
    factory = ENTRY_REGISTRIES[part].factory(name)
    source = Path(inspect.getsourcefile(factory) or "").resolve()
    if not source.is_relative_to(PACKAGE):
        return {_outside_name(factory): _outside_digest(factory)}
    path = source.relative_to(PACKAGE).as_posix()
    qualname = getattr(factory, "__qualname__", "")
    if qualname.isidentifier():
        root = f"{path}::{qualname}"
    else:  # a lambda or a nested function: the top-level statement that registers it
        root = index.unit_at(path, inspect.getsourcelines(factory)[1]).name
    return index.closure([root])


def _outside_name(factory: Any) -> str:
    return f"{factory.__module__}::{getattr(factory, '__qualname__', repr(factory))}"


def _outside_digest(factory: Any) -> str:
    """A factory defined outside the package: its source where Python finds it."""
    try:
        text = inspect.getsource(factory)
    except (OSError, TypeError):
        code = getattr(factory, "__code__", None)
        text = repr((code.co_code, code.co_consts)) if code else repr(factory)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
