"""The artifact table agrees with the catalog's dataset factories and names every dataset
the pipelines read or write; the stage that makes each, and the runs handed to a study."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from calib_pipeline.pipelines.artifacts import (
    ARTIFACTS,
    LAYERS,
    STAGE_ORDER,
    artifact_name,
    collected_runs,
    collected_study,
    kind_of,
    producing_stage,
    run_artifact,
    run_folder,
)
from calib_pipeline.pipelines.run_info import RUN_INFO
from calib_pipeline.settings import config_loader, project_root

CONF = Path(project_root()) / "conf"
# a value for each placeholder of the table's patterns
FIELDS = {
    "method": "focal_gamma_3",
    "seed": "seed_2",
    "study": "focal_meta",
    "split": "meta",
    "report": "reliability",
    "name": "my_preds",
}


def catalog_entries() -> dict[str, dict]:
    """Every catalog entry or dataset factory of every environment, by pattern."""
    entries = {}
    for path in sorted(CONF.glob("*/catalog*.yml")):
        entries.update(yaml.safe_load(path.read_text()) or {})
    return entries


@pytest.fixture(scope="module")
def pipelines():
    """The registered pipelines of the test environment."""
    from types import SimpleNamespace

    from calib_pipeline import pipeline_registry
    from calib_pipeline.hooks import SessionConfigHook

    session = SessionConfigHook()  # as a session of env test records it
    session.after_context_created(SimpleNamespace(config_loader=config_loader("test"), env="test"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline_registry, "SESSION_CONFIG", session)
        return pipeline_registry.register_pipelines()


@pytest.fixture(scope="module")
def dataset_names(pipelines) -> list[str]:
    names = {name for pipeline in pipelines.values() for name in pipeline.datasets()}
    return sorted(name for name in names if not name.startswith("params:") and name != "parameters")


# ------------------------------------------------------------------ table and catalog


def test_every_catalog_pattern_is_a_kind_of_the_table_and_every_kind_is_in_the_catalog():
    entries = catalog_entries()
    assert sorted(entries) == sorted(kind.pattern for kind in ARTIFACTS.values())


def test_each_kind_has_the_layer_its_catalog_entry_shows_in_kedro_viz():
    entries = catalog_entries()
    layers = {kind.pattern: kind.layer for kind in ARTIFACTS.values()}
    assert {p: e["metadata"]["kedro-viz"]["layer"] for p, e in entries.items()} == layers
    assert set(layers.values()) <= set(LAYERS)


def test_every_stage_of_the_table_has_its_place_in_the_stage_order():
    stages = {kind.stage for kind in ARTIFACTS.values()} - {None}
    assert stages == set(STAGE_ORDER)


# ------------------------------------------------------------------ names


@pytest.mark.parametrize("kind", sorted(ARTIFACTS))
def test_a_name_built_for_a_kind_is_recognised_as_that_kind_with_its_fields(kind):
    artifact = ARTIFACTS[kind]
    fields = {key: value for key, value in FIELDS.items() if f"{{{key}}}" in artifact.pattern}
    name = artifact_name(kind, **fields)
    assert kind_of(name) == kind
    assert artifact.fields(name) == fields


def test_the_builders_write_the_catalogs_names():
    assert run_artifact("logits", "ce", 3) == "ce.seed_3.logits"
    assert artifact_name("resume") == "resume_states"
    assert run_folder("focal_gamma_3", 0) == "focal_gamma_3/seed_0"
    assert collected_runs("ce", "focal") == "ce.runs_for_focal"
    assert artifact_name("split", split="meta") == "split_meta"
    assert artifact_name("report", study="focal", report="claims") == "focal.report_claims"


def test_a_name_matching_two_patterns_belongs_to_the_more_specific_as_in_the_catalog():
    """``score.<name>.metrics`` also matches ``{study}.metrics``; Kedro's dataset factories
    resolve it to the score entry, and so does the table."""
    assert kind_of("score.my_preds.metrics") == "score_metrics"
    assert kind_of("score.my_preds.report_summary") == "score_report"
    assert kind_of("focal.metrics") == "metrics"


def test_names_of_no_kind_and_unknown_kinds():
    assert kind_of("params:training") is None and kind_of(RUN_INFO) is None
    assert producing_stage("params:training") is None
    assert collected_study("ce.seed_0.logits") is None
    with pytest.raises(KeyError, match="no_such_kind"):
        artifact_name("no_such_kind")
    with pytest.raises(KeyError, match="study"):
        artifact_name("metrics")


def test_every_dataset_the_pipelines_name_is_a_kind_of_the_table(dataset_names):
    assert dataset_names, "the test env's pipelines name datasets"
    unnamed = [name for name in dataset_names if kind_of(name) is None and name != RUN_INFO]
    assert unnamed == []
    kinds = {kind_of(name) for name in dataset_names}
    assert {
        "split",
        "checkpoint",
        "history",
        "logits",
        "shift_logits",
        "calibrators",
        "collected_runs",
        "report",
        "score_report",
    } <= kinds


def test_a_studys_claims_report_is_the_replication_reports_prerequisite():
    assert kind_of("replication.report") == "replication_report"
    assert artifact_name("replication_report") == "replication.report"
    # the replication pipeline reads the studies' claims: missing ones need their reporting
    assert producing_stage("focal.report_claims") == "reporting"
    assert producing_stage("replication.report") is None  # nothing reads it
    assert STAGE_ORDER.index("reporting") < STAGE_ORDER.index("replication")


def test_make_replicate_runs_the_studies_with_claims_in_the_parameters_order():
    from calib_pipeline.pipeline_registry import claims_studies

    studies = claims_studies("test")
    assert studies[0] == "focal_meta" and "baseline" in studies
    assert set(studies) == {
        "focal_meta",
        "focal",
        "soft_calibration",
        "calibratability",
        "dark_side",
        "modern_baselines",
        "baseline",
    }
    makefile = (Path(project_root()) / "Makefile").read_text()
    assert "claims_studies(sys.argv[1])" in makefile and "--pipelines=replication" in makefile
