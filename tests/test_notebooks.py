"""The committed notebooks: no outputs, public APIs only (executed in tests/test_end_to_end.py)."""

import re
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_are_committed_without_outputs(path):
    notebook = nbformat.read(path, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code, "a notebook with code"
    assert not [cell.source[:40] for cell in code if cell.outputs or cell.execution_count]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_read_no_private_attribute(path):
    source = "\n".join(
        c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"
    )
    private = re.findall(r"\.\s*_[A-Za-z]\w*", source)
    assert not private, f"private attributes used: {private} (use catalog.load / list_versions)"
