"""LATEST.md (hooks/latest.py): after each report a run saves, the reporting folder's index
points at every study's newest complete reports, rewritten in one rename."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pandas as pd
import pytest
from kedro.io import DataCatalog, MemoryDataset
from kedro.io.core import Version

from calib_pipeline.hooks import LatestReportsHook
from calib_pipeline.hooks.latest import INDEX, write_index
from calib_pipeline.kedro_datasets import ReportDataset

OLD, NEW, NEWER = "2026-11-26T01.00.00.000Z", "2026-11-26T02.00.00.000Z", "2026-11-26T03.00.00.000Z"
TABLE = pd.DataFrame({"Methods": ["CE", "FLγ-SECE"], "ECE": ["1.91 ± 0.30", "1.20 ± 0.21"]})
LINE = "focal_meta on digits: 5 of 17 paper claims hold, 0 contradicted, 12 inconclusive"
LINK = re.compile(r"\[(\w+)\]\(([^)]+)\)")


def report(root: Path, base: str, version: str | None) -> ReportDataset:
    """The report dataset whose versions live in ``root/<base>/`` (as the catalog's)."""
    return ReportDataset(filepath=str(root / base), version=Version(None, version))


def run_saving(root: Path, saves: dict[str, tuple[str, str, dict]]) -> LatestReportsHook:
    """Saves each catalog name's report (base folder, version, artifacts) as a run does,
    calling the hook after each save as Kedro does."""
    catalog = DataCatalog({"focal_meta.metrics": MemoryDataset()})
    for name, (base, version, _) in saves.items():
        catalog[name] = report(root, base, version)
    hook = LatestReportsHook()
    hook.before_pipeline_run({}, None, catalog)
    for name, (_, _, artifacts) in saves.items():
        catalog.save(name, artifacts)
        hook.after_dataset_saved(name, artifacts, None)
    return hook


def links(index: str) -> dict[str, str]:
    return {target: kind for kind, target in LINK.findall(index)}


def test_the_index_links_each_reports_newest_version_and_the_claims_line(tmp_path):
    root = tmp_path / "08_reporting" / "digits"
    verdicts = {"verdicts": {"line": LINE}, "summary": "# claims"}
    run_saving(
        root,
        {
            "focal_meta.report_meta_tables": ("focal_meta/meta_tables", OLD, {"table1": TABLE}),
            "focal_meta.report_claims": ("focal_meta/claims", OLD, verdicts),
        },
    )
    run_saving(
        root,
        {
            "focal_meta.report_meta_tables": ("focal_meta/meta_tables", NEW, {"table1": TABLE}),
            "replication.report": ("replication", NEW, {"replication": "# every claim"}),
        },
    )
    index = (root / INDEX).read_text()
    assert index.startswith("# Newest reports in 08_reporting/digits\n")
    assert f"## focal_meta\n\n`{LINE}`\n" in index  # the claims report of the earlier run
    found = links(index)
    assert f"focal_meta/meta_tables/{NEW}/meta_tables/table1.md" in found
    assert not any(OLD in target for target in found if "meta_tables" in target)
    assert f"focal_meta/claims/{OLD}/claims/summary.md" in found
    assert f"replication/{NEW}/replication/replication.md" in found
    assert all((root / target).is_file() for target in found)
    assert found[f"focal_meta/meta_tables/{NEW}/meta_tables/table1.csv"] == "csv"
    assert [p.name for p in root.iterdir() if p.is_file()] == [INDEX]  # no staging file left


def test_an_unfinished_newer_version_is_not_indexed_the_version_kedro_loads_is(tmp_path):
    root = tmp_path / "digits"
    run_saving(root, {"focal.report_summary": ("focal/summary", OLD, {"summary": TABLE})})
    (root / "focal" / "summary" / NEWER / "summary").mkdir(parents=True)  # no manifest
    write_index(root)
    loaded = report(root, "focal/summary", None).load()
    found = links((root / INDEX).read_text())
    assert list(found) == [
        f"focal/summary/{OLD}/summary/summary.{suffix}" for suffix in ("csv", "md", "tex")
    ]
    assert loaded["summary"].equals(pd.read_csv(root / next(iter(found))))


def test_a_scored_files_reports_are_indexed_in_the_score_folder(tmp_path):
    root = tmp_path / "08_reporting" / "score"
    run_saving(root, {"score.mine.report_summary": ("mine/summary", NEW, {"summary": TABLE})})
    assert f"mine/summary/{NEW}/summary/summary.md" in links((root / INDEX).read_text())


def test_a_save_that_is_no_report_leaves_the_index_alone(tmp_path):
    root = tmp_path / "digits"
    hook = run_saving(root, {"focal.report_summary": ("focal/summary", OLD, {"s": TABLE})})
    before = (root / INDEX).read_text()
    hook._catalog.save("focal_meta.metrics", TABLE)
    hook.after_dataset_saved("focal_meta.metrics", TABLE, None)
    assert (root / INDEX).read_text() == before


def test_an_index_that_cannot_be_rewritten_warns_and_keeps_the_old_one(tmp_path, caplog):
    root = tmp_path / "digits"
    run_saving(root, {"focal.report_summary": ("focal/summary", OLD, {"s": TABLE})})
    before = (root / INDEX).read_text()
    claims = root / "focal" / "claims" / NEW / "claims"
    claims.mkdir(parents=True)
    (claims / "verdicts.json").write_text("{not json")
    (claims / ".manifest.json").write_text(json.dumps({"artifacts": {"verdicts.json": 9}}))
    with caplog.at_level(logging.WARNING, logger="calib_pipeline.hooks.latest"):
        run_saving(root, {"focal.report_summary": ("focal/summary", NEW, {"s": TABLE})})
    assert f"could not rewrite {root / INDEX}" in caplog.text
    assert (root / INDEX).read_text() == before
    assert [p.name for p in root.iterdir() if p.is_file()] == [INDEX]


def test_the_project_registers_the_hook():
    from calib_pipeline.settings import HOOKS

    assert sum(isinstance(hook, LatestReportsHook) for hook in HOOKS) == 1


@pytest.mark.parametrize("name", ["raw_data", "ce.seed_0.logits"])
def test_only_report_kinds_have_an_index_folder(name, tmp_path):
    from calib_pipeline.hooks.latest import index_root

    saved = tmp_path / "focal" / "summary" / NEW / "summary"
    assert index_root(name, saved) is None
    assert index_root("focal.report_summary", saved) == tmp_path
    assert index_root("replication.report", tmp_path / "replication" / NEW / "replication") == (
        tmp_path
    )
