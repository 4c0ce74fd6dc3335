"""The package's source as units and what each refers to (``calib_pipeline.code_units``),
on small synthetic packages written by the tests."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from calib_pipeline.code_units import SourceIndex, unit_digest

REGISTRY = """
class Registry:
    def register(self, name):
        return lambda factory: factory
    def build(self, name):
        return name
"""
HELPERS = """
def shared(x):
    return x + 1

def unrelated(x):
    return x - 1
"""
LOSSES = """
from pkg import helpers as h
from pkg.helpers import shared
from pkg.registry import Registry

TERMS = Registry("term")
OBJECTIVES = Registry("objective")


@TERMS.register("plain")
def _plain_term():
    return 0


@OBJECTIVES.register("ce")
def _ce():
    return shared(1)


@OBJECTIVES.register("other")
def _other():
    return h.unrelated(2)


@OBJECTIVES.register("by_name")
def _by_name(term="plain"):
    return TERMS.build(term)


def local_shadow():
    shared = 3
    return shared
"""


def write_package(root: Path, **files: str) -> Path:
    """A package ``pkg`` under ``root`` with ``files`` (module name -> source)."""
    package = root / "pkg"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    for name, source in files.items():
        (package / f"{name}.py").write_text(textwrap.dedent(source))
    return package


@pytest.fixture
def package(tmp_path) -> Path:
    return write_package(tmp_path, registry=REGISTRY, helpers=HELPERS, losses=LOSSES)


def test_a_closure_holds_what_a_unit_refers_to_and_nothing_else(package):
    closure = SourceIndex(package).closure(["losses.py::_ce"])
    assert set(closure) == {
        "losses.py::_ce",
        "losses.py::OBJECTIVES",  # its registering decorator
        "registry.py::Registry",
        "helpers.py::shared",  # imported by name
    }
    other = SourceIndex(package).closure(["losses.py::_other"])
    assert "helpers.py::unrelated" in other, "read as an attribute of the imported module"
    assert "helpers.py::shared" not in other


def test_a_name_bound_in_a_function_is_its_own_not_the_modules(package):
    assert set(SourceIndex(package).closure(["losses.py::local_shadow"])) == {
        "losses.py::local_shadow"
    }


def test_a_registry_looked_up_by_name_brings_every_entry_and_registering_brings_none(package):
    index = SourceIndex(package)
    by_name = index.closure(["losses.py::_by_name"])
    assert "losses.py::_plain_term" in by_name, "TERMS.build(term): any term may be built"
    assert "losses.py::_ce" not in index.closure(["losses.py::_other"])
    assert "losses.py::_plain_term" not in index.closure(
        ["losses.py::_by_name"], not_followed=["losses.py::TERMS"]
    )


def test_a_unit_registered_by_a_top_level_call_is_an_entry_of_that_registry(tmp_path):
    package = write_package(
        tmp_path,
        registry=REGISTRY,
        data="""
        from pkg.registry import Registry

        DATASETS = Registry("dataset")


        def _register(name, spec):
            DATASETS.register(name)(spec)


        def load(name):
            return DATASETS.build(name)


        _register("digits", lambda: 1)
        _register("cifar", lambda: 2)
        """,
    )
    index = SourceIndex(package)
    assert {"data.py::_register('digits')", "data.py::_register('cifar')"} <= set(
        index.closure(["data.py::load"])
    )
    line = (package / "data.py").read_text().splitlines().index('_register("cifar", lambda: 2)')
    assert index.unit_at("data.py", line + 1).name == "data.py::_register('cifar')"


def test_appending_an_objective_changes_no_other_unit_and_editing_one_changes_only_it(package):
    before = SourceIndex(package).closure(["losses.py::_ce"])
    losses = package / "losses.py"
    losses.write_text(
        losses.read_text()
        + '\n\n@OBJECTIVES.register("new")\ndef _new():\n    return shared(5) + helper_of_new()\n'
        + "\n\ndef helper_of_new():\n    return 1\n"
    )
    assert SourceIndex(package).closure(["losses.py::_ce"]) == before
    losses.write_text(losses.read_text().replace("return shared(1)", "return shared(1) * 2"))
    after = SourceIndex(package).closure(["losses.py::_ce"])
    assert {u for u in before if before[u] != after[u]} == {"losses.py::_ce"}


def test_a_units_digest_ignores_comments_formatting_and_place_but_not_code():
    import ast

    def digest(source: str) -> str:
        return unit_digest(ast.parse(textwrap.dedent(source)).body[0])

    plain = digest("def f(x):\n    return x + 1\n")
    assert digest("def f(x):  # why\n\n    return (x +\n            1)\n") == plain
    assert digest("def f(x):\n    return x + 2\n") != plain


def test_an_unknown_unit_or_line_is_refused_by_name(package):
    index = SourceIndex(package)
    with pytest.raises(ValueError, match=r"no top-level definition 'losses.py::_missing'"):
        index.closure(["losses.py::_missing"])
    with pytest.raises(ValueError, match=r"no top-level statement of pkg/losses\.py spans line 1"):
        index.unit_at("losses.py", 1)


def test_a_name_bound_twice_at_top_level_depends_on_both_bindings(tmp_path):
    package = write_package(
        tmp_path,
        extended="""
        NAMES = ["a"]
        NAMES += ["b"]


        def names():
            return NAMES
        """,
    )
    closure = SourceIndex(package).closure(["extended.py::names"])
    assert set(closure) == {"extended.py::names", "extended.py::NAMES", "extended.py::NAMES @3"}


def test_a_method_reads_the_modules_name_not_its_class_attribute(tmp_path):
    package = write_package(
        tmp_path,
        scoped="""
        def scale():
            return 2


        class Loss:
            scale = 1.0

            def __call__(self, x):
                return scale() * x
        """,
    )
    assert "scoped.py::scale" in SourceIndex(package).closure(["scoped.py::Loss"])


def test_a_class_decorated_by_a_registering_function_is_an_entry(tmp_path):
    package = write_package(
        tmp_path,
        registry=REGISTRY,
        calibrators="""
        from pkg.registry import Registry

        CALIBRATORS = Registry("calibrator")


        def register(cls):
            return CALIBRATORS.register(cls.__name__)(cls)


        @register
        class Temperature:
            pass


        def build(name):
            return CALIBRATORS.build(name)
        """,
    )
    assert "calibrators.py::Temperature" in SourceIndex(package).closure(["calibrators.py::build"])
