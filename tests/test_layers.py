"""The packages' imports point one way: down the layers, never up, and form no cycle.

    jobsctl        the `jobsctl` command and the demos
    pipeline       the Spark pipeline: catalog, ingest, operations on tables, CTAS
    processors     worker loops, task behaviors, distributed operations
    monitor        the activity monitor, the status server
    jobs (facade)  the job layer's API: ``jobs`` itself and ``jobs.aio``
    jobs.observe   following jobs, the workers registry, the store's status
    jobs.upkeep    cron ticks enqueued, pruning, repair
    jobs.queue     a job's row through its states: add, accept, finish, read
    jobs.controls  type timeouts, pausing, limits, fairness, retention
    jobs.indexes   the pending queues, counts, rates, failed jobs
    jobs           what every part of the job layer shares: keys, codec, checks, errors
    jobs.engine    the storage engines (the FoundationDB API)

Every import statement counts, those inside functions too (a function-level import is an
import all the same).  Read from the source with ``ast``: nothing is executed."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["jobs.engine", "jobs", "jobs.indexes", "jobs.controls", "jobs.queue", "jobs.upkeep", "jobs.observe",
          "jobs (facade)", "jobs.aio", "monitor", "processors", "pipeline", "jobsctl"]  # bottom up
# the package ``jobs`` is the facade: it gathers the API from the parts, so it sits above them
FACADE = {"jobs": "jobs (facade)"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    found = {}
    for package in ("jobs", "monitor", "processors", "pipeline", "jobsctl"):
        for path in (ROOT / package).rglob("*.py"):
            found[_module_name(path)] = path
    return found


def _statements(name: str, path: Path):
    """Each import statement of module ``name`` as ``(module, names)``: ``from module import
    names`` with relative imports resolved, or ``(None, modules)`` for ``import modules``."""
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield None, [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            prefix = base[: len(base) - node.level + 1] if node.level else []
            yield ".".join(prefix + ([node.module] if node.module else [])), [a.name for a in node.names]


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The project's modules that ``name`` imports (resolved to a known module)."""
    out = set()
    for module, names in _statements(name, path):
        # ``from package import submodule`` imports the submodule; any other name is an
        # attribute of the module itself
        targets = names if module is None else [f"{module}.{n}" if f"{module}.{n}" in known else module
                                                 for n in names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def _layer(module: str) -> int:
    module = FACADE.get(module, module)
    return max(i for i, layer in enumerate(LAYERS) if module == layer or module.startswith(layer + "."))


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, set(modules)) for name, path in modules.items()}


def test_every_import_points_down_the_layers():
    upward = sorted(
        f"{name} imports {target}"
        for name, targets in _graph().items()
        for target in targets
        if _layer(target) > _layer(name)
    )
    assert upward == []


def test_no_import_cycles():
    graph = _graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(path[path.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == []


def test_the_key_layout_is_the_job_layers_own():
    """``jobs.keys`` (where every key of the job layer lives) is imported by ``jobs`` only:
    the packages above it, and the benchmarks, go through the job layer's functions."""
    modules = _modules()
    for path in (ROOT / "bench").rglob("*.py"):
        if ".peers-venv" not in path.parts:
            modules[_module_name(path)] = path
    outside = sorted(name for name, path in modules.items()
                     if not (name == "jobs" or name.startswith("jobs."))
                     and "jobs.keys" in _imports(name, path, set(modules) | {"jobs.keys"}))
    assert outside == []


def test_the_engine_is_imported_as_one_package():
    """Above the engine, its modules are imported through ``jobs.engine`` (the names its
    ``__init__`` exports), never one by one: what the layers use of the engine is said in
    one place.  (Tests and benchmarks may reach inside: they measure and test its parts.)"""
    init = ROOT / "jobs" / "engine" / "__init__.py"
    exported = next(ast.literal_eval(node.value) for node in ast.parse(init.read_text()).body
                    if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__all__")
    parts = {path.stem for path in init.parent.glob("*.py")} - set(exported)
    reaching = []
    for name, path in _modules().items():
        if name == "jobs.engine" or name.startswith("jobs.engine."):
            continue
        for module, names in _statements(name, path):
            if module is None:
                reaching += [f"{name}: import {n}" for n in names if n.startswith("jobs.engine.")]
            elif module.startswith("jobs.engine."):
                reaching.append(f"{name}: from {module}")
            elif module == "jobs.engine":
                reaching += [f"{name}: from jobs.engine import {n}" for n in names if n in parts]
    assert reaching == []


def test_every_part_of_the_job_layer_is_a_layer():
    """A new sub-package of ``jobs`` takes its place in :data:`LAYERS`, or its imports would
    go unchecked (it would count as the shared ``jobs``)."""
    parts = sorted(f"jobs.{path.parent.name}" for path in (ROOT / "jobs").glob("*/__init__.py"))
    assert [part for part in parts if part not in LAYERS] == []
