"""The house rules of docs/architecture.md, checked by parsing the source.

- Science (calibration/, data/, models/, training/, reports/ and registry.py) imports no
  Kedro and nothing of the Kedro glue.
- The glue (pipelines/) imports only downward: science, or other glue -- never the
  registry, hooks or settings that sit above it.
- No import cycle between the project's modules (imports inside functions count).
- No function is longer than ~80 lines outside the metric kernels.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "calib_pipeline"
SCIENCE = ("calibration", "data", "models", "training", "reports", "registry")
GLUE = ("pipelines",)
TOP = ("pipeline_registry", "hooks", "settings", "kedro_datasets", "runner")
MAX_FUNCTION_LINES = 80
# Functions allowed past the limit, each with its reason (none today: the metric kernels
# fit in it too).
LONG_FUNCTION_ALLOWED: set[str] = set()


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(path: Path) -> set[str]:
    """Absolute names imported anywhere in the module (a ``from a import b`` that names a
    submodule imports ``a.b``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in MODULES)
    return found


def project_imports(module: str) -> set[str]:
    return {name for name in imports(MODULES[module]) if name in MODULES and name != module}


def layer(module: str) -> str:
    if module == "calib_pipeline":
        return "root"  # the package itself: one line, imports nothing
    part = module.split(".")[1]
    if part in SCIENCE:
        return "science"
    if part in GLUE:
        return "glue"
    return "top"


def test_the_module_list_covers_every_layer():
    assert {layer(m) for m in MODULES} == {"root", "science", "glue", "top"}
    assert any(m.startswith("calib_pipeline.reports.") for m in MODULES), "reports/ is a science package"


@pytest.mark.parametrize("module", [m for m in MODULES if layer(m) == "science"])
def test_science_imports_no_kedro_and_no_glue(module):
    names = imports(MODULES[module])
    kedro = sorted(n for n in names if n.split(".")[0] in ("kedro", "kedro_datasets", "kedro_viz", "mlflow"))
    assert not kedro, f"{module} imports {kedro}: science must run without Kedro"
    upward = sorted(n for n in names & set(MODULES) if layer(n) not in ("science", "root"))
    assert not upward, f"{module} imports {upward}: science imports only science"


@pytest.mark.parametrize("module", [m for m in MODULES if layer(m) == "glue"])
def test_glue_imports_only_downward(module):
    upward = sorted(n for n in project_imports(module) if layer(n) == "top")
    assert not upward, f"{module} imports {upward}: pipelines/ may import science and glue only"


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (as a path that returns to its start), or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def import_graph() -> dict[str, set[str]]:
    """Module -> project modules it imports; a package's ``__init__`` re-exporting its own
    submodules is not an edge back from them (that is how packages are assembled)."""
    graph = {}
    for module in MODULES:
        targets = project_imports(module)
        graph[module] = {t for t in targets if not (t.startswith(module + ".") and MODULES[module].name == "__init__.py")}
    for module, targets in graph.items():
        # importing a package runs its __init__, which imports its submodules
        graph[module] = targets | {
            t2 for t in targets if MODULES[t].name == "__init__.py" for t2 in graph.get(t, ()) if t2.startswith(t + ".")
        } - {module}
    return graph


def test_find_cycle_finds_a_cycle_and_accepts_a_dag():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def long_functions(limit: int = MAX_FUNCTION_LINES) -> list[tuple[int, str]]:
    rows = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                length = node.end_lineno - start + 1
                if length > limit and f"{module}.{node.name}" not in LONG_FUNCTION_ALLOWED:
                    rows.append((length, f"{module}.{node.name} ({path.name}:{node.lineno})"))
    return sorted(rows, reverse=True)


def test_no_function_is_longer_than_the_limit():
    assert long_functions() == [], "split these functions: " + "; ".join(f"{w}: {n} lines" for n, w in long_functions())


def test_the_length_check_sees_long_functions():
    assert long_functions(limit=5), "a 5-line limit must flag some functions"
