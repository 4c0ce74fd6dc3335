"""The house rules of docs/architecture.md, checked by parsing the source.

Layers, bottom up (``LAYERS``): registry and tensor I/O < models < data < calibration <
training < reports < pipelines < top floor.

- A module imports only modules of its own layer or of lower ones. Every import counts: at
  module level or inside a function, absolute or relative, and ``importlib.import_module``
  or ``__import__`` of a literal name. A computed name is allowed only inside the module's
  own package (``f"{__package__}.{name}"``); any other is refused, as the check cannot read it.
- Every module has a layer: a new top-level module is placed in ``LAYERS`` on purpose.
- The science (the layers below pipelines) imports no Kedro and no MLflow.
- No import cycle between the project's modules.
- No function is longer than 60 lines, or 80 in the metric kernels (``METRIC_KERNELS``);
  ``LONG_FUNCTION_ALLOWED`` names the longer ones of today, each with its reason.

Each rule also runs on small synthetic sources, so a check that stops seeing what it
forbids fails too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

ROOT = "calib_pipeline"
SRC = Path(__file__).resolve().parents[1] / "src"
# path relative to src/ -> source text, for every module of the package
SOURCES = {p.relative_to(SRC).as_posix(): p.read_text() for p in sorted((SRC / ROOT).rglob("*.py"))}

# (layer, the top-level modules and packages under calib_pipeline/ that form it), bottom up
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("registry and tensor I/O", ("registry", "tensor_io", "code_units")),
    ("models", ("models",)),
    ("data", ("data",)),
    ("calibration", ("calibration",)),
    ("training", ("training",)),
    ("reports", ("reports",)),
    ("pipelines", ("pipelines",)),
    (
        "top floor",
        (
            "pipeline_registry",
            "settings",
            "hooks",
            "kedro_compat",
            "kedro_datasets",
            "runner",
            "console",
            "retention",
            "protocols",  # which conf/<env> writes where: checked as the pipelines are built
            "cli",
            "__main__",
        ),
    ),
)
LAYER_NAMES = [name for name, _ in LAYERS]
SCIENCE = LAYER_NAMES[: LAYER_NAMES.index("pipelines")]
FRAMEWORKS = ("kedro", "kedro_datasets", "kedro_viz", "mlflow")

MAX_FUNCTION_LINES = 60
# The metric kernels: the cache-blocked and compiled loops whose passes over the scores are
# tuned together (benchmarks/bench_metrics.py); they may run to the former limit.
METRIC_KERNELS = (
    "calib_pipeline.calibration._metrics_kernels",
    "calib_pipeline.calibration._metrics_fused",
    "calib_pipeline.calibration._metrics_binning",
)
MAX_KERNEL_LINES = 80
# Functions allowed over MAX_FUNCTION_LINES, each with its reason (none today). An entry
# that is no longer too long (or no longer exists) fails
# test_every_long_function_allowed_is_still_too_long, so the list only shrinks.
LONG_FUNCTION_ALLOWED: dict[str, str] = {}


def module_name(path: str) -> str:
    """``calib_pipeline/data/__init__.py`` -> ``calib_pipeline.data``."""
    parts = Path(path).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_package(path: str) -> bool:
    return Path(path).name == "__init__.py"


def layer_of(module: str) -> str | None:
    """The layer of a project module, or None where ``LAYERS`` does not place it."""
    if module == ROOT:
        return LAYER_NAMES[0]  # the package's __init__: its version, importing nothing
    top = module.split(".")[1]
    return next((name for name, members in LAYERS if top in members), None)


def absolute(name: str, level: int, package: str) -> str:
    """The absolute name of an import ``level`` dots above ``package`` (0: already absolute)."""
    if level == 0:
        return name
    base = package.rsplit(".", level - 1)[0] if level > 1 else package
    return f"{base}.{name}" if name else base


def dynamic_import_names(tree: ast.AST) -> Iterator[ast.expr]:
    """The name argument of every ``importlib.import_module(...)`` or ``__import__(...)``
    call (whichever way the function was imported)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            called = getattr(func, "attr", None) or getattr(func, "id", None)
            if called in ("import_module", "__import__"):
                yield node.args[0]


def imported_names(
    module: str, source: str, package: bool, modules: frozenset[str] = frozenset()
) -> set[str]:
    """Every absolute name ``source`` imports: import statements anywhere, relative ones
    resolved, and dynamic imports of a literal name. ``from a import b`` names ``a.b`` where
    that is one of ``modules`` (a submodule), else ``a`` and ``a.b``."""
    home = module if package else module.rpartition(".")[0]
    tree = ast.parse(source)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = absolute(node.module or "", node.level, home)
            names = {f"{base}.{alias.name}" for alias in node.names}
            found.update(names if names <= modules else {base, *names})
    for name in dynamic_import_names(tree):
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            relative = name.value.lstrip(".")
            found.add(absolute(relative, len(name.value) - len(relative), home))
    return found


def own_package_name(name: ast.expr) -> bool:
    """Whether a computed module name starts with the module's own package or name."""
    if not isinstance(name, ast.JoinedStr) or not name.values:
        return False
    first = name.values[0]
    return (
        isinstance(first, ast.FormattedValue)
        and isinstance(first.value, ast.Name)
        and first.value.id in ("__package__", "__name__")
    )


def unreadable_imports(sources: Mapping[str, str]) -> list[str]:
    """Dynamic imports whose name the check cannot read (not a literal, not own package)."""
    return sorted(
        f"{module_name(path)}: {ast.unparse(name)}"
        for path, source in sources.items()
        for name in dynamic_import_names(ast.parse(source))
        if not (isinstance(name, ast.Constant) or own_package_name(name))
    )


def project_imports(sources: Mapping[str, str]) -> dict[str, set[str]]:
    """Module -> the other modules of ``sources`` it imports."""
    modules = frozenset(module_name(path) for path in sources)
    graph = {}
    for path, source in sources.items():
        module = module_name(path)
        names = imported_names(module, source, is_package(path), modules)
        graph[module] = (names & modules) - {module}
    return graph


def unplaced_modules(sources: Mapping[str, str]) -> list[str]:
    return sorted(m for m in map(module_name, sources) if layer_of(m) is None)


def layer_violations(sources: Mapping[str, str]) -> list[str]:
    """Every import of a module from a layer above the importer's."""
    rank = {name: index for index, name in enumerate(LAYER_NAMES)}
    return sorted(
        f"{module} ({layer_of(module)}) imports {target} ({layer_of(target)})"
        for module, targets in project_imports(sources).items()
        for target in targets
        if rank[layer_of(target)] > rank[layer_of(module)]
    )


def framework_imports(sources: Mapping[str, str]) -> list[str]:
    """Every import of Kedro or MLflow by a module of the science."""
    return sorted(
        f"{module_name(path)} imports {name}"
        for path, source in sources.items()
        if layer_of(module_name(path)) in SCIENCE
        for name in imported_names(module_name(path), source, is_package(path))
        if name.split(".")[0] in FRAMEWORKS
    )


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (as a path that returns to its start), or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def function_lengths(sources: Mapping[str, str]) -> Iterator[tuple[str, int, str]]:
    """(module.function, lines with decorators, path:line) of every function."""
    for path, source in sources.items():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                where = f"{path}:{node.lineno}"
                yield f"{module_name(path)}.{node.name}", node.end_lineno - start + 1, where


def line_limit(function: str) -> int:
    in_kernel = function.rpartition(".")[0] in METRIC_KERNELS
    return MAX_KERNEL_LINES if in_kernel else MAX_FUNCTION_LINES


def long_functions(sources: Mapping[str, str], allowed: Mapping[str, str]) -> list[str]:
    rows = [
        (lines, f"{function} ({where}): {lines} lines")
        for function, lines, where in function_lengths(sources)
        if lines > line_limit(function) and function not in allowed
    ]
    return [text for _, text in sorted(rows, reverse=True)]


# --- the rules on the project's source


def test_every_layer_holds_modules_and_every_module_has_a_layer():
    assert unplaced_modules(SOURCES) == [], "place these modules in LAYERS"
    placed = {layer_of(module_name(path)) for path in SOURCES}
    assert placed == set(LAYER_NAMES), f"empty layers: {set(LAYER_NAMES) - placed}"


def test_every_module_imports_only_its_own_layer_or_lower_ones():
    assert layer_violations(SOURCES) == []


def test_the_science_imports_no_kedro_and_no_mlflow():
    assert framework_imports(SOURCES) == [], "the science must run without Kedro"


def test_every_dynamic_import_names_its_module():
    assert unreadable_imports(SOURCES) == [], "write the module name as a string literal"


def test_no_import_cycle():
    cycle = find_cycle(project_imports(SOURCES))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_function_is_longer_than_the_limit():
    assert long_functions(SOURCES, LONG_FUNCTION_ALLOWED) == [], "split these functions"


def test_every_long_function_allowed_is_still_too_long():
    lengths = {function: lines for function, lines, _ in function_lengths(SOURCES)}
    stale = sorted(
        f"{function}: {lengths.get(function, 'gone')}"
        for function in LONG_FUNCTION_ALLOWED
        if lengths.get(function, 0) <= line_limit(function)
    )
    assert stale == [], "take these off LONG_FUNCTION_ALLOWED"


def test_every_metric_kernel_exists():
    modules = {module_name(path) for path in SOURCES}
    assert set(METRIC_KERNELS) <= modules


# --- the checks themselves, on synthetic sources

FORMS = {
    "import": "import {target}",
    "from import": "from {package} import {leaf}",
    "from module import": "from {target} import something",
    "inside a function": "def load():\n    import {target}\n",
    "relative": "from ..{member} import {leaf}",
    "importlib": "import importlib\nimportlib.import_module('{target}')",
    "import_module": "from importlib import import_module\nimport_module('{target}')",
    "relative importlib": (
        "import importlib\nimportlib.import_module('..{member}.{leaf}', __package__)"
    ),
    "__import__": "__import__('{target}')",
}


def probe_path(member: str, leaf: str = "probe") -> str:
    return f"{ROOT}/{member}/{leaf}.py"


def importing(importer: str, member: str, form: str) -> dict[str, str]:
    """A synthetic module ``importer`` that imports ``calib_pipeline.<member>.target``."""
    package, leaf = f"{ROOT}.{member}", "target"
    code = FORMS[form].format(target=f"{package}.{leaf}", package=package, leaf=leaf, member=member)
    return {importer: code, probe_path(member, leaf): ""}


ADJACENT = [(LAYERS[i][1][0], LAYERS[i + 1][1][0]) for i in range(len(LAYERS) - 1)]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(("lower", "upper"), ADJACENT)
def test_an_import_from_the_layer_above_is_a_violation(lower, upper, form):
    sources = importing(probe_path(lower), upper, form)
    assert layer_violations(sources) == [
        f"{ROOT}.{lower}.probe ({layer_of(f'{ROOT}.{lower}')}) imports "
        f"{ROOT}.{upper}.target ({layer_of(f'{ROOT}.{upper}')})"
    ]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(("lower", "upper"), ADJACENT)
def test_an_import_from_the_own_or_a_lower_layer_is_allowed(lower, upper, form):
    assert layer_violations(importing(probe_path(upper), lower, form)) == []
    assert layer_violations(importing(probe_path(upper), upper, form)) == []


def test_the_bottom_may_not_import_the_top_floor():
    sources = importing(probe_path("tensor_io"), "hooks", "import")
    assert layer_violations(sources) == [
        f"{ROOT}.tensor_io.probe (registry and tensor I/O) imports {ROOT}.hooks.target (top floor)"
    ]


def test_a_module_outside_the_layers_is_reported():
    assert unplaced_modules({f"{ROOT}/tracking.py": "", f"{ROOT}/data/io.py": ""}) == [
        f"{ROOT}.tracking"
    ]


@pytest.mark.parametrize("layer", SCIENCE)
def test_a_science_module_importing_kedro_or_mlflow_is_reported(layer):
    member = dict(LAYERS)[layer][0]
    for framework in ("kedro.pipeline", "mlflow"):
        source = f"def track():\n    import {framework}\n"
        assert framework_imports({probe_path(member): source}) == [
            f"{ROOT}.{member}.probe imports {framework}"
        ]
    assert framework_imports({probe_path("pipelines"): "import kedro.pipeline"}) == []


def test_a_computed_dynamic_import_is_reported_unless_of_the_own_package():
    sources = {
        probe_path("calibration"): (
            "import importlib\n"
            "importlib.import_module(f'{__package__}.{module.name}')\n"
            "importlib.import_module('calib_pipeline.data.splits')\n"
            "importlib.import_module(NAME)\n"
            "__import__(f'calib_pipeline.{layer}')\n"
        )
    }
    assert unreadable_imports(sources) == [
        f"{ROOT}.calibration.probe: NAME",
        f"{ROOT}.calibration.probe: f'calib_pipeline.{{layer}}'",
    ]


def test_find_cycle_finds_a_cycle_and_accepts_a_dag():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_a_cycle_through_importlib_is_found():
    sources = {
        f"{ROOT}/calibration/kernels.py": (
            "import importlib\n"
            "def fused():\n"
            "    return importlib.import_module('calib_pipeline.calibration.fused')\n"
        ),
        f"{ROOT}/calibration/fused.py": "from calib_pipeline.calibration.kernels import FLOOR",
    }
    assert find_cycle(project_imports(sources)) == [
        f"{ROOT}.calibration.fused",
        f"{ROOT}.calibration.kernels",
        f"{ROOT}.calibration.fused",
    ]


def test_importing_a_submodule_is_no_cycle_but_importing_the_package_back_is():
    sources = {
        f"{ROOT}/training/__init__.py": "from calib_pipeline.training.engine import train_model",
        f"{ROOT}/training/engine.py": "from calib_pipeline.training import checkpoint",
        f"{ROOT}/training/checkpoint.py": "import torch",
    }
    assert find_cycle(project_imports(sources)) is None
    sources[f"{ROOT}/training/checkpoint.py"] = "from calib_pipeline.training import train_model"
    assert find_cycle(project_imports(sources)) == [
        f"{ROOT}.training",
        f"{ROOT}.training.engine",
        f"{ROOT}.training.checkpoint",
        f"{ROOT}.training",
    ]


def function_source(name: str, lines: int) -> str:
    return f"def {name}():\n" + "    pass\n" * (lines - 1)


def test_a_function_over_the_limit_is_reported_unless_allowed():
    node = function_source("node", MAX_FUNCTION_LINES + 1)
    fits = function_source("fits", MAX_FUNCTION_LINES)
    sources = {probe_path("pipelines"): node + "\n\n" + fits}
    assert long_functions(sources, {}) == [
        f"{ROOT}.pipelines.probe.node ({probe_path('pipelines')}:1): 61 lines"
    ]
    assert long_functions(sources, {f"{ROOT}.pipelines.probe.node": "a reason"}) == []


def test_a_metric_kernel_may_run_to_its_own_limit():
    kernel_path = METRIC_KERNELS[0].replace(".", "/") + ".py"
    fits = {kernel_path: function_source("scan", MAX_KERNEL_LINES)}
    assert long_functions(fits, {}) == []
    too_long = {kernel_path: function_source("scan", MAX_KERNEL_LINES + 1)}
    assert long_functions(too_long, {}) == [
        f"{METRIC_KERNELS[0]}.scan ({kernel_path}:1): {MAX_KERNEL_LINES + 1} lines"
    ]


def test_no_module_is_in_two_layers():
    members = [member for _, layer in LAYERS for member in layer]
    assert sorted(m for m in set(members) if members.count(m) > 1) == []
