"""Deep ensembles of a study's runs, scored as extra rows of its tidy metrics table.

A study's ``ensembles`` field (``docs/ensembles.md``) names, per ensemble, its member runs
(methods × seeds of the study). No training: the ensemble is computed from the members'
cached logits (:mod:`calib_pipeline.calibration.ensembles`) when the study is evaluated.
Its rows in the tidy table have

- ``method`` = the ensemble's key, ``label`` = its label (default ``Ensemble of CE (3)``);
- ``seed`` = :data:`ENSEMBLE_SEED` (-1): an ensemble is one run -- its rows have no seed
  spread, tables show its value without ``±`` and statistical tests treat it as a single
  value;
- ``run_id`` = the members' training run ids joined by ``+`` (the members' provenance);
- ``calibrator`` = ``none`` (the averaged probabilities), ``<key>`` for
  **pool-then-calibrate** (calibrator ``<key>`` fitted on the ensemble's validation
  predictions, ``log p̄``) and ``<key>@calibrate_then_pool`` for **calibrate-then-pool**
  (each member's own stored ``<key>``, then the average).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from calib_pipeline.calibration.ensembles import (
    calibrate_then_pool,
    log_probabilities,
    pooled_probabilities,
)
from calib_pipeline.training.artifacts import SHIFTED_VAL_SUFFIX, fit_run_calibrators

ENSEMBLE_SEED = -1  # the seed column of an ensemble's rows: one run, no seed of its own
CALIBRATE_THEN_POOL_SUFFIX = "@calibrate_then_pool"
CLEAN_SETS = ("val", "test")


@dataclass(frozen=True)
class EnsembleSpec:
    """One ensemble of a study: its key (the ``method`` of its rows), label and member
    runs ``(method, seed)``, in order."""

    key: str
    label: str
    members: tuple[tuple[str, int], ...]

    @property
    def methods(self) -> tuple[str, ...]:
        """The members' methods, each once, in order."""
        return tuple(dict.fromkeys(method for method, _ in self.members))

    @property
    def seeds(self) -> tuple[int, ...]:
        """The members' seeds, each once, in order."""
        return tuple(dict.fromkeys(seed for _, seed in self.members))

    def record(self) -> dict[str, Any]:
        """The ensemble as plain data (its provenance in a report)."""
        return {
            "key": self.key,
            "label": self.label,
            "n_members": len(self.members),
            "methods": list(self.methods),
            "seeds": list(self.seeds),
            "members": [f"{method} seed {seed}" for method, seed in self.members],
        }


def is_ensemble_seed(seed: Any) -> bool:
    """Whether a tidy row's ``seed`` marks an ensemble's row (:data:`ENSEMBLE_SEED`)."""
    return int(seed) == ENSEMBLE_SEED


def _member_runs(spec: EnsembleSpec, runs: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The evaluated runs of the ensemble's members, in order (``runs`` is keyed
    ``"<method>|<seed>"``, as :func:`~calib_pipeline.reports.evaluation.evaluate_runs`)."""
    missing = [f"{m} seed {s}" for m, s in spec.members if f"{m}|{s}" not in runs]
    if missing:
        raise KeyError(f"ensemble {spec.key!r}: member run(s) {missing} are not in the study")
    return [runs[f"{m}|{s}"] for m, s in spec.members]


def _aligned_sets(spec: EnsembleSpec, members: list[dict[str, Any]]) -> dict[str, list[dict]]:
    """Set name -> every member's entry of that set: the clean splits, then the shifted sets
    every member has logits for; ``ValueError`` where the members' labels differ (members
    must be scored on the same samples)."""
    sets = {name: [m["logits"][name] for m in members] for name in CLEAN_SETS}
    shifted = [m.get("shift") or {} for m in members]
    for name in shifted[0]:
        entries = [s.get(name) or {} for s in shifted]
        if all("logits" in entry for entry in entries):
            sets[f"shift:{name}"] = entries
    for name, entries in sets.items():
        labels = [torch.as_tensor(e["labels"]) for e in entries]
        if any(not torch.equal(other, labels[0]) for other in labels[1:]):
            raise ValueError(
                f"ensemble {spec.key!r}: its members' labels differ on {name!r}; members must "
                "be evaluated on the same samples (the same split)"
            )
    return sets


def _set_entry(template: dict[str, Any], probabilities: torch.Tensor) -> dict[str, Any]:
    """A set of the ensemble: ``template``'s fields (labels, shift, severity, split) with
    the ensemble's probabilities and their logs as its logits."""
    return {**template, "probs": probabilities, "logits": log_probabilities(probabilities)}


def _as_run(sets: dict[str, dict[str, Any]], run_id: str) -> dict[str, Any]:
    """An ``evaluate_runs`` entry from set name -> entry (``shift:<name>`` are shifted)."""
    return {
        "logits": {name: sets[name] for name in CLEAN_SETS},
        "shift": {k.split(":", 1)[1]: v for k, v in sets.items() if k.startswith("shift:")},
        "run_id": run_id,
    }


def _run_id(members: list[dict[str, Any]]) -> str:
    return "+".join(dict.fromkeys(str(m.get("run_id")) for m in members))


def pooled_run(
    spec: EnsembleSpec,
    runs: Mapping[str, dict[str, Any]],
    definitions: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any]:
    """The ensemble as one run of ``evaluate_runs``: each set's averaged probabilities
    (scored uncalibrated) and their logs as logits, with the calibrators of ``definitions``
    fitted on its validation set (pool-then-calibrate; also on clean + shifted val,
    ``<key>@shifted_val``, where the members have shifted validation sets).

    Args:
        spec: the ensemble.
        runs: ``"<method>|<seed>"`` -> the study's evaluated runs (members among them).
        definitions: calibrator key -> ``{"name", "params"}`` to fit.
    """
    members = _member_runs(spec, runs)
    sets = {
        name: _set_entry(entries[0], pooled_probabilities([e["logits"] for e in entries]))
        for name, entries in _aligned_sets(spec, members).items()
    }
    run = _as_run(sets, _run_id(members))
    run["calibrators"] = fit_run_calibrators(
        run["logits"],
        definitions,
        run["shift"],
        shifted_suffix=SHIFTED_VAL_SUFFIX,
        description=f"ensemble {spec.key}",
    )
    return run


def calibrated_then_pooled_runs(
    spec: EnsembleSpec, runs: Mapping[str, dict[str, Any]], calibrators: Sequence[str]
) -> dict[str, dict[str, Any]]:
    """``<key>@calibrate_then_pool`` -> the ensemble as one run whose sets hold the average
    of its members' probabilities calibrated by their own fitted ``<key>``, for each key of
    ``calibrators`` (scored as they are: no calibrator is applied to them again)."""
    members = _member_runs(spec, runs)
    aligned = _aligned_sets(spec, members)
    out = {}
    for key in calibrators:
        fitted = [m["calibrators"][key] for m in members]
        sets = {
            name: _set_entry(
                entries[0], calibrate_then_pool(fitted, [e["logits"] for e in entries])
            )
            for name, entries in aligned.items()
        }
        out[f"{key}{CALIBRATE_THEN_POOL_SUFFIX}"] = _as_run(sets, _run_id(members))
    return out


def ensembles_section(records: Sequence[Mapping[str, Any]]) -> str:
    """The Markdown section that says what a study's ensemble rows are and which runs each
    pools (its provenance); empty without ensembles.

    Args:
        records: :meth:`EnsembleSpec.record` of each ensemble.
    """
    if not records:
        return ""
    lines = [
        f"| {r['label']} | `{r['key']}` | {r['n_members']} | {', '.join(r['members'])} |"
        for r in records
    ]
    return (
        "\n## Ensembles\n\n"
        "Each ensemble averages its members' probabilities (no new training). It is ONE run "
        f"(seed {ENSEMBLE_SEED} in the metrics table): its cells are a single value, with no "
        "± and no spread over seeds. Calibrator `<key>`: pool-then-calibrate (fitted on the "
        "ensemble's validation predictions, logits = log of the averaged probabilities); "
        f"`<key>{CALIBRATE_THEN_POOL_SUFFIX}`: each member calibrated by its own `<key>`, "
        "then averaged (docs/ensembles.md).\n\n"
        "| ensemble | key | members | runs |\n|---|---|---|---|\n" + "\n".join(lines) + "\n"
    )
