"""docs/parameters.md lists every parameter the code reads."""

from dataclasses import fields
from pathlib import Path

from calib_pipeline.data.shift_suites import SHIFT_DEFAULTS
from calib_pipeline.pipelines.checks import GROUPS
from calib_pipeline.pipelines.config import STUDY_FIELDS
from calib_pipeline.reports.arena import ARENA_KEYS
from calib_pipeline.reports.scoring import OPTION_KEYS
from calib_pipeline.training.config import TrainConfig

PARAMETERS_DOC = (Path(__file__).resolve().parents[1] / "docs" / "parameters.md").read_text()


def section(group: str) -> str:
    start = PARAMETERS_DOC.index(f"## `{group}`")
    end = PARAMETERS_DOC.find("\n## ", start + 1)
    return PARAMETERS_DOC[start : end if end > 0 else None]


def test_every_group_has_a_section():
    missing = [group for group in GROUPS if f"## `{group}`" not in PARAMETERS_DOC]
    assert not missing, f"docs/parameters.md has no section for {missing}"


def test_every_key_is_documented_in_its_group():
    expected = {
        "training": [f.name for f in fields(TrainConfig)],
        "shift": list(SHIFT_DEFAULTS),
        "evaluation": ["n_bins", "reliability_bins", "shift_metrics"],
        "logits": ["device", "features"],
        "dataset": ["name", "download"],
        "model": ["name", "params"],
        "studies": list(STUDY_FIELDS),
        "predictions": list(OPTION_KEYS),
        "posthoc_arena": list(ARENA_KEYS),
        "methods": [
            "objective",
            "meta_learner",
            "params",
            "sweep",
            "label",
            "group",
            "split",
            "training",
            "model",
            "record_epoch_logits",
        ],
    }
    missing = {g: [k for k in keys if f"`{k}`" not in section(g)] for g, keys in expected.items()}
    assert not any(missing.values()), (
        f"undocumented parameters: { {g: k for g, k in missing.items() if k} }"
    )
