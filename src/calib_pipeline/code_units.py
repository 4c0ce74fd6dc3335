"""The package's source as *units* -- top-level functions, classes, assignments and other
statements -- and what each unit refers to, read from the syntax tree (nothing is imported).

A training is reused only by the code it depends on (``training.code_dependencies``): the
closure of a few root units under :meth:`SourceIndex.closure`. A unit's digest hashes its
syntax tree, so formatting, comments and its place in the file do not count; its docstring
does. What a unit refers to:

- every free name in it that the module defines or imports from the package (a name bound
  to a module counts through the attributes read from it: ``elementwise.cross_entropy`` is
  the unit ``cross_entropy`` of that module; a module used as a value counts whole);
- through a :class:`~calib_pipeline.registry.Registry` used otherwise than as
  ``X.register`` (``X.build(name)``, ``X.factory(name)``, passed as a value), every entry
  of that registry: which one is used is known only at run time. An entry is a unit that
  registers into it -- decorated with ``@X.register(...)`` or with a function of the package
  that calls ``X.register`` (``@register``), or a top-level statement that calls either.

Annotations count: a parameter's annotation is what names the class whose methods a
function calls on it (``store: CheckpointStore`` ... ``store.save(...)``). Imports,
``if TYPE_CHECKING`` blocks and docstrings of modules are no units. Code reached only
through a name computed at run time outside a registry (``getattr(module, name)``,
``importlib``), or through an object whose class the code never names, is not seen.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
# the unit of the Registry class, whose instances' entries are found by their registrations
REGISTRY_CLASS = "registry.py::Registry"


@dataclass
class Unit:
    """One top-level statement of a module (a def, class, assignment or other statement)."""

    name: str  # "<path relative to the package>::<defined name or statement label>"
    node: ast.stmt
    top_level_calls: set[str]  # names called outside function bodies, decorators included
    redefines: list[str] = field(default_factory=list)  # earlier units binding the same name
    # filled by ``analysed()`` when a closure first reaches the unit
    digest: str = ""
    free_names: set[str] = field(default_factory=set)  # free names read as values
    attributes: set[tuple[str, str]] = field(default_factory=set)  # (free name, attribute)

    def analysed(self) -> Unit:
        """The unit with its digest, free names and attribute reads."""
        if not self.digest:
            self.digest = unit_digest(self.node)
            _FreeNames(self).visit(self.node)
        return self


@dataclass
class _Module:
    path: str
    units: dict[str, Unit] = field(default_factory=dict)  # defined name -> unit
    anonymous: list[Unit] = field(default_factory=list)
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # module, attribute


def unit_digest(node: ast.AST) -> str:
    """Hash of a syntax tree without positions: formatting, comments and place do not count."""
    return hashlib.sha256(ast.dump(node, include_attributes=False).encode()).hexdigest()[:16]


def digest_of(units: dict[str, str]) -> str:
    """One hash of a set of units (name -> digest)."""
    return hashlib.sha256(json.dumps(units, sort_keys=True).encode()).hexdigest()[:16]


class SourceIndex:
    """Every unit of the package under ``root`` and how they refer to each other."""

    def __init__(self, root: Path = PACKAGE) -> None:
        self.root = Path(root)
        self.package = self.root.name
        self._modules: dict[str, _Module] = {}  # dotted module name -> module
        for path in sorted(self.root.rglob("*.py")):
            relative = path.relative_to(self.root)
            parts = [self.package, *relative.with_suffix("").parts]
            dotted = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            self._modules[dotted] = _read_module(relative.as_posix(), dotted, path.read_text())
        self._by_path = {m.path: m for m in self._modules.values()}
        self._by_name = {u.name: u for m in self._modules.values() for u in _all_units(m)}
        self._entries = self._registry_entries()

    def unit(self, name: str) -> Unit:
        """The unit called ``name`` (``ValueError`` naming the file when there is none)."""
        if name not in self._by_name:
            raise ValueError(f"no top-level definition {name!r} in {self.root}")
        return self._by_name[name]

    def unit_at(self, path: str, line: int) -> Unit:
        """The top-level unit of file ``path`` (relative to the root) spanning ``line``."""
        module = self._by_path.get(path)
        for unit in _all_units(module) if module else ():
            first = min([unit.node.lineno, *(d.lineno for d in _decorators(unit.node))])
            if first <= line <= (unit.node.end_lineno or unit.node.lineno):
                return unit
        raise ValueError(f"no top-level statement of {self.package}/{path} spans line {line}")

    def closure(
        self, roots: Iterable[str], not_followed: Iterable[str] = (), excluded: Iterable[str] = ()
    ) -> dict[str, str]:
        """The units ``roots`` depend on, themselves included, as name -> digest; lookups
        in the registries ``not_followed`` (unit names) do not add their entries, and the
        units ``excluded`` are left out with what only they refer to."""
        skipped, left_out, seen, todo = set(not_followed), set(excluded), {}, list(roots)
        while todo:
            unit = self.unit(todo.pop()).analysed()
            if unit.name in seen:
                continue
            seen[unit.name] = unit.digest
            references = self._references(unit, skipped)
            todo += [u for u in references if u not in seen and u not in left_out]
        return dict(sorted(seen.items()))

    def _references(self, unit: Unit, skipped: set[str]) -> Iterator[str]:
        module = self._module_of(unit)
        yield from unit.redefines
        for name in unit.free_names:
            yield from self._target_units(self._resolve(module, name), True, skipped)
        for name, attribute in unit.attributes:
            base = self._resolve(module, name)
            if isinstance(base, _Module):
                yield from self._target_units(self._resolve(base, attribute), True, skipped)
            else:
                yield from self._target_units(base, attribute != "register", skipped)

    def _target_units(
        self, target: Unit | _Module | None, looked_up: bool, skipped: set[str]
    ) -> Iterator[str]:
        """The units a reference to ``target`` depends on: a module's every unit; a unit,
        and a registry's entries when it is looked up (and not ``skipped``)."""
        if isinstance(target, _Module):
            yield from (u.name for u in _all_units(target))
        elif target is not None:
            yield target.name
            if looked_up and target.name in self._entries and target.name not in skipped:
                yield from self._entries[target.name]

    def _module_of(self, unit: Unit) -> _Module:
        return self._by_path[unit.name.split("::")[0]]

    def _resolve(self, module: _Module, name: str, depth: int = 0) -> Unit | _Module | None:
        """What ``name`` means in ``module``: one of its units, a module of the package, a
        unit another module of the package defines, or None (builtins, other packages)."""
        if name in module.units:
            return module.units[name]
        if name not in module.imports or depth > 20:
            return None
        source, attribute = module.imports[name]
        if attribute is None:
            return self._modules.get(source)
        if f"{source}.{attribute}" in self._modules:
            return self._modules[f"{source}.{attribute}"]
        origin = self._modules.get(source)
        return None if origin is None else self._resolve(origin, attribute, depth + 1)

    def _registry_entries(self) -> dict[str, list[str]]:
        """Registry unit -> the units that register into it."""
        registries = {
            u.name
            for u in self._by_name.values()
            if isinstance(u.node, (ast.Assign, ast.AnnAssign))
            and isinstance(getattr(u.node, "value", None), ast.Call)
            and self._called(u, u.node.value) == REGISTRY_CLASS
        }
        registrars: dict[str, set[str]] = {r: set() for r in registries}
        for unit in self._by_name.values():
            if isinstance(unit.node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for registry in self._registered(unit, _registrations(unit.node.body)):
                    if registry in registrars:  # ``x.register`` of something else is no registry
                        registrars[registry].add(unit.name)
        entries: dict[str, list[str]] = {r: [] for r in registries}
        for unit in self._by_name.values():
            called = {self._target_name(unit, n) for n in unit.top_level_calls}
            own = self._registered(unit, _registrations_outside_body(unit))
            for registry in registries:
                if registry in own or called & registrars[registry]:
                    entries[registry].append(unit.name)
        return entries

    def _registered(self, unit: Unit, names: Iterable[str]) -> set[str]:
        return {t for t in (self._target_name(unit, n) for n in names) if t is not None}

    def _target_name(self, unit: Unit, name: str) -> str | None:
        target = self._resolve(self._module_of(unit), name)
        return target.name if isinstance(target, Unit) else None

    def _called(self, unit: Unit, call: ast.Call) -> str | None:
        func = call.func
        name = func.id if isinstance(func, ast.Name) else None
        return None if name is None else self._target_name(unit, name)


@functools.lru_cache(maxsize=4)
def source_index(root: Path = PACKAGE) -> SourceIndex:
    """The index of ``root``, read once per process (the code does not change under a run)."""
    return SourceIndex(root)


def _all_units(module: _Module) -> list[Unit]:
    return [*{u.name: u for u in module.units.values()}.values(), *module.anonymous]


def _decorators(node: ast.stmt) -> list[ast.expr]:
    return getattr(node, "decorator_list", [])


def _read_module(path: str, dotted: str, source: str) -> _Module:
    module = _Module(path)
    package = dotted if path.endswith("__init__.py") else dotted.rpartition(".")[0]
    labels: dict[str, int] = {}
    for node in ast.parse(source).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            module.imports.update(_bindings(node, package))
        elif _is_docstring(node) or _is_type_checking_block(node):
            continue
        elif names := _defined_names(node):
            earlier = [module.units[n] for n in names if n in module.units]
            label = names[0] + (f" @{node.lineno}" if earlier else "")
            unit = _unit(f"{path}::{label}", node)
            unit.redefines = [u.name for u in earlier]  # ``x += ...`` builds on the earlier x
            module.anonymous += earlier
            module.units.update(dict.fromkeys(names, unit))
        else:
            label = _statement_label(node)
            labels[label] = labels.get(label, 0) + 1
            suffix = f" #{labels[label]}" if labels[label] > 1 else ""
            module.anonymous.append(_unit(f"{path}::{label}{suffix}", node))
    return module


def _bindings(node: ast.Import | ast.ImportFrom, package: str) -> dict[str, tuple[str, str | None]]:
    if isinstance(node, ast.Import):
        return {
            (alias.asname or alias.name.split(".")[0]): (
                alias.name if alias.asname else alias.name.split(".")[0],
                None,
            )
            for alias in node.names
        }
    base = node.module or ""
    if node.level:
        parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
        base = f"{parent}.{base}" if base else parent
    return {(alias.asname or alias.name): (base, alias.name) for alias in node.names}


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)


def _is_type_checking_block(node: ast.stmt) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(test)


def _defined_names(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    targets = (
        node.targets
        if isinstance(node, ast.Assign)
        else [node.target]
        if isinstance(node, (ast.AnnAssign, ast.AugAssign))
        else []
    )
    return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]


def _statement_label(node: ast.stmt) -> str:
    """A name for a statement that defines none: the call and its first literal argument
    (``_register('digits')``), else its kind."""
    call = node.value if isinstance(node, ast.Expr) else None
    if isinstance(call, ast.Call):
        first = call.args[0] if call.args else None
        argument = repr(first.value) if isinstance(first, ast.Constant) else "..."
        return f"{ast.unparse(call.func)}({argument})"
    return f"<{type(node).__name__.lower()} statement>"


def _unit(name: str, node: ast.stmt) -> Unit:
    defines = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    top_level = _decorators(node) if defines else [node]
    calls = [
        n.func
        for part in top_level
        for n in _walk_outside_functions(part)
        if isinstance(n, ast.Call)
    ]
    decorators = [d for d in _decorators(node) if isinstance(d, ast.Name)]  # ``@register``
    return Unit(name, node, {f.id for f in [*calls, *decorators] if isinstance(f, ast.Name)})


def _registrations_outside_body(unit: Unit) -> set[str]:
    """Names registered into by the unit's own top-level code (decorators, or the whole
    statement for a non-def), not by the body of a function it defines."""
    node = unit.node
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return _registrations(_decorators(node))
    return _registrations([node])


def _registrations(nodes: Iterable[ast.AST]) -> set[str]:
    """The names ``X`` read as ``X.register`` anywhere in ``nodes``."""
    return {
        n.value.id
        for part in nodes
        for n in ast.walk(part)
        if isinstance(n, ast.Attribute) and n.attr == "register" and isinstance(n.value, ast.Name)
    }


class _FreeNames(ast.NodeVisitor):
    """Fills a unit's free names read as values and the attributes read from free names.
    A name bound anywhere in a function (argument,
    assignment, loop target, ...) is local to that function, as Python scopes it."""

    def __init__(self, unit: Unit) -> None:
        self.unit = unit
        self.scopes: list[tuple[set[str], bool]] = []  # (bound names, is a class body)

    def _free(self, name: str) -> bool:
        """Not bound in an enclosing function, nor in the class body it is read in (a
        method does not see its class's names, as in Python)."""
        innermost = len(self.scopes) - 1
        return not any(
            name in bound and (not is_class or depth == innermost)
            for depth, (bound, is_class) in enumerate(self.scopes)
        )

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load) and self._free(node.id):
            self.unit.free_names.add(node.id)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        base = node.value
        if isinstance(base, ast.Name) and isinstance(base.ctx, ast.Load):
            if self._free(base.id):
                self.unit.attributes.add((base.id, node.attr))
        else:
            self.generic_visit(node)

    def _scoped(self, node: ast.AST, body: list[ast.AST], arguments: ast.arguments | None):
        local = {a.arg for a in _arguments(arguments)}
        for statement in body:
            local |= _bound_names(statement)
        self.scopes.append((local, isinstance(node, ast.ClassDef)))
        for statement in body:
            self.visit(statement)
        self.scopes.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for expression in [*node.decorator_list, *_defaults(node.args), node.returns]:
            if expression is not None:
                self.visit(expression)
        for argument in _arguments(node.args):
            if argument.annotation is not None:
                self.visit(argument.annotation)
        self._scoped(node, node.body, node.args)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        for expression in _defaults(node.args):
            self.visit(expression)
        self._scoped(node, [node.body], node.args)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for expression in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
            self.visit(expression)
        self._scoped(node, node.body, None)

    def _comprehension(self, node: ast.AST) -> None:
        generators = node.generators
        self.visit(generators[0].iter)
        local = {n.id for g in generators for n in ast.walk(g.target) if isinstance(n, ast.Name)}
        self.scopes.append((local, False))
        for generator in generators:
            if generator is not generators[0]:
                self.visit(generator.iter)
            for condition in generator.ifs:
                self.visit(condition)
        for part in ("elt", "key", "value"):
            if getattr(node, part, None) is not None:
                self.visit(getattr(node, part))
        self.scopes.pop()

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension


def _arguments(arguments: ast.arguments | None) -> list[ast.arg]:
    if arguments is None:
        return []
    extra = [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
    return [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, *extra]


def _defaults(arguments: ast.arguments) -> list[ast.expr]:
    return [d for d in [*arguments.defaults, *arguments.kw_defaults] if d is not None]


def _bound_names(statement: ast.AST) -> set[str]:
    """Names a statement binds in its own scope (not in functions or classes nested in it)."""
    bound = set()
    for node in _walk_outside_functions(statement):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return bound


def _walk_outside_functions(node: ast.AST) -> Iterator[ast.AST]:
    """``ast.walk`` that does not enter the bodies of functions, lambdas, classes or
    comprehensions (their names are their own)."""
    todo = [node]
    while todo:
        current = todo.pop()
        yield current
        nested = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
        comprehension = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)
        if isinstance(current, nested + comprehension):
            continue
        todo += list(ast.iter_child_nodes(current))
