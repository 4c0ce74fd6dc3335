"""A study run on request (``on_request: true``, e.g. fashion_mnist's ``fast_modes``, a
check of the tool rather than of a paper) is registered under its own name only: not in the
stage pipelines, ``__default__`` or the replication report, and not run by make replicate."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from calib_pipeline import pipeline_registry
from calib_pipeline.hooks import SessionConfigHook
from calib_pipeline.pipelines.config import parse_structure
from calib_pipeline.settings import config_loader, project_root


@pytest.fixture(scope="module")
def fashion_pipelines():
    session = SessionConfigHook()
    loader = config_loader("fashion_mnist", project_root())
    session.after_context_created(SimpleNamespace(config_loader=loader, env="fashion_mnist"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline_registry, "SESSION_CONFIG", session)
        return pipeline_registry.register_pipelines()


def nodes_of(pipeline) -> set[str]:
    return {node.name for node in pipeline.nodes}


def test_a_study_on_request_runs_by_its_name_only(fashion_pipelines):
    fast = nodes_of(fashion_pipelines["fast_modes"])
    assert "fast_ce.train_seed_13" in fast and "fast_modes.report_claims" in fast
    assert "ls_epsilon_0p1.train_seed_0" in fast, "its own fp32 reference"
    for name in ("__default__", "training", "reporting", "replication"):
        assert not {n for n in nodes_of(fashion_pipelines[name]) if "fast" in n}, name
    replication_inputs = fashion_pipelines["replication"].inputs()
    assert not any(name.startswith("fast_modes.") for name in replication_inputs)
    assert "fast_modes" not in pipeline_registry.claims_studies("fashion_mnist")
    assert "focal_meta" in pipeline_registry.claims_studies("fashion_mnist")


def test_the_fast_modes_claims_pair_each_fast_method_with_its_fp32_twin_within_margins():
    structure = parse_structure(config_loader("fashion_mnist", project_root())["parameters"])
    study = structure.studies["fast_modes"]
    assert study.on_request and len(study.seeds) == 14
    claims = study.reports["claims"]["claims"]
    assert {c["id"]: c["tolerance"] for c in claims} == {
        "fast_accuracy_equivalent": 0.003,
        "fast_ece_equivalent": 0.005,
        "fast_adaece_equivalent": 0.005,
        "fast_nll_equivalent": 0.01,
        "fast_temperature_equivalent": 0.05,
    }
    for claim in claims:
        assert claim["expect"] == "within"
        pairs = zip(claim["a"]["method"], claim["b"]["method"], strict=True)
        assert all(fast == f"fast_{fp32}" for fast, fp32 in pairs)
    for fast in (m for m in study.methods if m.startswith("fast_")):
        training = structure.methods[fast].training
        assert (training["precision"], training["channels_last"], training["compile"]) == (
            "bf16",
            True,
            True,
        )


def test_on_request_must_be_a_bool():
    parameters = config_loader("test", project_root())["parameters"]
    parameters["studies"]["baseline"]["on_request"] = "yes"
    with pytest.raises(ValueError, match=r"studies\.baseline\.on_request"):
        parse_structure(parameters)


def test_the_listing_marks_a_study_run_by_name_only():
    import os
    import subprocess
    import sys

    root = Path(project_root())
    env = {**os.environ, "PYTHONPATH": str(root / "src"), "DO_NOT_TRACK": "1"}
    listing = subprocess.run(
        [sys.executable, "-m", "calib_pipeline", "studies", "--env=fashion_mnist"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    assert "fast_modes: (run by name only)" in listing
    assert "focal_meta: (run by name only)" not in listing
