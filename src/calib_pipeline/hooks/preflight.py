"""Checks before a run: the compute it will use, then refusals -- each in one line, before
any node runs -- of a runner the project's guarantees do not hold under, of cached inputs
no earlier run has made, and of in-memory inputs whose making nodes the run leaves out.

(``kedro run --config=<file> --params=...`` is refused by the project's ``run`` command,
:mod:`calib_pipeline.cli`: only the command line knows where the params came from.)
"""

from __future__ import annotations

import difflib
import logging
import re
from typing import Any

from kedro.framework.hooks import hook_impl

from calib_pipeline.pipelines.artifacts import STAGE_ORDER, collected_study, producing_stage

# the run's console lines (calib_pipeline.console, conf/logging.yml)
console = logging.getLogger("calib_pipeline.console")


class RunPreflightHook:
    """Before a run: log the compute it will use, and refuse -- in one line -- a pipeline
    whose cached inputs have not been made (e.g. ``--pipelines=training`` before the split
    it trains on exists) instead of failing deep inside a node."""

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline, catalog) -> None:
        import torch

        device = (
            f"cuda ({torch.cuda.get_device_name(0)}, {torch.cuda.device_count()} visible)"
            if (torch.cuda.is_available())
            else "cpu"
        )
        console.info("compute: %s; %d CPU thread(s) for torch", device, torch.get_num_threads())
        _refuse_unsupported_runner(run_params.get("runner"))
        _refuse_unknown_pins(run_params.get("load_versions") or {}, pipeline)
        missing = [
            name
            for name in sorted(pipeline.inputs())
            if producing_stage(name) and not catalog.exists(name)
        ]
        pinned = {
            name: v
            for name, v in (run_params.get("load_versions") or {}).items()
            if name in missing
        }
        if pinned:  # a mistyped or pruned version, not a stage that was never run
            raise MissingInputsError(
                "--load-versions names version(s) that were never saved (or were pruned): "
                + "; ".join(f"{name}:{version}" for name, version in sorted(pinned.items()))
                + "; list the saved ones with catalog.get(name).list_versions() in a notebook or "
                "see the dataset's folder under data/"
            )
        if missing:
            stages = sorted({producing_stage(name) for name in missing}, key=STAGE_ORDER.index)
            raise MissingInputsError(
                f"{len(missing)} input(s) of this run do not exist yet ({', '.join(missing[:3])}"
                f"{', ...' if len(missing) > 3 else ''}): run the {' and '.join(stages)} stage(s) "
                f"first, e.g. kedro run --pipelines={_first_stages(run_params, stages)}, or "
                "include them in --pipelines"
            )
        _refuse_uncollected_runs(pipeline)


def _refuse_unknown_pins(pins: dict[str, str], pipeline) -> None:
    """Refuse ``--load-versions`` pins of datasets this run does not load: Kedro ignores
    them silently, so a mistyped name (``fm_cee.seed_0.logits``) would load the latest
    version of every artifact while the user believes one is pinned."""
    loaded = pipeline.inputs()
    unknown = sorted(name for name in pins if name not in loaded)
    if not unknown:
        return
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, sorted(loaded), n=3, cutoff=0.6)
        hints.append(f"{name} (did you mean {', '.join(close)}?)" if close else name)
    raise MissingInputsError(
        f"--load-versions pins {len(unknown)} dataset(s) this run does not load: "
        f"{'; '.join(hints)}. A pin applies to an input of the selected pipeline; this run "
        f"loads {len(loaded)} dataset(s), e.g. "
        f"{', '.join(sorted(n for n in loaded if '.' in n)[:3])}"
    )


# Kedro's ParallelRunner runs nodes in subprocesses: the hooks that pin each run's own
# versions, track MLflow and count finished nodes run there, not here, and its shared-memory
# copies of node inputs lose the pipelines' plain objects (a shift plan arrived as a bare
# `object`) -- a run failed after writing artifacts while reporting that nothing was written.
UNSUPPORTED_RUNNERS = ("ParallelRunner",)


def _refuse_unsupported_runner(runner: Any) -> None:
    """Refuse, before any node runs, a runner the project's guarantees do not hold under."""
    if runner is None:
        return
    name = describe(runner).rsplit(".", 1)[-1]
    if name in UNSUPPORTED_RUNNERS:
        raise ValueError(
            f"--runner={name} is not supported: its worker processes bypass the hooks that keep "
            "each run's versions, provenance and MLflow tracking; use the default runner, "
            "--runner=ThreadRunner, or --runner=calib_pipeline.runner.DaskRunner to train in "
            "parallel (docs/scaling.md)"
        )


def _first_stages(run_params: dict[str, Any], stages: list[str]) -> str:
    """The ``--pipelines`` value that makes the missing stages: for a study's own stages
    (``focal.reporting``), the study itself -- only its runs, finished ones reused -- not
    the all-studies stages, which would train every study's methods (and say so)."""
    names = run_params.get("pipeline_names") or []
    studies = list(dict.fromkeys(name.split(".")[0] for name in names if "." in name))
    if names and len(studies) == len(names):
        return ",".join(studies)
    return (
        f"{','.join(stages)} (every study's runs; one study's alone: kedro run --pipelines=<study>)"
    )


def _refuse_uncollected_runs(pipeline) -> None:
    """Refuse a run that reads a study's in-memory collections without the nodes that make
    them (e.g. ``--namespaces=<study>``: they sit in the methods' namespaces)."""
    held = sorted(name for name in pipeline.inputs() if collected_study(name))
    if held:
        study = collected_study(held[0])
        raise MissingInputsError(
            f"{len(held)} input(s) of this run are handed over in memory by nodes it leaves out "
            f"({', '.join(held[:3])}{', ...' if len(held) > 3 else ''}): each method's "
            f"collect_for_{study} node runs in the method's namespace, with the study's reporting "
            f"stage. Run e.g. kedro run --pipelines={study}.reporting (without "
            f"--namespaces={study})"
        )


class MissingInputsError(RuntimeError):
    """A run needs cached artifacts that no earlier run has written."""


OBJECT_REPR = re.compile(r"^<([\w.]+) object at 0x[0-9a-fA-F]+>$")


def describe(value: Any) -> str:
    """A readable parameter value: a runner by its class (given as the object, or as the
    repr Kedro's session records), lists joined."""
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    if not isinstance(value, str):
        value = repr(value) if "object at 0x" in repr(value) else str(value)
    named = OBJECT_REPR.match(value)
    return named.group(1) if named else value
