"""LaTeX tables: escaped, booktabs, aligned, best value bold -- and they compile."""

import re
import shutil
import subprocess

import pandas as pd
import pytest

from calib_pipeline.calibration.metrics import METRIC_DIRECTIONS, METRICS
from calib_pipeline.reports.common import (
    Cell,
    mean_std_cell,
    mean_std_table,
    with_numbers,
    write_artifacts,
)
from calib_pipeline.reports.latex import best_rows, escape_latex, latex_table
from tests.reports import synthetic


def _cell(mean: float, spread: float, metric: str, unit: str = "%") -> Cell:
    return Cell(mean_std_cell(mean, spread, 3), mean, spread, 3, "std", unit, metric)


@pytest.fixture
def table():
    rows = [
        ("CE", 5.18, 93.10, 0.61),
        ("FLγ-SECE", 4.03, 92.00, 0.70),
        ("Mixup (α=1)", 4.031, 93.104, 0.50),
    ]
    return with_numbers(
        pd.DataFrame(
            {
                "Methods": [r[0] for r in rows],
                "ECE": [_cell(r[1], 0.3, "ece") for r in rows],
                "Accuracy": [_cell(r[2], 0.2, "accuracy") for r in rows],
                "α": [_cell(r[3], 0.1, "decomp_alpha") for r in rows],
            }
        )
    )


def test_every_metric_says_which_way_is_better():
    assert set(METRIC_DIRECTIONS) == set(METRICS.names())
    assert set(METRIC_DIRECTIONS.values()) <= {"lower", "higher", None}
    assert (METRIC_DIRECTIONS["ece"], METRIC_DIRECTIONS["accuracy"]) == ("lower", "higher")
    assert METRIC_DIRECTIONS["decomp_alpha"] is None  # the mean confidence: neither


@pytest.mark.parametrize(
    ("text", "latex"),
    [
        ("FLγ-SECE", "FL$\\gamma$-SECE"),
        ("Mixup (α=1)", "Mixup ($\\alpha$=1)"),
        ("α − β − γ", "$\\alpha$ $-$ $\\beta$ $-$ $\\gamma$"),
        ("2.08 ± 0.59", "2.08 $\\pm$ 0.59"),
        ("±−", "$\\pm-$"),  # one math run, never "$$" (display math)
        ("ΓΑ", "$\\Gamma$A"),  # a capital with no command is its Latin look-alike
        ("ls_0.1 50% #1 {x} a&b", "ls\\_0.1 50\\% \\#1 \\{x\\} a\\&b"),
        ("–", "--"),
        ("Müller é", "M\\\"{u}ller \\'{e}"),
        ("Inverse focal (γ̄=1)", "Inverse focal ($\\bar{\\gamma}$=1)"),  # a combining macron
        ("Table 1, §5.1", "Table 1, \\S{}5.1"),
        ("x²ᵀ", "x${}^{2}{}^{\\top}$"),
        ("4.03 ▲", "4.03 $\\blacktriangle$"),  # Wang's significance marks
    ],
)
def test_escape_spells_every_character_for_pdflatex(text, latex):
    assert escape_latex(text) == latex


def test_a_character_without_a_latex_spelling_is_refused_by_name():
    with pytest.raises(ValueError, match=r"no LaTeX spelling for '☃' \(U\+2603\) in 'snow ☃'"):
        escape_latex("snow ☃")


def test_a_table_has_booktabs_rules_aligned_numbers_and_only_ascii(table):
    tex = latex_table(table)
    lines = tex.splitlines()
    assert lines[0].startswith("% needs \\usepackage{booktabs}")
    # text left; each mean ± spread cell: mean right-aligned, spread left-aligned
    assert lines[1] == "\\begin{tabular}{lr@{ }lr@{ }lr@{ }l}"
    assert lines[2:5] == [
        "\\toprule",
        "Methods & \\multicolumn{2}{c}{ECE} & \\multicolumn{2}{c}{Accuracy} & "
        "\\multicolumn{2}{c}{$\\alpha$} \\\\",
        "\\midrule",
    ]
    assert lines[-2:] == ["\\bottomrule", "\\end{tabular}"] and tex.endswith("\n")
    assert tex.isascii() and "_mean" not in tex and "n\\_seeds" not in tex


def test_the_best_value_is_bold_in_the_metrics_direction_ties_as_shown(table):
    assert best_rows(table, "ECE") == {1, 2}  # 4.03 and 4.031 show as 4.03: both best
    assert best_rows(table, "Accuracy") == {0, 2}  # higher is better: 93.10 twice
    assert best_rows(table, "α") == set()  # the mean confidence has no better direction
    body = latex_table(table).splitlines()[5:8]
    assert body[0] == (
        "CE & 5.18 & $\\pm$ 0.30 & \\textbf{93.10} & $\\pm$ 0.20 & 0.61 & $\\pm$ 0.10 \\\\"
    )
    assert body[1].startswith("FL$\\gamma$-SECE & \\textbf{4.03} & $\\pm$ 0.30 & 92.00 &")
    assert "bold: the best value of each column, ece (lower is better), accuracy (higher is " in (
        latex_table(table)
    )


def test_a_column_with_one_value_or_no_metric_has_nothing_bold(table):
    single = with_numbers(pd.DataFrame({"Methods": ["CE"], "ECE": [_cell(5.0, 0.1, "ece")]}))
    assert best_rows(single, "ECE") == set() and "textbf" not in latex_table(single)
    plain = pd.DataFrame({"label": ["a_b", "c"], "n": [1, 2], "ece": [0.1, float("nan")]})
    tex = latex_table(plain)
    assert "\\begin{tabular}{lrr}" in tex and "textbf" not in tex
    assert "a\\_b & 1 & 0.100000 \\\\" in tex and "c & 2 & -- \\\\" in tex


def _compile(folder, table_file) -> subprocess.CompletedProcess:
    """pdflatex on a document that loads the packages the table's first line names."""
    first = (folder / f"{table_file}.tex").read_text().splitlines()[0]
    packages = re.search(r"\\usepackage\{[^}]*\}", first)
    (folder / "doc.tex").write_text(
        f"\\documentclass{{article}}\n{packages[0] if packages else ''}\n\\begin{{document}}\n"
        f"\\input{{{table_file}}}\n\\end{{document}}\n"
    )
    return subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "doc.tex"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.skipif(
    shutil.which("pdflatex") is None,
    reason="pdflatex is not installed (apt: texlive-latex-base, texlive-latex-recommended); "
    "the other tests of this file check the .tex text",
)
def test_a_summary_table_compiles_with_pdflatex(tmp_path):
    """A study's summary table as written: Greek method labels, mean ± std cells, bold."""
    labels = {
        "fm_ce": "CE",
        "fm_fl_gamma_sece": "FLγ-SECE ▲",
        "fm_mixup": "Mixup (α=1)",
        "inverse_focal_gamma_1": "Inverse focal (γ̄=1), Müller §5",
    }
    tidy = synthetic.tidy(labels, [0, 1, 2], ["ts"])
    table = mean_std_table(tidy, ["accuracy", "ece", "brier", "decomp_alpha"])
    write_artifacts(tmp_path, {"table": table})
    tex = (tmp_path / "table.tex").read_text()
    assert "\\textbf{" in tex and tex.startswith("% needs \\usepackage{booktabs,amssymb}")
    done = _compile(tmp_path, "table")
    assert done.returncode == 0, done.stdout[-2000:]
    assert (tmp_path / "doc.pdf").stat().st_size > 0
    # the raw characters fail, as the old tables did: the check can fail
    (tmp_path / "raw.tex").write_text("\\begin{tabular}{l}\nFLγ ± 1 \\\\\n\\end{tabular}\n")
    assert _compile(tmp_path, "raw").returncode != 0
