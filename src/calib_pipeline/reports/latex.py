"""LaTeX tables of the reports: booktabs ``tabular`` s that compile with plain pdflatex.

:func:`latex_table` writes a report table (the layout of a
:func:`~calib_pipeline.reports.common.with_numbers` table, or any DataFrame) with every
character pdflatex would refuse spelled in LaTeX (:func:`escape_latex`: Greek letters as
math, ``±`` as ``$\\pm$``, accents as accent commands), ``\\toprule`` / ``\\midrule`` /
``\\bottomrule`` rules (the only package it needs is ``booktabs``), text columns left-aligned,
numbers right-aligned and a ``mean ± spread`` cell split over two columns -- the mean
right-aligned, the spread left-aligned -- so means and spreads line up on their decimal
points without siunitx. In a column of one metric the best mean is bold, "best" following
the metric's direction (:data:`~calib_pipeline.calibration.metrics.METRIC_DIRECTIONS`:
lower for errors, calibration errors, NLL and Brier, higher for accuracy and AUROC).
"""

from __future__ import annotations

import math
import numbers
import re
import unicodedata

import numpy as np
import pandas as pd

from calib_pipeline.calibration.metrics import METRIC_DIRECTIONS

_ASCII_SPECIALS = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "|": r"\textbar{}",
}
# Non-ASCII symbols of the reports' labels, cells and notes: (math?, LaTeX).
_SYMBOLS = {
    "±": (True, r"\pm"),
    "−": (True, "-"),
    "×": (True, r"\times"),
    "÷": (True, r"\div"),
    "·": (True, r"\cdot"),
    "⋅": (True, r"\cdot"),
    "≤": (True, r"\leq"),
    "≥": (True, r"\geq"),
    "≠": (True, r"\neq"),
    "≈": (True, r"\approx"),
    "≲": (True, r"\lesssim"),
    "≪": (True, r"\ll"),
    "≫": (True, r"\gg"),
    "∼": (True, r"\sim"),
    "∝": (True, r"\propto"),
    "∈": (True, r"\in"),
    "∂": (True, r"\partial"),
    "∇": (True, r"\nabla"),
    "∑": (True, r"\sum"),
    "√": (True, r"\surd"),
    "∞": (True, r"\infty"),
    "⊙": (True, r"\odot"),
    "ℓ": (True, r"\ell"),
    "→": (True, r"\rightarrow"),
    "←": (True, r"\leftarrow"),
    "↦": (True, r"\mapsto"),
    "⇒": (True, r"\Rightarrow"),
    "▲": (True, r"\blacktriangle"),
    "▼": (True, r"\blacktriangledown"),
    "△": (True, r"\bigtriangleup"),
    "▽": (True, r"\bigtriangledown"),
    "•": (True, r"\bullet"),
    "°": (True, r"{}^\circ"),
    "µ": (True, r"\mu"),
    "¹": (True, "{}^{1}"),
    "²": (True, "{}^{2}"),
    "³": (True, "{}^{3}"),
    "⁴": (True, "{}^{4}"),
    "₁": (True, "{}_{1}"),
    "₂": (True, "{}_{2}"),
    "ᵀ": (True, r"{}^{\top}"),
    "′": (True, "'"),
    "§": (False, r"\S{}"),
    "¶": (False, r"\P{}"),
    "†": (False, r"\dag{}"),
    "‡": (False, r"\ddag{}"),
    "©": (False, r"\copyright{}"),
    "–": (False, "--"),
    "—": (False, "---"),
    "…": (False, r"\ldots{}"),
    "‘": (False, "`"),
    "’": (False, "'"),
    "“": (False, "``"),
    "”": (False, "''"),
    "\u00a0": (False, "~"),
}
# Commands of the amssymb package (every other command is LaTeX's own).
AMSSYMB_COMMANDS = (r"\blacktriangle", r"\lesssim")
# Greek capitals with a LaTeX command; the others look like Latin capitals.
_GREEK_CAPITALS = {
    "gamma", "delta", "theta", "lambda", "xi", "pi", "sigma", "upsilon", "phi", "psi", "omega",
}  # fmt: skip
_LATIN_LOOKALIKES = {
    "alpha": "A", "beta": "B", "epsilon": "E", "zeta": "Z", "eta": "H", "iota": "I", "kappa": "K",
    "mu": "M", "nu": "N", "omicron": "O", "rho": "P", "tau": "T", "chi": "X",
}  # fmt: skip
# Combining marks (NFD splits é into e and U+0301) -> (text accent, math accent): applied
# to the character before them, ``\'{e}`` in text, ``\bar{\gamma}`` in math (γ̄).
_ACCENTS = {
    "\u0300": ("`", "grave"),
    "\u0301": ("'", "acute"),
    "\u0302": ("^", "hat"),
    "\u0303": ("~", "tilde"),
    "\u0304": ("=", "bar"),
    "\u0306": ("u", "breve"),
    "\u0307": (".", "dot"),
    "\u0308": ('"', "ddot"),
    "\u030a": ("r", "mathring"),
    "\u030c": ("v", "check"),
    "\u0327": ("c", None),
}
MISSING = "--"


def _greek(char: str) -> tuple[bool, str] | None:
    """``(True, "\\gamma")`` for a Greek letter (``Γ`` -> ``\\Gamma``, ``Α`` -> Latin ``A``)."""
    found = re.fullmatch(
        r"GREEK (SMALL|CAPITAL) LETTER ([A-Z]+|FINAL SIGMA)", unicodedata.name(char, "")
    )
    if found is None:
        return None
    word = {"lamda": "lambda", "final sigma": "varsigma"}.get(found[2].lower(), found[2].lower())
    if found[1] == "SMALL":
        return (False, "o") if word == "omicron" else (True, f"\\{word}")
    if word in _GREEK_CAPITALS:
        return True, f"\\{word.capitalize()}"
    return (False, _LATIN_LOOKALIKES[word]) if word in _LATIN_LOOKALIKES else None


def _unspellable(char: str, text: str) -> ValueError:
    return ValueError(
        f"no LaTeX spelling for {char!r} (U+{ord(char):04X}) in {text!r}; add it to "
        "calib_pipeline.reports.latex._SYMBOLS"
    )


def _piece(char: str, text: str) -> list:
    """[math?, LaTeX] of one character of ``text``."""
    if char in _ASCII_SPECIALS:
        return [False, _ASCII_SPECIALS[char]]
    if char.isascii():
        return [False, char]
    found = _SYMBOLS.get(char) or _greek(char)
    if found is None:
        raise _unspellable(char, text)
    return list(found)


def _accent(piece: list, mark: str, text: str) -> None:
    """Put combining ``mark`` on ``piece`` (the character before it), in place."""
    text_accent, math_accent = _ACCENTS[mark]
    command = math_accent if piece[0] else text_accent
    if command is None:
        raise _unspellable(mark, text)
    piece[1] = f"\\{command}{{{piece[1]}}}"


def escape_latex(text: str) -> str:
    """``text`` as pdflatex reads it: LaTeX's special characters escaped, Greek letters
    and math symbols in one ``$...$`` per run, accents as accent commands (``é`` ->
    ``\\'{e}``, ``γ̄`` -> ``$\\bar{\\gamma}$``).

    >>> escape_latex("FLγ-SECE (γ=1), 2.08 ± 0.59 %")
    'FL$\\\\gamma$-SECE ($\\\\gamma$=1), 2.08 $\\\\pm$ 0.59 \\\\%'

    Raises:
        ValueError: a character with no LaTeX spelling here (quoting it).
    """
    pieces: list[list] = []
    for char in unicodedata.normalize("NFD", text):
        if char in _ACCENTS and pieces:
            _accent(pieces[-1], char, text)
        else:
            pieces.append(_piece(char, text))
    out: list[str] = []
    in_math = False
    for math_mode, latex in pieces:
        if math_mode != in_math:
            out.append("$")
            in_math = math_mode
        out.append(latex)
    if in_math:
        out.append("$")
    return "".join(out)


def _number(value: object) -> str:
    """A number outside a cell: floats with six decimals (as pandas wrote them), missing
    as ``--``."""
    if isinstance(value, (float, np.floating)):
        return MISSING if math.isnan(value) else f"{value:.6f}"
    return MISSING if value is None else escape_latex(str(value))


def _split_cell(text: str) -> tuple[str, str]:
    """A ``mean ± spread [suffix]`` cell as (mean, the rest), each escaped."""
    mean, _, rest = str(text).partition(" ")
    return escape_latex(mean), escape_latex(rest)


def _decimals(text: str) -> int | None:
    """How many decimals the mean of a cell shows (None: no decimal point)."""
    mean = str(text).partition(" ")[0]
    return len(mean.partition(".")[2]) if "." in mean else None


def best_rows(frame: pd.DataFrame, column: str) -> set[int]:
    """The positions of the best mean of cell column ``column`` of a ``with_numbers``
    table, compared as shown (rounded to the cell's decimals; ties all count): the
    lowest or highest by the direction of its metric; none when the column has no
    single metric, its metric no direction, or fewer than two values."""
    metric = frame.attrs.get("metrics", {}).get(column)
    direction = METRIC_DIRECTIONS.get(metric) if metric else None
    if direction is None:
        return set()
    means = frame[frame.attrs["numbers"][column][0]].to_numpy(dtype=float)
    shown = np.array(
        [
            round(m, d) if (d := _decimals(t)) is not None and math.isfinite(m) else m
            for m, t in zip(means, frame[column])
        ]
    )
    finite = np.isfinite(shown)
    if finite.sum() < 2:
        return set()
    best = np.nanmin(shown) if direction == "lower" else np.nanmax(shown)
    return {int(i) for i in np.flatnonzero(finite & (shown == best))}


def _cell_column(frame: pd.DataFrame, column: str) -> tuple[str, str, list[str]]:
    """Spec, header and rows of a cell column: mean (bold where best) & spread."""
    bold = best_rows(frame, column)
    rows = []
    for i, text in enumerate(frame[column]):
        mean, rest = _split_cell(text) if isinstance(text, str) else (MISSING, "")
        rows.append(f"\\textbf{{{mean}}} & {rest}" if i in bold else f"{mean} & {rest}")
    header = f"\\multicolumn{{2}}{{c}}{{{escape_latex(str(column))}}}"
    return "r@{ }l", header, rows


def _plain_column(values: pd.Series, column: str) -> tuple[str, str, list[str]]:
    """Spec, header and rows of a column of text (left) or numbers (right)."""
    numeric = pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)
    rows = [
        _number(v) if isinstance(v, numbers.Number) or v is None else escape_latex(str(v))
        for v in values
    ]
    return ("r" if numeric else "l"), escape_latex(str(column)), rows


def latex_table(frame: pd.DataFrame) -> str:
    """A booktabs ``tabular`` of a report table's layout (its ``attrs["layout"]`` columns
    when it is a :func:`~calib_pipeline.reports.common.with_numbers` table).

    Args:
        frame: the table.

    Returns:
        The LaTeX source, a comment line first saying what it needs and what bold means.

    Raises:
        ValueError: a character with no LaTeX spelling (:func:`escape_latex`).
    """
    layout = frame.attrs.get("layout") or list(frame.columns)
    cells = frame.attrs.get("numbers", {})
    specs, headers, columns = [], [], []
    for column in [c for c in layout if c in frame.columns]:
        spec, header, rows = (
            _cell_column(frame, column) if column in cells else _plain_column(frame[column], column)
        )
        specs.append(spec)
        headers.append(header)
        columns.append(rows)
    tabular = "\n".join(
        [
            f"\\begin{{tabular}}{{{''.join(specs)}}}",
            r"\toprule",
            " & ".join(headers) + r" \\",
            r"\midrule",
            *(" & ".join(row) + r" \\" for row in zip(*columns)),
            r"\bottomrule",
            r"\end{tabular}",
        ]
    )
    bolded = [
        f"{frame.attrs['metrics'][c]} ({METRIC_DIRECTIONS[frame.attrs['metrics'][c]]} is better)"
        for c in layout
        if c in cells and best_rows(frame, c)
    ]
    packages = "booktabs,amssymb" if any(c in tabular for c in AMSSYMB_COMMANDS) else "booktabs"
    note = f"% needs \\usepackage{{{packages}}}" + (
        f"; bold: the best value of each column, {', '.join(bolded)}" if bolded else ""
    )
    return f"{note}\n{tabular}\n"
