"""The replication report: every study's claims of one protocol in one table.

Each study's ``claims`` report judges its paper's claims on its own runs
(:mod:`calib_pipeline.reports.claims`). This report puts those tables side by side -- paper,
claim, verdict, effect, interval, p-value, seeds and seeds needed -- and counts the
verdicts per paper and overall, so that "does it reproduce the papers?" has one answer per
protocol. It re-judges nothing: every number is the study's own.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from calib_pipeline.reports.claim_specs import paper_names, paper_title
from calib_pipeline.reports.claims import (
    CONTRADICTED,
    HOLDS,
    INCONCLUSIVE,
    NOT_APPLICABLE,
    NOT_MEASURED,
    VERDICTS,
    verdict_counts,
)

#: The columns of a study's claims table that the combined table needs.
CLAIM_COLUMNS = (
    "paper",
    "id",
    "claim",
    "verdict",
    "effect",
    "ci_low",
    "ci_high",
    "p_value",
    "p_holm",
    "n_seeds",
    "seeds_needed",
)
TABLE_COLUMNS = ("study", *CLAIM_COLUMNS)


def _checked(study: str, table: pd.DataFrame) -> pd.DataFrame:
    missing = [c for c in CLAIM_COLUMNS if c not in table.columns]
    if missing:
        raise ValueError(
            f"the claims table of study {study!r} has no column(s) {missing}: is it a claims "
            "report (reports: claims: in parameters_studies.yml)?"
        )
    unknown = sorted(set(table["verdict"]) - set(VERDICTS))
    if unknown:
        raise ValueError(f"the claims table of study {study!r} has unknown verdicts {unknown}")
    return table.loc[:, list(CLAIM_COLUMNS)].assign(study=study)


def combined_claims(claims: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Every study's claims rows in one table, ordered by paper, then study, then as the
    study listed them. A claim that two studies judge (say ``focal`` and a variant of it
    checking some of Mukhoti et al.'s claims on other methods) keeps one row per study: each
    is evidence from other runs.

    Args:
        claims: study -> its claims table (the ``claims`` artifact of its claims report).

    Raises:
        ValueError: no study, a table without the claims columns or with an unknown verdict.
    """
    if not claims:
        raise ValueError("no claims tables: run the studies (with a claims report) first")
    table = pd.concat([_checked(s, t) for s, t in claims.items()], ignore_index=True)
    order = {paper: i for i, paper in enumerate(dict.fromkeys(table["paper"]))}
    table = table.assign(_order=table["paper"].map(order))
    table = table.sort_values(["_order", "study"], kind="stable").drop(columns="_order")
    return table.loc[:, list(TABLE_COLUMNS)].reset_index(drop=True)


def judged_twice(table: pd.DataFrame) -> list[str]:
    """``paper:id`` of every claim that more than one study judged."""
    twice = table[table.duplicated(["paper", "id"], keep=False)]
    return sorted({f"{row.paper}:{row.id}" for row in twice.itertuples()})


def verdict_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Verdict counts per paper and study, and overall (the last row, ``paper == "all"``).

    ``applicable`` counts the claims the protocol's dataset is meant to show (all but "not
    applicable"); ``decided`` those that hold or are contradicted."""
    rows = []
    groups = list(table.groupby(["paper", "study"], sort=False))
    for (paper, study), part in [*groups, (("all", "all"), table)]:
        counts = verdict_counts(part)
        applicable = sum(counts[v] for v in VERDICTS if v != NOT_APPLICABLE)
        rows.append(
            {
                "paper": paper,
                "study": study,
                "applicable": applicable,
                "decided": counts[HOLDS] + counts[CONTRADICTED],
                **counts,
            }
        )
    return pd.DataFrame(rows)


def summary_lines(summary: pd.DataFrame, protocol: str) -> list[str]:
    """One line per paper and study, then the overall line, e.g. ``Mukhoti et al. (2020),
    ... (study focal) on fashion_mnist: 6 of 18 applicable claims hold, 3 contradicted, 9
    inconclusive``."""
    lines = []
    for row in summary.to_dict("records"):
        if row["paper"] == "all":
            name = "all papers"
        elif row["paper"] in paper_names():
            name = f"{paper_title(row['paper'])} (study {row['study']})"
        else:  # claims a study states itself carry the study's name as their paper
            name = f"study {row['study']}'s own claims"
        line = (
            f"{name} on {protocol}: {row[HOLDS]} of {row['applicable']} applicable claims hold, "
            f"{row[CONTRADICTED]} contradicted, {row[INCONCLUSIVE]} inconclusive"
        )
        if row[NOT_MEASURED]:
            line += f", {row[NOT_MEASURED]} not measured"
        lines.append(line)
    return lines


def replication_report(claims: Mapping[str, pd.DataFrame], protocol: str) -> dict[str, object]:
    """The combined report over every study's claims of ``protocol``.

    Args:
        claims: study -> its claims table.
        protocol: the protocol (environment) the studies ran under, for the headings.

    Returns:
        ``replication`` (one row per claim: study, paper, id, claim, verdict, effect, CI,
        p, the study's Holm-adjusted p, seeds, seeds needed; written as CSV, Markdown and
        LaTeX), ``verdicts`` (counts per
        paper and overall, the same three formats), ``summary`` (Markdown: the overall line
        first, then one line per paper) and ``metrics`` (the overall counts as
        ``replication.<verdict>``, for MLflow).
    """
    table = combined_claims(claims)
    counts = verdict_summary(table)
    lines = summary_lines(counts, protocol)
    overall, per_paper = lines[-1], lines[:-1]
    twice = judged_twice(table)
    counted = (
        f" {len(twice)} claim(s) judged by more than one study are counted once per study: "
        f"{', '.join(twice)}."
        if twice
        else ""
    )
    text = "\n".join(
        [
            f"**{overall}**",
            "",
            f"# Replication on `{protocol}`: {len(claims)} studies, {len(table)} claims",
            "",
            *[f"- {line}" for line in per_paper],
            "",
            "Each verdict is the study's own claims report (docs/claims.md); `decided` counts the "
            f"claims that hold or are contradicted.{counted}",
            "",
        ]
    )
    last = counts.iloc[-1]
    metrics = {f"replication.{v.replace(' ', '_')}": float(last[v]) for v in VERDICTS}
    metrics["replication.applicable"] = float(last["applicable"])
    metrics["replication.decided"] = float(last["decided"])
    return {"replication": table, "verdicts": counts, "summary": text, "metrics": metrics}
