"""The papers' own numbers, stored as data with their source, shown beside ours.

A file ``reports/published/<paper>.yml`` holds tables as the paper prints them: each table
names its source, the dataset and the architecture (as ``models.architecture_tag``
writes a run's network: ``resnet32[shortcut=zero_pad]``), its
columns as ``[calibrator, metric]`` pairs -- ``none`` (raw), ``ts`` (the paper's
temperature scaling) or ``hb`` (histogram binning); metric a key of
``calibration.metrics`` or ``temperature`` -- and one row per method key, each cell a
number or ``[mean, std]``. A row key ``method@ts`` puts the whole row under that
calibrator (e.g. the "CE (TS)" row). Values stay in the paper's units: % for the metrics
the tables show ×100 (:data:`~.common.PERCENT_METRICS`), as is otherwise.

:func:`side_by_side` matches them with a study's results when the dataset and the
architecture of the method's runs agree, and gives our distance from the paper in units
of our seed std; the paper reports (``mukhoti_table``, ``meta_tables``,
``calibratability_table``) add it as their ``published`` table.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from calib_pipeline.calibration.metrics import metric_names
from calib_pipeline.reports.common import (
    MISSING_CELL,
    PERCENT_METRICS,
    UNCALIBRATED,
    Cell,
    clean_rows,
    mean_std_cell,
    metric_name,
    metric_unit,
    paper_view,
    with_numbers,
)

PUBLISHED_DIR = Path(__file__).resolve().parent / "published"
PUBLISHED_CALIBRATORS = (UNCALIBRATED, "ts", "hb")
TEMPERATURE = "temperature"
COLUMNS = [
    "paper",
    "table",
    "dataset",
    "architecture",
    "method",
    "calibrator",
    "metric",
    "value",
    "std",
]


def published_papers() -> list[str]:
    """The papers with published numbers, sorted."""
    return sorted(p.stem for p in PUBLISHED_DIR.glob("*.yml"))


def _cell(where: str, value: Any) -> tuple[float, float]:
    pair = value if isinstance(value, (list, tuple)) else [value, math.nan]
    if len(pair) != 2 or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) for v in pair
    ):
        raise ValueError(f"{where}: a cell must be a number or [mean, std], got {value!r}")
    return float(pair[0]), float(pair[1])


def _table_rows(paper: str, table: Mapping[str, Any]) -> list[dict[str, Any]]:
    where = f"published {paper}: {table.get('table')!r} ({table.get('dataset')})"
    missing = [k for k in ("table", "dataset", "architecture", "columns", "rows") if k not in table]
    if missing:
        raise ValueError(f"{where}: missing key(s) {missing}")
    valid = [*metric_names(), TEMPERATURE]
    for calibrator, metric in table["columns"]:
        if calibrator not in PUBLISHED_CALIBRATORS or metric not in valid:
            raise ValueError(
                f"{where}: column {[calibrator, metric]} needs a calibrator of "
                f"{PUBLISHED_CALIBRATORS} and a metric of {valid}"
            )
    rows = []
    for key, cells in table["rows"].items():
        method, _, row_calibrator = key.partition("@")
        if len(cells) != len(table["columns"]):
            raise ValueError(
                f"{where}: row {key!r} has {len(cells)} cells for {len(table['columns'])} columns"
            )
        for (calibrator, metric), cell in zip(table["columns"], cells):
            value, std = _cell(f"{where} row {key!r}", cell)
            rows.append(
                {
                    "paper": paper,
                    "table": table["table"],
                    "dataset": table["dataset"],
                    "architecture": table["architecture"],
                    "method": method,
                    "calibrator": row_calibrator or calibrator,
                    "metric": metric,
                    "value": value,
                    "std": std,
                }
            )
    return rows


@cache
def load_published(paper: str) -> pd.DataFrame:
    """Every published value of ``paper``: columns ``COLUMNS`` (std NaN where the paper
    gives none).

    Raises:
        ValueError: an unknown paper (lists the ones with numbers) or a malformed file.
    """
    if paper not in published_papers():
        raise ValueError(
            f"no published numbers for paper {paper!r}; papers with numbers: "
            + ", ".join(published_papers())
        )
    content = yaml.safe_load((PUBLISHED_DIR / f"{paper}.yml").read_text(encoding="utf-8"))
    rows = [r for table in content.get("tables") or [] for r in _table_rows(paper, table)]
    return pd.DataFrame(rows, columns=COLUMNS)


def our_values(
    tidy: pd.DataFrame,
    calibrators: Mapping[str, str],
    temperatures: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Our per-seed values on the clean test split, in the papers' units and vocabulary.

    Args:
        tidy: the study's tidy metrics table.
        calibrators: the papers' calibrator names (``ts``, ``hb``) -> the study's keys;
            ``none`` maps to itself.
        temperatures: per-run fitted temperatures (columns method, seed, temperature),
            reported as the ``temperature`` of the ``ts`` calibrator.

    Returns:
        Columns method, calibrator (the papers' name), metric, seed, value.
    """
    names = {UNCALIBRATED: UNCALIBRATED, **{key: name for name, key in calibrators.items()}}
    rows = clean_rows(tidy)
    rows = rows[rows["calibrator"].isin(list(names))]
    values = rows.assign(
        calibrator=rows["calibrator"].map(names),
        value=np.where(rows["metric"].isin(PERCENT_METRICS), rows["value"] * 100, rows["value"]),
    )[["method", "calibrator", "metric", "seed", "value"]]
    if temperatures is not None and "ts" in calibrators and not temperatures.empty:
        fitted = temperatures.rename(columns={TEMPERATURE: "value"}).assign(
            calibrator="ts", metric=TEMPERATURE
        )
        values = pd.concat([values, fitted[values.columns]], ignore_index=True)
    return values


def side_by_side(
    published: pd.DataFrame,
    ours: pd.DataFrame,
    *,
    dataset: str,
    models: Mapping[str, str],
    labels: Mapping[str, str],
    calibrators: Mapping[str, str],
) -> pd.DataFrame:
    """Our value beside the paper's, for the published cells of the study's dataset whose
    method ran with the published architecture.

    Args:
        published: :func:`load_published`.
        ours: :func:`our_values`.
        dataset: the study's dataset.
        models: method -> architecture of its runs (``StudyResults.models``).
        labels: method -> display label.
        calibrators: the papers' calibrator names -> the study's keys (shown in brackets).

    Returns:
        Columns Method, Calibrator, Metric, Unit (of the row's numbers: ``%``, ``×100`` or
        empty), Ours (mean ± std over seeds), Paper, Ours − paper, Distance (our std) =
        (our mean − paper) / our seed std (``–`` with one seed or a zero std) and Source,
        then ``ours_mean``, ``ours_std``, ``paper_mean``, ``paper_std``, ``n_seeds``; empty
        when nothing matches.
    """
    match = published[
        (published["dataset"] == dataset)
        & (published["architecture"] == published["method"].map(models))
    ]
    stats = ours.groupby(["method", "calibrator", "metric"])["value"].agg(["mean", "std", "count"])
    rows = []
    for cell in match.itertuples(index=False):
        key = (cell.method, cell.calibrator, cell.metric)
        if key not in stats.index:
            continue
        mean, std, n = stats.loc[key]
        distance = (mean - cell.value) / std if n > 1 and std > 0 else math.nan
        study_key = calibrators.get(cell.calibrator, cell.calibrator)
        rows.append(
            {
                "Method": labels.get(cell.method, cell.method),
                "Calibrator": cell.calibrator
                if study_key == cell.calibrator
                else f"{cell.calibrator} ({study_key})",
                "Metric": metric_name(cell.metric),
                "Unit": metric_unit(cell.metric),
                "Ours": Cell(mean_std_cell(mean, std, int(n)), mean, std, int(n)),
                "Paper": Cell(mean_std_cell(cell.value, cell.std), cell.value, cell.std, 1),
                "Ours − paper": f"{mean - cell.value:+.2f}",
                "Distance (our std)": MISSING_CELL if math.isnan(distance) else f"{distance:+.1f}",
                "Source": cell.table,
            }
        )
    return with_numbers(pd.DataFrame(rows))


def published_artifacts(
    results: Any,
    paper: str,
    calibrators: Mapping[str, str],
    temperatures: pd.DataFrame | None = None,
) -> tuple[dict[str, Any], str]:
    """The ``published`` table of a paper report and its Markdown section; nothing (``{}``
    and ``""``) when the paper has no numbers for the study's dataset and architecture.

    Args:
        results: the :class:`~.registry.StudyResults` of the study.
        paper: the paper's published file.
        calibrators: the papers' calibrator names -> the study's keys.
        temperatures: per-run fitted temperatures, if the report has them.
    """
    table = side_by_side(
        load_published(paper),
        our_values(results.metrics, calibrators, temperatures),
        dataset=results.dataset,
        models=results.models,
        labels=results.labels,
        calibrators=calibrators,
    )
    if table.empty:
        return {}, ""
    architectures = ", ".join(
        sorted({results.models[m] for m in results.methods if m in results.models})
    )
    text = (
        f"\n## Published values ({paper}, {results.dataset}, {architectures})\n\n"
        "The paper's numbers as printed (% for calibration errors and error), beside ours "
        "(mean ± std over seeds, clean test split). Distance = (our mean − paper) / our seed "
        "std: |distance| ≲ 2 is within our seed-to-seed spread.\n\n"
        + paper_view(table).to_markdown(index=False)
        + "\n"
    )
    return {"published": table}, text
