"""The artifact table: every kind of dataset the pipelines read or write, with its catalog
name pattern, the stage whose nodes write it and its kedro-viz layer, and the builders of
its names.

``conf/base/catalog.yml`` declares one entry or dataset factory per kind, with the same
pattern and layer (``tests/pipelines/test_artifacts.py`` checks that the two agree); every
module builds and recognises catalog names here. A (method, seed) run's artifacts are named
``<method>.seed_<k>.<kind>``, a study's ``<study>.<kind>``, the score pipeline's
``score.<name>.<kind>``, the calibrator arena's ``posthoc_arena.<kind>``. Kept to the
standard library: the hooks, loaded with the project's settings, read it too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

# The stages in the order they make artifacts; the preflight names missing ones in this order.
STAGE_ORDER = (
    "data_split",
    "training",
    "logits",
    "shift",
    "posthoc",
    "reporting",
    "replication",
    "score",
    "posthoc_arena",
)
LAYERS = ("raw", "intermediate", "models", "model_output", "reporting")
FIELD = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class ArtifactKind:
    """One kind of catalog dataset.

    Attributes:
        pattern: its catalog name, with the ``{field}`` placeholders of the catalog's dataset
            factory (a run's ``{seed}`` holds ``seed_<k>``).
        stage: the stage whose nodes write it; None for what no node writes (the raw data, a
            user's predictions file).
        layer: its kedro-viz layer (``metadata: kedro-viz: layer`` in the catalog).
        prerequisite: a run that reads it without running ``stage`` needs the version an
            earlier run stored (the preflight names ``stage`` when there is none); False for
            what no other stage reads: the resume store (read by the training node that
            writes it), the in-memory hand-over of a method's runs to a study, and the
            replication and score reports. (A study's reports are read by the replication
            stage.)
    """

    pattern: str
    stage: str | None
    layer: str
    prerequisite: bool = True

    def name(self, **fields: object) -> str:
        """The catalog name of this kind for ``fields`` (every placeholder of the pattern)."""
        return self.pattern.format(**fields)

    def fields(self, name: str) -> dict[str, str] | None:
        """The placeholders' values in catalog name ``name``; None when it is not of this kind."""
        found = self._regex.fullmatch(name)
        return None if found is None else found.groupdict()

    @cached_property
    def _regex(self) -> re.Pattern[str]:
        parts = re.split(FIELD, self.pattern)
        # re.split alternates literal text and field names
        return re.compile(
            "".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}>.+?)" for i, p in enumerate(parts))
        )

    def specificity(self) -> int:
        """How many characters of the pattern are literal: like Kedro's dataset factories, a
        name matching several patterns belongs to the most specific one."""
        return len(FIELD.sub("", self.pattern))


ARTIFACTS: dict[str, ArtifactKind] = {
    "raw_data": ArtifactKind("raw_data", None, "raw"),
    "split": ArtifactKind("split_{split}", "data_split", "intermediate"),
    "shift_sets": ArtifactKind("shift_sets", "shift", "intermediate"),
    # one store for every run; a run's state is in its run_folder under it
    "resume": ArtifactKind("resume_states", "training", "models", prerequisite=False),
    "checkpoint": ArtifactKind("{method}.{seed}.checkpoint", "training", "models"),
    # stored with the models, drawn in model_output: calibrators are fitted on logits
    "calibrators": ArtifactKind("{method}.{seed}.calibrators", "posthoc", "model_output"),
    "history": ArtifactKind("{method}.{seed}.history", "training", "model_output"),
    "logits": ArtifactKind("{method}.{seed}.logits", "logits", "model_output"),
    "shift_logits": ArtifactKind("{method}.{seed}.shift_logits", "shift", "model_output"),
    "collected_runs": ArtifactKind(
        "{method}.runs_for_{study}", "reporting", "model_output", prerequisite=False
    ),
    "metrics": ArtifactKind("{study}.metrics", "reporting", "reporting"),
    "reliability_bins": ArtifactKind("{study}.reliability_bins", "reporting", "reporting"),
    "report": ArtifactKind("{study}.report_{report}", "reporting", "reporting"),
    "replication_report": ArtifactKind(
        "replication.report", "replication", "reporting", prerequisite=False
    ),
    "predictions": ArtifactKind("score.{name}.file", None, "raw"),
    "score_predictions": ArtifactKind(
        "score.{name}.predictions", "score", "intermediate", prerequisite=False
    ),
    "score_calibrators": ArtifactKind("score.{name}.calibrators", "score", "reporting"),
    "score_metrics": ArtifactKind("score.{name}.metrics", "score", "reporting"),
    "score_reliability_bins": ArtifactKind("score.{name}.reliability_bins", "score", "reporting"),
    "score_report": ArtifactKind(
        "score.{name}.report_{report}", "score", "reporting", prerequisite=False
    ),
    "score_intervals": ArtifactKind("score.{name}.intervals", "score", "reporting"),
    "score_summary": ArtifactKind("score.summary", "score", "reporting", prerequisite=False),
    # every run's newest logits files, read whichever studies wrote them (no node writes
    # the store itself; the arena refuses to run when it is empty and no file is given)
    "run_logits_store": ArtifactKind("stored_run_logits", None, "model_output"),
    # every run's newest shift logits, for the shift nodes to reuse their own (read-only; a
    # run with none stored computes them)
    "shift_logits_store": ArtifactKind(
        "stored_shift_logits", None, "model_output", prerequisite=False
    ),
    "arena_scores": ArtifactKind(
        "posthoc_arena.scores", "posthoc_arena", "reporting", prerequisite=False
    ),
    "arena_report": ArtifactKind(
        "posthoc_arena.report", "posthoc_arena", "reporting", prerequisite=False
    ),
}
_MOST_SPECIFIC_FIRST = sorted(ARTIFACTS, key=lambda kind: -ARTIFACTS[kind].specificity())


def artifact_name(kind: str, **fields: object) -> str:
    """The catalog name of artifact ``kind`` for ``fields``, e.g.
    ``artifact_name("metrics", study="focal")`` is ``focal.metrics``."""
    return ARTIFACTS[kind].name(**fields)


def run_artifact(kind: str, method: str, seed: int) -> str:
    """The catalog name of a (method, seed) run's artifact: ``<method>.seed_<k>.<kind>``;
    messages name the run's artifacts by it."""
    return artifact_name(kind, method=method, seed=f"seed_{seed}")


def run_folder(method: str, seed: int) -> str:
    """The folder of a (method, seed) run under a store of every run's files
    (``<method>/seed_<k>``, as the catalog's per-run paths)."""
    return f"{method}/seed_{seed}"


def collected_runs(method: str, study: str) -> str:
    """Catalog name of ``method``'s runs collected for ``study`` (in memory)."""
    return artifact_name("collected_runs", method=method, study=study)


def kind_of(name: str) -> str | None:
    """The artifact kind of catalog name ``name``; None for parameters and session inputs."""
    matching = (kind for kind in _MOST_SPECIFIC_FIRST if ARTIFACTS[kind].fields(name) is not None)
    return next(matching, None)


def producing_stage(name: str) -> str | None:
    """The stage to run before a run that reads ``name`` without making it: the stage that
    writes it, for a prerequisite kind (None for parameters, raw data, the resume store, the
    in-memory hand-over of runs to a study, and the replication and score reports)."""
    kind = kind_of(name)
    return ARTIFACTS[kind].stage if kind and ARTIFACTS[kind].prerequisite else None


def collected_study(name: str) -> str | None:
    """The study that catalog name ``name`` hands a method's runs to, when it is a
    :func:`collected_runs` name; else None."""
    if kind_of(name) != "collected_runs":
        return None
    return ARTIFACTS["collected_runs"].fields(name)["study"]
