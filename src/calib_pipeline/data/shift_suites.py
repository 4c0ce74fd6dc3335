"""Shift suites: the ``shift`` parameters as a plan of shifted sets (pure PyTorch/NumPy).

:func:`resolve_suites` expands and validates the parameters (no image is touched);
:func:`plan_shift_sets` turns them into a :class:`ShiftPlan` -- one :class:`ShiftSetSpec`
per (suite, corruption, severity) -- and :func:`predict_shift_sets` runs a predictor over
every set of a plan.

Labels (the tidy table's ``shift`` column; docs/shift.md, "Shift suites in the pipeline"):
a generated corruption is its bare name (``gaussian_noise``, source ``"generated"``), an
official set is prefixed by its name (``cifar10_c:gaussian_noise``, ``cifar10_1``,
``cifar10_1:v4`` for a non-default variant), so a generated look-alike can never be read
as the official benchmark. Natural sets and MNIST-C have no severity: 0.

Memory: shifted sets are stored as uint8 (as H&D's files are) and kept in the plan only up
to ``cache_mb``; a set beyond that budget is regenerated (or re-read) inside each run's
prediction, one set at a time, so peak memory is the cache plus one set whatever the suite.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import torch

from calib_pipeline.data.corruptions import (
    BENCHMARK_CORRUPTIONS,
    SEVERITIES,
    CorruptionUnavailable,
    check_corruption,
    check_severity,
    corrupt,
    corruption_names,
)
from calib_pipeline.data.datasets import ImageData, to_float
from calib_pipeline.data.shift_sets import (
    CIFAR_C_CORRUPTIONS,
    MNIST_C_CORRUPTIONS,
    SHIFT_SETS,
    TINY_IMAGENET_C_CORRUPTIONS,
    load_shift_set,
)
from calib_pipeline.data.splits import split_dataset, split_fingerprint
from calib_pipeline.registry import check_int

logger = logging.getLogger(__name__)

GENERATED = "generated"
NATURAL_SETS = ("cifar10_1", "cifar10_2")
# official corrupted sets -> their corruption names ("all"); "benchmark" keeps H&D's 15
CORRUPTED_SETS: dict[str, tuple[str, ...]] = {
    "cifar10_c": CIFAR_C_CORRUPTIONS,
    "cifar100_c": CIFAR_C_CORRUPTIONS,
    "tiny_imagenet_c": TINY_IMAGENET_C_CORRUPTIONS,
    "mnist_c": tuple(c for c in MNIST_C_CORRUPTIONS if c != "identity"),
}
UNGRADED_SETS = ("mnist_c",)
PREDICT_BLOCK_BYTES = 64 * 2**20  # one file per corruption, no severities
# the training set whose test images each official set shifts
OFFICIAL_DATASET = {
    "cifar10_c": "cifar10",
    "cifar10_1": "cifar10",
    "cifar10_2": "cifar10",
    "cifar100_c": "cifar100",
    "tiny_imagenet_c": "tiny_imagenet",
    "mnist_c": "mnist",
}
SHIFT_DEFAULTS: dict[str, Any] = {
    "seed": 0,
    "corruptions": "all",
    "severities": list(SEVERITIES),
    "corruption_source": GENERATED,
    "corruption_options": {},
    "natural": [],
    "root": None,
    "frost_dir": None,
    "chunk_size": 2000,
    "cache_mb": 2048,
    "shifted_val": None,
}


@dataclass(frozen=True)
class ShiftSetSpec:
    """One shifted set: where its images come from and how it is labelled."""

    key: str  # key in the per-run output, e.g. "fog/3", "cifar10_1/0", "val/fog/3"
    shift: str  # tidy ``shift`` label
    severity: int  # 1..5; 0 for ungraded sets
    source: str  # "generated" or the official set's name
    split: str = "test"  # "test", or "val" for shifted validation sets
    corruption: str | None = None
    options: dict[str, Any] = field(default_factory=dict)  # official loader options


@dataclass
class ShiftPlan:
    """The shifted sets of a study, the clean images they derive from, and a uint8 cache.

    ``clean`` maps ``"test"`` and ``"val:<split>"`` to (images, labels); ``val_sets`` maps a
    split name to its shifted validation specs; ``skipped`` maps a label to the reason;
    ``dataset`` names the dataset and ``split_hashes`` maps each split name to the hash of
    the split its parameters make (a run trained on another split is refused);
    ``cache`` maps :meth:`cache_key` to (uint8 images, labels).
    """

    test_sets: list[ShiftSetSpec]
    val_sets: dict[str, list[ShiftSetSpec]]
    skipped: dict[str, str]
    clean: dict[str, tuple[torch.Tensor, torch.Tensor]]
    settings: dict[str, Any]
    num_classes: int
    dataset: str
    split_hashes: dict[str, str]
    cache: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)

    def sets_for(self, split: str) -> list[ShiftSetSpec]:
        """The test sets, then the shifted validation sets of the run's ``split``."""
        return self.test_sets + self.val_sets.get(split, [])

    @staticmethod
    def cache_key(spec: ShiftSetSpec, split: str) -> str:
        return spec.key if spec.split == "test" else f"{split}|val/{spec.key}"

    def images(self, spec: ShiftSetSpec, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        """uint8 images (N, C, H, W) and labels of ``spec`` (``split``: the run's split,
        which picks the val part a shifted validation set derives from)."""
        cached = self.cache.get(self.cache_key(spec, split))
        if cached is not None:
            return cached
        if spec.source == GENERATED:
            images, labels = self.clean["test" if spec.split == "test" else f"val:{split}"]
            settings = self.settings
            return generate_corrupted(
                images,
                spec.corruption,
                spec.severity,
                seed=int(settings["seed"]),
                chunk_size=int(settings["chunk_size"]),
                frost_dir=settings["frost_dir"],
            ), labels
        images, labels = load_shift_set(spec.source, self.settings["root"], **spec.options)
        self._check_compatible(spec, images, labels)
        return to_uint8(images), labels

    def _check_compatible(
        self, spec: ShiftSetSpec, images: torch.Tensor, labels: torch.Tensor
    ) -> None:
        """An official set must have the dataset's image shape and label range."""
        expected = tuple(self.clean["test"][0].shape[1:])
        top = int(labels.max()) if len(labels) else 0
        if tuple(images.shape[1:]) != expected or top >= self.num_classes:
            raise ValueError(
                f"shift set {spec.shift!r}: images {tuple(images.shape[1:])} with labels up "
                f"to {top} do not match the dataset ({expected}, {self.num_classes} classes)"
            )


class ShiftLabel(NamedTuple):
    source: str  # "generated" or an official set
    kind: str  # "corruption" or "natural"
    name: str  # corruption name, or the natural set's label


def shift_label(source: str, name: str = "") -> str:
    """The tidy ``shift`` value of a set (see the module docstring)."""
    if source == GENERATED:
        return name
    return f"{source}:{name}" if name else source


def parse_shift(label: str) -> ShiftLabel:
    """Inverse of :func:`shift_label`: source, kind and corruption (or set) of a label."""
    head, _, tail = label.partition(":")
    if head in NATURAL_SETS:
        return ShiftLabel(head, "natural", label)
    if head in CORRUPTED_SETS and tail:
        return ShiftLabel(head, "corruption", tail)
    return ShiftLabel(GENERATED, "corruption", label)


def to_uint8(images: torch.Tensor) -> torch.Tensor:
    """[0, 1] floats -> uint8 (round to nearest), the storage format of H&D's files."""
    return images.mul(255).round_().to(torch.uint8)


def generate_corrupted(
    images: torch.Tensor,
    name: str,
    severity: int,
    *,
    seed: int,
    chunk_size: int,
    frost_dir: Any = None,
) -> torch.Tensor:
    """Corrupt ``images`` in chunks; chunk i is drawn with seed ``SeedSequence([seed, i])``.

    Args:
        images: clean images (N, C, H, W), uint8 or float in [0, 1].
        name, severity: the corruption.
        seed: the suite's seed; the result is a pure function of (images, name, severity,
            seed, chunk_size).
        chunk_size: images per :func:`corrupt` call (bounds its temporaries).
        frost_dir: H&D's frost photographs (frost only).

    Returns:
        uint8 images of the same shape.
    """
    parts = []
    for index, start in enumerate(range(0, len(images), chunk_size)):
        # distinct streams per chunk: one seed for every chunk would repeat the noise
        chunk_seed = int(np.random.SeedSequence([seed, index]).generate_state(1)[0])
        chunk = to_float(images[start : start + chunk_size])
        parts.append(to_uint8(corrupt(chunk, name, severity, seed=chunk_seed, frost_dir=frost_dir)))
    return torch.cat(parts) if parts else torch.empty(images.shape, dtype=torch.uint8)


def shift_settings(shift: dict[str, Any]) -> dict[str, Any]:
    """The ``shift`` parameters over :data:`SHIFT_DEFAULTS`; unknown keys raise ``ValueError``."""
    unknown = sorted(set(shift) - set(SHIFT_DEFAULTS))
    if unknown:
        raise ValueError(
            f"shift parameters: unknown key(s) {unknown}; valid keys: {list(SHIFT_DEFAULTS)}"
        )
    settings = {**SHIFT_DEFAULTS, **shift}
    check_int("shift.chunk_size", settings["chunk_size"], low=1)
    check_int("shift.cache_mb", settings["cache_mb"], low=0)
    return settings


def _check_official_source(source: str, dataset: str, settings: dict[str, Any]) -> None:
    """Refuse an official corrupted set of another dataset, without ``root``, or with
    options it does not take."""
    _check_official(source, dataset, settings["root"])
    unknown_options = sorted(set(settings["corruption_options"]) - {"class_order"})
    if unknown_options:
        raise ValueError(
            f"shift.corruption_options: unknown option(s) {unknown_options}; valid: ['class_order']"
        )


def _corruption_specs(
    source: str,
    names: list[str],
    severities: list[int],
    settings: dict[str, Any],
    channels: int | None,
) -> tuple[list[ShiftSetSpec], dict[str, str]]:
    """The test set specs of each corruption at each severity (one ungraded set for the
    sets without severities), and the generated corruptions skipped, with why."""
    skipped: dict[str, str] = {}
    tests = []
    for name in names:
        if source == GENERATED:
            reason = _unavailable(name, channels, settings["frost_dir"])
            if reason:
                skipped[name] = reason
                continue
        label = shift_label(source, name)
        options = (
            {} if source == GENERATED else {"corruption": name, **settings["corruption_options"]}
        )
        for severity in [0] if source in UNGRADED_SETS else severities:
            tests.append(
                ShiftSetSpec(
                    f"{label}/{severity}",
                    label,
                    severity,
                    source,
                    corruption=name,
                    options={**options, "severity": severity} if options and severity else options,
                )
            )
    return tests, skipped


def resolve_suites(
    shift: dict[str, Any], dataset: str, channels: int | None = None
) -> tuple[list[ShiftSetSpec], list[ShiftSetSpec], dict[str, str]]:
    """Expand and validate the ``shift`` parameters (no image is touched).

    Args:
        shift: the ``shift`` parameters (keys of :data:`SHIFT_DEFAULTS`).
        dataset: the dataset name; an official set must shift this dataset.
        channels: image channels, when known (saturate is unavailable for 1).

    Returns:
        (test set specs, shifted validation specs, skipped label -> reason).

    Raises:
        ValueError: unknown key, corruption, severity, source or natural set, a set of
            another dataset, or an official set without ``root``.
    """
    settings = shift_settings(shift)
    source = settings["corruption_source"]
    if source != GENERATED and source not in CORRUPTED_SETS:
        raise ValueError(
            f"shift.corruption_source must be {GENERATED!r} or one of {list(CORRUPTED_SETS)}, "
            f"got {source!r}"
        )
    severities = _severities(settings["severities"], "shift.severities")
    names = _corruptions(settings["corruptions"], source, "shift.corruptions")
    if source != GENERATED:
        _check_official_source(source, dataset, settings)
    tests, skipped = _corruption_specs(source, names, severities, settings, channels)
    for name, options in _natural(settings["natural"]).items():
        _check_official(name, dataset, settings["root"])
        label = shift_label(name, _variant(name, options))
        tests.append(ShiftSetSpec(f"{label}/0", label, 0, name, options=options))
    vals = _shifted_val(settings, channels)
    return tests, vals, skipped


# The shift settings that decide which sets a run's shift logits hold and what is in them
# (not where files are read from, nor how they are chunked and cached).
# (``frost_dir`` is one: frost is generated only where its images are found.)
DEFINING_SETTINGS = (
    "corruption_source",
    "corruptions",
    "severities",
    "seed",
    "corruption_options",
    "natural",
    "shifted_val",
    "frost_dir",
)


def defining_settings(shift: dict[str, Any]) -> dict[str, Any]:
    """The :data:`DEFINING_SETTINGS` of the ``shift`` parameters, defaults filled in and
    spelled one way: ``corruptions: all`` as the names it means, severities sorted,
    ``natural`` as a mapping -- so equal settings written differently compare equal."""
    settings = shift_settings(shift)
    defining = {key: settings[key] for key in DEFINING_SETTINGS}
    source = settings["corruption_source"]
    defining["corruptions"] = sorted(
        _corruptions(settings["corruptions"], source, "shift.corruptions")
    )
    defining["severities"] = sorted(_severities(settings["severities"], "shift.severities"))
    defining["natural"] = _natural(settings["natural"])
    return defining


def _in_label_order(settings: dict[str, Any], data: ImageData) -> dict[str, Any]:
    """Label an official set whose loader takes ``class_order`` in the dataset's own order.

    Tiny-ImageNet is labelled in the order of its ``wnids.txt``, which is not sorted; the
    Tiny-ImageNet-C loader's own default (sorted wnid folders) would give every corrupted
    image another class's label. A ``class_order`` other than the dataset's is refused:
    the models trained here only know the dataset's order.
    """
    if settings["corruption_source"] != "tiny_imagenet_c" or not data.classes:
        return settings
    options = dict(settings["corruption_options"])
    given = options.get("class_order")
    if given is not None and list(given) != list(data.classes):
        raise ValueError(
            "shift.corruption_options.class_order differs from the label order of "
            f"{data.name!r} (its wnids.txt: {list(data.classes)[:3]}...), so the corrupted "
            "images would get other labels than the clean ones; leave class_order out "
            "(the dataset's own order is used)"
        )
    options["class_order"] = list(data.classes)
    return {**settings, "corruption_options": options}


def plan_shift_sets(data: ImageData, splits: dict[str, Any], shift: dict[str, Any]) -> ShiftPlan:
    """Plan the shifted sets and materialise those that fit the ``cache_mb`` budget.

    Args:
        data: the dataset (its test part is corrupted).
        splits: the ``splits`` parameters: each split's hash is recorded and, for
            ``shifted_val``, its val part is corrupted (identical to the data_split stage's).
        shift: the ``shift`` parameters (docs/shift.md).

    Returns:
        The plan handed to every run's :func:`predict_shift_sets`.
    """
    settings = shift_settings(shift)
    tests, vals, skipped = resolve_suites(
        _in_label_order(settings, data), data.name, data.in_channels
    )
    _warn_skipped(skipped)
    clean = {"test": (data.test_images, data.test_labels)}
    val_sets: dict[str, list[ShiftSetSpec]] = {}
    parts = {name: split_dataset(data, split) for name, split in splits.items()}
    if vals:
        for name, split_parts in parts.items():
            index = torch.as_tensor(split_parts["val"], dtype=torch.long)
            clean[f"val:{name}"] = (data.train_images[index], data.train_labels[index])
            val_sets[name] = vals
    split_hashes = {name: split_fingerprint(split_parts) for name, split_parts in parts.items()}
    plan = ShiftPlan(
        tests, val_sets, skipped, clean, settings, data.num_classes, data.name, split_hashes
    )
    budget, used = settings["cache_mb"] * 2**20, 0
    started = time.perf_counter()
    work = [("test", spec) for spec in tests] + [
        (name, spec) for name, specs in val_sets.items() for spec in specs
    ]
    for split, spec in work:
        # budget by the clean set's size: official sets have (about) the test set's
        reference = clean["test" if spec.split == "test" else f"val:{split}"][0]
        if used + reference.numel() > budget:
            continue
        plan.cache[plan.cache_key(spec, split)] = images_labels = plan.images(spec, split)
        used += images_labels[0].numel()
    logger.info(
        "shift: %d test and %d val set(s); %d made once and cached (%.1f MB uint8, %.1f s), "
        "%d made inside each run (cache_mb=%d)",
        len(tests),
        sum(map(len, val_sets.values())),
        len(plan.cache),
        used / 2**20,
        time.perf_counter() - started,
        len(work) - len(plan.cache),
        settings["cache_mb"],
    )
    return plan


def predict_shift_sets(
    predict: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
    plan: ShiftPlan,
    split: str,
) -> dict[str, dict[str, Any]]:
    """Logits of one trained run (``predict``: uint8 images -> (logits, features)) on every
    shifted set of ``plan``; ``split`` is the run's split (it picks the shifted val sets).

    Small sets are predicted together (up to :data:`PREDICT_BLOCK_BYTES` of uint8 images
    per forward sweep: 85 digits sets cost one sweep instead of 85); a set the plan did
    not cache is made only when its block is reached.

    Returns:
        spec key -> ``{"logits", "labels", "shift", "severity", "source", "split"}``; every
        skipped corruption adds ``"skipped/<label>" -> {"shift", "severity": 0, "source",
        "split", "skipped": reason}`` (no logits), so reports can list it.
    """
    out: dict[str, dict[str, Any]] = {}
    for block in _blocks(plan, split):
        images = [images for _, images, _ in block]
        logits, _ = predict(images[0] if len(images) == 1 else torch.cat(images))
        for (spec, _, labels), part in zip(block, logits.split([len(i) for i in images])):
            out[spec.key if spec.split == "test" else f"val/{spec.key}"] = {
                "logits": part,
                "labels": labels,
                "shift": spec.shift,
                "severity": spec.severity,
                "source": spec.source,
                "split": spec.split,
            }
    for label, reason in plan.skipped.items():
        out[f"skipped/{label}"] = {
            "shift": label,
            "severity": 0,
            "source": GENERATED,
            "split": "test",
            "skipped": reason,
        }
    return out


def _blocks(
    plan: ShiftPlan, split: str
) -> Iterator[list[tuple[ShiftSetSpec, torch.Tensor, torch.Tensor]]]:
    """Consecutive (spec, uint8 images, labels) of the run's sets, grouped up to
    :data:`PREDICT_BLOCK_BYTES` (a set larger than that is a block of its own)."""
    block: list[tuple[ShiftSetSpec, torch.Tensor, torch.Tensor]] = []
    size = 0
    for spec in plan.sets_for(split):
        images, labels = plan.images(spec, split)
        if block and size + images.numel() > PREDICT_BLOCK_BYTES:
            yield block
            block, size = [], 0
        block.append((spec, images, labels))
        size += images.numel()
    if block:
        yield block


def _severities(values: Any, name: str) -> list[int]:
    """The distinct severities of a non-empty list, in order; the error quotes the list."""
    if isinstance(values, (list, tuple)) and values:
        try:
            return list(dict.fromkeys(check_severity(severity) for severity in values))
        except ValueError:
            pass  # reported below for the whole list
    raise ValueError(
        f"{name} must be a non-empty list of integers in {list(SEVERITIES)}, got {values!r}"
    )


def _corruptions(values: Any, source: str, name: str) -> list[str]:
    valid = corruption_names() if source == GENERATED else list(CORRUPTED_SETS[source])
    benchmark = [c for c in valid if c in BENCHMARK_CORRUPTIONS] if source != "mnist_c" else valid
    if values in ("all", "benchmark"):
        return valid if values == "all" else benchmark
    if not isinstance(values, (list, tuple)):  # a configuration error: ValueError, as elsewhere
        raise ValueError(f"{name} must be 'all', 'benchmark' or a list of names, got {values!r}")
    unknown = [v for v in values if v not in valid]
    if unknown:
        raise ValueError(
            f"{name}: unknown corruption(s) {unknown} for source {source!r}; valid: {valid}"
        )
    return list(dict.fromkeys(values))


# Why a requested generated corruption is skipped, in a few words (the reports and the
# DEBUG log give the full reason); each set of skipped corruptions is warned about once per
# process, when shifted sets are planned -- not each time the parameters are checked.
SKIP_REASONS = {
    "frost": "needs H&D's frost photographs: set shift.frost_dir, see docs/shift.md",
    "saturate": "not defined for greyscale images",
}
_WARNED_SKIPS: set[tuple[str, ...]] = set()


def _warn_skipped(skipped: dict[str, str]) -> None:
    key = tuple(sorted(skipped))
    if not skipped or key in _WARNED_SKIPS:
        return
    _WARNED_SKIPS.add(key)
    logger.warning(
        "shift: skipped %d generated corruption(s): %s",
        len(skipped),
        "; ".join(f"{name} ({SKIP_REASONS.get(name, reason)})" for name, reason in skipped.items()),
    )
    for name, reason in skipped.items():
        logger.debug("shift: %s skipped: %s", name, reason)


def _unavailable(name: str, channels: int | None, frost_dir: Any) -> str:
    """Why a generated corruption cannot run here ('' if it can)."""
    try:
        check_corruption(name, 1, channels=channels or 3, frost_dir=frost_dir)
    except CorruptionUnavailable as error:
        return str(error)
    return ""


def _natural(values: Any) -> dict[str, dict[str, Any]]:
    entries = {v: {} for v in values} if isinstance(values, (list, tuple)) else dict(values or {})
    unknown = [v for v in entries if v not in NATURAL_SETS]
    if unknown:
        raise ValueError(f"shift.natural: unknown set(s) {unknown}; valid: {list(NATURAL_SETS)}")
    for name, options in entries.items():
        allowed = [p for p in inspect.signature(SHIFT_SETS.factory(name)).parameters if p != "root"]
        bad = sorted(set(options or {}) - set(allowed))
        if bad:
            raise ValueError(f"shift.natural.{name}: unknown option(s) {bad}; valid: {allowed}")
    return {name: dict(options or {}) for name, options in entries.items()}


def _variant(name: str, options: dict[str, Any]) -> str:
    """Option values that differ from the loader's defaults, joined (``v4``); '' if none."""
    defaults = {
        p.name: p.default for p in inspect.signature(SHIFT_SETS.factory(name)).parameters.values()
    }
    return "-".join(str(v) for k, v in options.items() if defaults.get(k) != v)


def _shifted_val(settings: dict[str, Any], channels: int | None) -> list[ShiftSetSpec]:
    """Generated corruptions of each run's val split (calibrators fitted on shifted val)."""
    entry = settings["shifted_val"]
    if not entry:
        return []
    unknown = sorted(set(entry) - {"corruptions", "severities"})
    if unknown:
        raise ValueError(
            f"shift.shifted_val: unknown key(s) {unknown}; valid: ['corruptions', 'severities']"
        )
    names = _corruptions(
        entry.get("corruptions", "all"), GENERATED, "shift.shifted_val.corruptions"
    )
    severities = _severities(
        entry.get("severities", list(SEVERITIES)), "shift.shifted_val.severities"
    )
    return [
        ShiftSetSpec(f"{name}/{s}", name, s, GENERATED, split="val", corruption=name)
        for name in names
        if not _unavailable(name, channels, settings["frost_dir"])
        for s in severities
    ]


def _check_official(name: str, dataset: str, root: Any) -> None:
    if OFFICIAL_DATASET[name] != dataset:
        raise ValueError(
            f"shift set {name!r} shifts the {OFFICIAL_DATASET[name]} test set; "
            "this run's dataset is "
            f"{dataset!r} (use generated corruptions, or the {OFFICIAL_DATASET[name]} environment)"
        )
    if not root:
        raise ValueError(f"shift set {name!r} is read from files: set shift.root (docs/shift.md)")
