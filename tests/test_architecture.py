"""House rules, checked on the source (AST), so a violation fails before it runs.

Imports (those inside functions and under ``TYPE_CHECKING`` count: they are dependencies too):

* The product (``service/``, ``workers/``, ``migrations/``) never imports test tooling (``devtools``,
  ``tests``, ``bench``).
* No module imports another package's private ``_module`` or ``_name``.
* No modules import one another, directly or round a circle. The nodes are the modules of
  ``service/`` and ``workers/``, a package's ``__init__`` among them; ``import a.b`` depends on
  ``a.b``, and ``from a import b`` on ``a`` (``b`` is looked up in ``a``'s front, which runs first)
  and on ``a.b`` too when that is a module.
* A module imports its siblings directly (``import service.core.events as ev``,
  ``from service.core.events import Event``), never through its own package's front
  (``from service.core import events``, ``from . import events``): only what the front defines
  itself is taken from it. A front that imports its modules would otherwise close a circle with each.
* Between packages the graph is acyclic too. Its nodes are the packages and root modules of
  ``service`` (``service.core``, ``service.api``, ``service.event_store``, ``service.app``,
  ``service.startup``, ...), the workers' three parts (``workers.runtime``, ``workers.download``,
  ``workers.inference``), the root packages ``service`` and ``workers``, and ``migrations`` (which
  imports the event store's schema: running them is ``service.recovery.migrate``'s).
* Workers import ``service.core`` and ``service.event_store`` only (STYLE.md house rule 4),
  besides the root ``service`` package for ``__version__``.
* The download and inference workers share only the runtime (and the root ``workers`` package's
  ``lazy_exports``, which the lazy fronts share): neither imports the other, and the runtime imports
  neither.
* Inside the inference worker, layers: ``llama`` (llama.cpp) <- ``engine`` <- ``http``
  <- the worker itself; the engine knows no HTTP, and llama.cpp's layer knows neither.
  ``http`` sees one thing of the worker: its states (``/health`` reports them).

One writer: in all of ``service/``, events are appended only through the interpreter (``WRITERS``
names the store's own writers). The drivers (``service/supervision``, ``service/api``): no
``nonlocal``; settings, the clock and ids come from outside (``service/outside/world.py``).

Size and layout: modules up to 400 lines and functions up to 60, except what ``SIZE_EXCEPTIONS``
names with a reason (none past 600, and each entry still needed); ``ruff format`` lays out all code
(no ``# fmt: skip``/``# fmt: off`` but in generated tables); the service root holds only its entry
points (``app``, ``cli``, ``settings``, ``startup``).

Wire bodies are typed: at most ``MAX_FREE_FORM`` free-form JSON annotations (``dict[str, Any]``,
``Mapping[str, Any]``, ``[str, JSON]``) in ``service/`` and ``workers/``, each saying why.

The core: every ``Any`` in ``service/core`` says why, and ``tests/core`` tests pure functions (no
fixture, process or network).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Collection, Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("service", "workers", "migrations")
TOOLING = {"devtools", "tests", "bench"}
WORKERS_MAY_IMPORT = {"service", "service.core", "service.event_store"}
WORKER_PARTS = ("workers.runtime", "workers.download", "workers.inference")
# Besides the root package ``workers`` (its ``lazy_exports``, which the parts' fronts share).
WORKER_PARTS_MAY_IMPORT = {
    "workers.runtime": {"workers"},
    "workers.download": {"workers", "workers.runtime"},
    "workers.inference": {"workers", "workers.runtime"},
}
# What each layer of the inference worker may import of the inference worker (a layer knows nothing above it).
INFERENCE_LAYERS_MAY_IMPORT = {
    "workers.inference.llama": ("workers.inference.llama",),
    "workers.inference.speculative": ("workers.inference.speculative",),  # drafting: pure, beside the engine
    "workers.inference.engine": (
        "workers.inference.engine",
        "workers.inference.llama",
        "workers.inference.speculative",
    ),
    "workers.inference.http": (
        "workers.inference.http",
        "workers.inference.engine",
        "workers.inference.llama",
        "workers.inference.WorkerState",
        "workers.inference._lifecycle",  # the worker's states, from their own module (no cycle through the front)
    ),
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_package(name: str) -> bool:
    return (ROOT / name.replace(".", "/") / "__init__.py").is_file()


def _is_module(name: str) -> bool:
    return _is_package(name) or (ROOT / (name.replace(".", "/") + ".py")).is_file()


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _product_modules() -> Iterator[tuple[str, Path]]:
    for top in PRODUCT:
        for path in sorted((ROOT / top).rglob("*.py")):
            yield _module_name(path), path


def _import_statements(package: str, tree: ast.AST) -> Iterator[tuple[int, str, str | None]]:
    """``(line, base, name)`` per imported name: ``from a import b`` is ``(line, "a", "b")``, ``import a.b``
    is ``(line, "a.b", None)``; relative imports are resolved against ``package``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, None
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            if base == "__future__":
                continue
            for alias in node.names:
                yield node.lineno, base, alias.name


def _parse(path: Path) -> ast.AST:
    return ast.parse(path.read_text(), str(path))


def _imports(module: str, path: Path) -> Iterator[tuple[int, str]]:
    """``(line, dotted target)`` per import; ``from a import b`` targets ``a.b``
    when ``b`` is a module, else ``a`` (and ``a.b`` for private-name checks)."""
    for line, base, name in _import_statements(_package_of(module, path), _parse(path)):
        yield line, base if name is None else f"{base}.{name}"


def _node(target: str) -> str | None:
    """The graph node a dotted target belongs to (None outside the product)."""
    parts = target.split(".")
    if parts[0] == "workers":
        part = ".".join(parts[:2])
        return part if part in WORKER_PARTS else "workers"  # the root package itself
    if parts[0] == "migrations":
        return "migrations"  # Alembic's scripts: one node (they import the schema and the settings)
    if parts[0] != "service":
        return None
    if len(parts) == 1 or not _is_module(".".join(parts[:2])):
        return "service"  # the root package itself (``from service import __version__``)
    return ".".join(parts[:2])


def _private_owner(target: str) -> str | None:
    """The package that owns the first private part of ``target``, if any."""
    parts = target.split(".")
    for i, part in enumerate(parts[1:], 1):
        if part.startswith("_") and not (part.startswith("__") and part.endswith("__")):
            prefix = ".".join(parts[:i])
            return prefix if _is_package(prefix) else prefix.rpartition(".")[0]
    return None


def test_the_product_never_imports_test_tooling() -> None:
    bad = [
        f"{module}:{line} imports {target}"
        for module, path in _product_modules()
        for line, target in _imports(module, path)
        if target.split(".")[0] in TOOLING
    ]
    assert not bad, "\n".join(bad)


def test_no_module_imports_another_packages_private_parts() -> None:
    bad = []
    for module, path in _product_modules():
        package = _package_of(module, path)
        for line, target in _imports(module, path):
            owner = _private_owner(target)
            if owner is not None and package != owner and not package.startswith(owner + "."):
                bad.append(f"{module}:{line} imports {target}, private to {owner}")
    assert not bad, "\n".join(bad)


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in _product_modules():
        source = _node(module)
        assert source is not None
        for _line, target in _imports(module, path):
            node = _node(target)
            if node is not None and node != source:
                graph.setdefault(source, set()).add(node)
    return graph


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    visiting: list[str] = []
    done: set[str] = set()

    def visit(node: str) -> list[str] | None:
        if node in visiting:
            return [*visiting[visiting.index(node) :], node]
        if node in done:
            return None
        visiting.append(node)
        for nxt in sorted(graph.get(node, ())):
            if cycle := visit(nxt):
                return cycle
        visiting.pop()
        done.add(node)
        return None

    for start in sorted(graph):
        if cycle := visit(start):
            return cycle
    return None


def test_the_package_import_graph_is_acyclic() -> None:
    graph = _graph()
    assert {"service.api", "service.supervision", "service.recovery", *WORKER_PARTS} <= set(graph)  # the scan works
    cycle = _find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "d": {"a", "c"}}) is None


# --- issue 30: no cycle between modules, siblings imported directly ---------------------------


def _module_of(target: str, is_module: Callable[[str], bool] = _is_module) -> str | None:
    """The product module (a package's ``__init__`` included) that holds a dotted target."""
    while target and not is_module(target):
        target = target.rpartition(".")[0]
    return target or None


def _module_edges(
    statements: Iterable[tuple[int, str, str | None]], is_module: Callable[[str], bool] = _is_module
) -> set[str]:
    """The modules an import graph's node depends on: ``import a.b`` on ``a.b``; ``from a import b`` on
    ``a`` (its names are looked up there, so ``a``'s front runs first) and on ``a.b`` too when that is a
    module."""
    edges = set()
    for _line, base, name in statements:
        edges.add(_module_of(base, is_module))
        if name is not None and is_module(f"{base}.{name}"):
            edges.add(_module_of(f"{base}.{name}", is_module))
    return {edge for edge in edges if edge is not None}


def _module_graph() -> dict[str, set[str]]:
    graph = {}
    for module, path in _product_modules():
        if module.split(".")[0] in ("service", "workers"):
            statements = _import_statements(_package_of(module, path), _parse(path))
            edges = _module_edges(statements) - {module}
            graph[module] = {edge for edge in edges if edge.split(".")[0] in ("service", "workers")}
    return graph


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph.get(start, ()))
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    return seen


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each set of modules that import one another, directly or not (a strongly connected component)."""
    reach = {node: _reachable(graph, node) for node in graph}
    groups = {frozenset({node} | {other for other in reach[node] if node in reach.get(other, ())}) for node in graph}
    return sorted(sorted(group) for group in groups if len(group) > 1)


def test_no_two_modules_import_each_other() -> None:
    """Function-level and ``TYPE_CHECKING`` imports count; a package's ``__init__`` is a module."""
    graph = _module_graph()
    assert {"service.app", "service.event_store", "workers.inference.engine._batch"} <= set(graph)  # the scan works
    cycles = [", ".join(cycle) for cycle in _cycles(graph)]
    assert not cycles, "modules that import one another:\n" + "\n".join(cycles)


def test_the_module_cycle_finder_finds_each_cycle_through_a_front() -> None:
    modules = {"pkg", "pkg.a", "pkg.b", "pkg.c", "other", "other.x"}
    front_imports_a = _module_edges([(1, "pkg.a", "run")], modules.__contains__)
    a_imports_b_through_the_front = _module_edges([(1, "pkg", "b")], modules.__contains__)
    b_imports_a_name = _module_edges([(1, "pkg.a", "helper")], modules.__contains__)
    c_imports_directly = _module_edges([(1, "pkg.a", None), (2, "pkg.b", "f")], modules.__contains__)
    assert (a_imports_b_through_the_front, c_imports_directly) == ({"pkg", "pkg.b"}, {"pkg.a", "pkg.b"})
    graph = {
        "pkg": front_imports_a,
        "pkg.a": a_imports_b_through_the_front,
        "pkg.b": b_imports_a_name,
        "pkg.c": c_imports_directly,
        "other": {"other.x"},
        "other.x": {"other"},
    }
    assert _cycles(graph) == [["other", "other.x"], ["pkg", "pkg.a", "pkg.b"]]
    graph["pkg.a"] = {"pkg.b"}  # imports its sibling directly: only a and b are left in a circle
    assert _cycles(graph) == [["other", "other.x"], ["pkg.a", "pkg.b"]]


def _front_defines(package: str) -> set[str]:
    """The names a package's ``__init__`` defines itself (not those it imports)."""
    tree = _parse(ROOT / package.replace(".", "/") / "__init__.py")
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def _through_own_front(
    package: str, statements: Iterable[tuple[int, str, str | None]], front_defines: Collection[str]
) -> list[tuple[int, str]]:
    """``(line, name)`` for each ``from package import name`` (or ``from . import name``) of a module
    of ``package`` where the name is not the front's own: a sibling module, or a name one holds."""
    return [
        (line, name)
        for line, base, name in statements
        if name is not None and base == package and name not in front_defines
    ]


def test_modules_import_their_siblings_directly_not_through_their_packages_front() -> None:
    bad = []
    for module, path in _product_modules():
        if path.name == "__init__.py":
            continue
        package = _package_of(module, path)
        statements = _import_statements(package, _parse(path))
        found = _through_own_front(package, statements, _front_defines(package))
        bad += [f"{module}:{line} imports {name} through {package}" for line, name in found]
    assert not bad, "\n".join(bad)


def test_the_front_check_finds_a_sibling_imported_through_the_front() -> None:
    source = (
        "from . import b\nfrom pkg import c as see, VERSION\nfrom pkg.d import f\nimport pkg.e\nfrom other import g\n"
    )
    statements = _import_statements("pkg", ast.parse(source))
    assert _through_own_front("pkg", statements, {"VERSION"}) == [(1, "b"), (2, "c")]


def test_workers_import_only_the_core_and_the_event_store() -> None:
    graph = _graph()
    for part in ("workers", *WORKER_PARTS):
        reached = {node for node in graph.get(part, set()) if not node.startswith("workers")}
        assert reached <= WORKERS_MAY_IMPORT, f"{part} imports {sorted(reached - WORKERS_MAY_IMPORT)}"


def test_the_download_and_inference_workers_share_only_the_runtime() -> None:
    graph = _graph()
    for part, allowed in WORKER_PARTS_MAY_IMPORT.items():
        reached = {node for node in graph.get(part, set()) if node.startswith("workers")}
        assert reached <= allowed, f"{part} imports {sorted(reached - allowed)}"


def _within(target: str, prefix: str) -> bool:
    return target == prefix or target.startswith(prefix + ".")


def _layer_violations(imports: Iterable[tuple[str, int, str]]) -> list[str]:
    """``module:line imports target`` for each import of the inference worker above the module's layer."""
    return [
        f"{module}:{line} imports {target}"
        for module, line, target in imports
        for layer, allowed in INFERENCE_LAYERS_MAY_IMPORT.items()
        if _within(module, layer) and _within(target, "workers.inference")
        if not any(_within(target, a) for a in allowed)
    ]


def test_the_inference_engine_knows_no_http_and_llama_knows_neither() -> None:
    imports = [(module, line, target) for module, path in _product_modules() for line, target in _imports(module, path)]
    bad = _layer_violations(imports)
    assert not bad, "\n".join(bad)


def test_the_layer_check_finds_an_upward_import() -> None:
    imports = [
        ("workers.inference.engine._batch", 1, "workers.inference.http.ApiError"),
        ("workers.inference.llama._model", 2, "workers.inference.engine.Request"),
        ("workers.inference.engine._job", 3, "workers.inference.WorkerState"),
        ("workers.inference.http.server._app", 4, "workers.inference.WorkerState"),
        ("workers.inference.http.server._handler", 5, "workers.inference.engine.Job"),
        ("workers.inference._worker", 6, "workers.inference.http.InferenceApp"),
    ]
    assert _layer_violations(imports) == [
        "workers.inference.engine._batch:1 imports workers.inference.http.ApiError",
        "workers.inference.llama._model:2 imports workers.inference.engine.Request",
        "workers.inference.engine._job:3 imports workers.inference.WorkerState",
    ]


# The inference worker's HTTP side in three rooms over a floor: chat knows neither dialects nor server,
# dialects may know chat, server may know both; every room may import the floor (the private modules
# at the package's root: ``_errors``, ``_options``, ``_json``, ``_record``), which imports no room.
# Only the package's front (``workers.inference.http`` itself) imports the rooms from above.
HTTP = "workers.inference.http"
HTTP_ROOMS_MAY_IMPORT = {
    f"{HTTP}.chat": (f"{HTTP}.chat",),
    f"{HTTP}.dialects": (f"{HTTP}.chat", f"{HTTP}.dialects"),
    f"{HTTP}.server": (f"{HTTP}.chat", f"{HTTP}.dialects", f"{HTTP}.server"),
}


def _on_http_floor(target: str) -> bool:
    parts = target.split(".")
    return _within(target, HTTP) and len(parts) > 3 and parts[3].startswith("_") and not parts[3].startswith("__")


def _room_violations(imports: Iterable[tuple[str, int, str]]) -> list[str]:
    """``module:line imports target`` for each import inside the HTTP side that its room may not make."""
    bad = []
    for module, line, target in imports:
        if module == HTTP or not _within(module, HTTP) or not _within(target, HTTP):
            continue
        room = next((r for r in HTTP_ROOMS_MAY_IMPORT if _within(module, r)), None)
        allowed = HTTP_ROOMS_MAY_IMPORT[room] if room is not None else ()  # the floor imports no room
        if not any(_within(target, a) for a in allowed) and not _on_http_floor(target):
            bad.append(f"{module}:{line} imports {target}")
    return bad


def test_the_http_rooms_import_only_downwards() -> None:
    imports = [(module, line, target) for module, path in _product_modules() for line, target in _imports(module, path)]
    bad = _room_violations(imports)
    assert not bad, "\n".join(bad)


def test_the_room_check_finds_an_upward_import() -> None:
    imports = [
        (f"{HTTP}.chat._session", 1, f"{HTTP}.dialects.chat_request"),
        (f"{HTTP}.dialects._requests", 2, f"{HTTP}.server.InferenceApp"),
        (f"{HTTP}.chat._parse", 3, f"{HTTP}.ApiError"),
        (f"{HTTP}._errors", 4, f"{HTTP}.chat.ChatRun"),
        (f"{HTTP}.server._handler", 5, f"{HTTP}.dialects.predict"),
        (f"{HTTP}.dialects._compat", 6, f"{HTTP}.chat.ChatRun"),
        (f"{HTTP}.chat._media", 7, f"{HTTP}._errors.ApiError"),
        (HTTP, 8, f"{HTTP}.server.bind_server"),
    ]
    assert _room_violations(imports) == [
        f"{HTTP}.chat._session:1 imports {HTTP}.dialects.chat_request",
        f"{HTTP}.dialects._requests:2 imports {HTTP}.server.InferenceApp",
        f"{HTTP}.chat._parse:3 imports {HTTP}.ApiError",
        f"{HTTP}._errors:4 imports {HTTP}.chat.ChatRun",
    ]


# --- issue 17's rules ------------------------------------------------------------------------

DRIVERS = ("service/supervision", "service/api")
"""The packages that carry decisions out: facts in, a core decision, the interpreter."""
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 400, 60
HARD_MODULE_LINES = 600
"""No module passes this, exception or not."""
# Modules and functions allowed past the limits, each with the reason. The limits are a prompt to
# split by idea, not to compress: ``ruff format`` lays out all code, and what holds one idea that
# splitting would scatter is named here.
SIZE_EXCEPTIONS: dict[str, str] = {
    "service/core/launch.py": "the inference launch's option table, one field per option, and its readers",
}


def _driver_files() -> Iterator[Path]:
    for folder in DRIVERS:
        yield from sorted((ROOT / folder).rglob("*.py"))


def _calls(tree: ast.AST) -> Iterator[tuple[int, str, str]]:
    """``(line, receiver source, method name)`` for every ``x.method(...)`` call."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            yield node.lineno, ast.unparse(node.func.value), node.func.attr


_STORE_APPENDS = frozenset({"append", "append_one"})
_LIVE_WRITES = frozenset({"record", "decide", "commit"})
WRITERS: dict[str, str] = {
    "service/supervision/interpreter.py": "the one writer of the service",
    "service/event_store/live_state.py": "the live state's record, decide and commit, which the interpreter calls",
    "service/event_store/async_store.py": "the service's store: its append implemented",
    "service/event_store/sync_store.py": "the workers' and the CLI's store: its append implemented",
    "service/event_store/worker_writer.py": "a worker's SQLite writer: the one insert, implemented",
    "service/event_store/postgres/worker_writer.py": "a worker's PostgreSQL writer: the one insert, implemented",
    "service/event_store/statements.py": "the append statement the stores run",
    "service/recovery/gc.py": "``modelrouter gc``: a process of its own (source ``gc``), as a worker records its facts",
}
"""The modules of ``service/`` that write to the log other than through the interpreter, each with the reason."""


def _appends(tree: ast.AST) -> Iterator[int]:
    """Lines that write events other than through the interpreter: a store's or a writer's append, the
    statement's, ``insert_rows``, the live state's record, decide or commit; called, or handed on as
    a function (``to_thread(store.append, ...)``, ``run_sync(statements.append, ...)``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id == "insert_rows" and isinstance(node.ctx, ast.Load):
            yield node.lineno
        if not isinstance(node, ast.Attribute):
            continue
        tail = ast.unparse(node.value).rsplit(".", 1)[-1].lower()
        to_store = node.attr in _STORE_APPENDS and any(word in tail for word in ("store", "writer", "statements"))
        to_live = node.attr in _LIVE_WRITES and "live" in tail
        if to_store or to_live or node.attr == "insert_rows":
            yield node.lineno


def _service_files() -> Iterator[Path]:
    yield from sorted((ROOT / "service").rglob("*.py"))


def test_drivers_smuggle_nothing_out_of_closures() -> None:
    bad = []
    for path in _driver_files():
        tree = ast.parse(path.read_text(), str(path))
        rel = path.relative_to(ROOT)
        bad += [f"{rel}:{n.lineno} nonlocal" for n in ast.walk(tree) if isinstance(n, ast.Nonlocal)]
    assert not bad, "\n".join(bad)


def test_the_service_appends_only_through_the_interpreter() -> None:
    """Issue 30 §3: one writer. Every append in ``service/`` goes through
    ``service/supervision/interpreter.py``, but for the store's own modules and :data:`WRITERS`."""
    bad = []
    for path in _service_files():
        rel = str(path.relative_to(ROOT))
        if rel not in WRITERS:
            bad += [f"{rel}:{line} appends events itself" for line in _appends(ast.parse(path.read_text(), rel))]
    assert not bad, "\n".join(bad)


def test_every_named_writer_still_writes() -> None:
    """A module in WRITERS that no longer appends goes."""
    stale = [rel for rel in WRITERS if not any(_appends(ast.parse((ROOT / rel).read_text(), rel)))]
    assert not stale, f"no longer write: {stale}"


def test_the_append_check_finds_each_way_of_writing() -> None:
    code = (
        "self.live.record([e])\nawait runtime.store.append(b)\nlive.decide(f)\nitems.append(x)\n"
        "await asyncio.to_thread(store.append, b)\nconn.run_sync(statements.append, b, s)\n"
        "insert_rows(cursor, b, s)\nawait self._live.commit(b)\nself._pg_writer.append(b)\n"
        "rows.insert_rows(c, b, s)\nself.store.append_one(e)\nlog.record(x)\nstate.decide\n"
    )
    assert sorted(_appends(ast.parse(code))) == [1, 2, 3, 5, 6, 7, 8, 9, 10, 11]


def _reads_of_the_outside(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and ast.unparse(node) in ("os.environ", "os.getenv"):
            yield node.lineno, ast.unparse(node)
        if isinstance(node, ast.Call):
            called = ast.unparse(node.func)
            if called in ("time.time", "uuid.uuid4", "uuid4", "datetime.now", "datetime.utcnow"):
                yield node.lineno, called + "()"


def test_drivers_take_settings_clock_and_ids_from_outside() -> None:
    """Settings, the clock and id sources are passed in (``service/outside/world.py`` holds the real ones)."""
    bad = [
        f"{path.relative_to(ROOT)}:{line} reads {what}"
        for path in _driver_files()
        for line, what in _reads_of_the_outside(ast.parse(path.read_text(), str(path)))
    ]
    assert not bad, "\n".join(bad)


def test_no_module_or_function_is_too_long() -> None:
    bad = []
    for top in ("service", "workers"):
        for path in sorted((ROOT / top).rglob("*.py")):
            rel, text = str(path.relative_to(ROOT)), path.read_text()
            lines = text.count("\n")
            if lines > HARD_MODULE_LINES or (lines > MAX_MODULE_LINES and rel not in SIZE_EXCEPTIONS):
                bad.append(f"{rel}: {lines} lines")
            for node in ast.walk(ast.parse(text, rel)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > MAX_FUNCTION_LINES and f"{rel}:{node.name}" not in SIZE_EXCEPTIONS:
                        bad.append(f"{rel}:{node.lineno} {node.name}: {length} lines")
    assert not bad, "\n".join(bad)


def test_every_any_in_the_core_says_why() -> None:
    """``Any`` in ``service/core``: each use carries a comment, on its line or the line above."""
    bad = []
    for path in sorted((ROOT / "service" / "core").rglob("*.py")):
        lines = path.read_text().splitlines()
        tree = ast.parse("\n".join(lines), str(path))
        used = {n.lineno for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == "Any"}
        for line in sorted(used):
            here, above = lines[line - 1], lines[line - 2] if line > 1 else ""
            if "#" not in here and not above.lstrip().startswith("#"):
                bad.append(f"{path.relative_to(ROOT)}:{line}: {here.strip()}")
    assert not bad, "\n".join(bad)


# Imports that would make a core test something other than a pure function's test.
_IMPURE_IN_CORE_TESTS = ("devtools", "httpx", "subprocess", "psutil", "tests.conftest_hub", "tests.service_probes")


def _fixture_arguments(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """A test's arguments that only a pytest fixture could fill (not hypothesis, not parametrize)."""
    decorators = " ".join(ast.unparse(d) for d in node.decorator_list)
    if "given(" in decorators or "parametrize(" in decorators:
        return []
    return [a.arg for a in node.args.args if a.arg != "self"]


def test_core_tests_use_no_fixture_process_or_network() -> None:
    """``tests/core`` tests the pure core: no conftest, no fixture, no process, no HTTP."""
    core_tests = ROOT / "tests" / "core"
    bad = [str(p.relative_to(ROOT)) for p in core_tests.rglob("conftest.py")]
    for path in sorted(core_tests.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
                bad += [f"{path.name}:{node.name} takes fixture {arg}" for arg in _fixture_arguments(node)]
        imported = [target for _, target in _imports(_module_name(path), path)]
        bad += [f"{path.name} imports {m}" for m in imported if m.startswith(_IMPURE_IN_CORE_TESTS)]
    assert not bad, "\n".join(bad)


def test_the_fixture_check_tells_a_fixture_from_a_generated_argument() -> None:
    source = "def test_a(tmp_path): ...\n@given(st.integers())\ndef test_b(n): ...\n"
    first, second = ast.parse(source).body
    assert isinstance(first, ast.FunctionDef) and isinstance(second, ast.FunctionDef)
    assert (_fixture_arguments(first), _fixture_arguments(second)) == (["tmp_path"], [])


GENERATED_TABLES = {
    "service/llamacpp/upstream_args.py": "generated by devtools.extract_llama_args: one option per line"
}
"""Generated data kept one record per line (``# fmt: off``), each with the reason."""


def test_the_formatter_lays_out_all_code() -> None:
    """No ``# fmt: skip``/``# fmt: off`` in the product: hand layout was used to save lines."""
    marker = re.compile(r"#\s*fmt:\s*(skip|off)\b")
    bad = [
        f"{path.relative_to(ROOT)}:{number}"
        for top in PRODUCT
        for path in sorted((ROOT / top).rglob("*.py"))
        if str(path.relative_to(ROOT)) not in GENERATED_TABLES
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if marker.search(line)
    ]
    assert not bad, "\n".join(bad)


def test_every_size_exception_is_still_needed() -> None:
    """A name in SIZE_EXCEPTIONS whose module or function is back under the limit goes."""
    stale = []
    for key in SIZE_EXCEPTIONS:
        rel, _, function = key.partition(":")
        path = ROOT / rel
        if not path.is_file():
            stale.append(key)
            continue
        text = path.read_text()
        if not function:
            if text.count("\n") <= MAX_MODULE_LINES:
                stale.append(key)
            continue
        lengths = [
            (node.end_lineno or node.lineno) - node.lineno + 1
            for node in ast.walk(ast.parse(text, rel))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function
        ]
        if not any(length > MAX_FUNCTION_LINES for length in lengths):
            stale.append(key)
    assert not stale, "no longer past the limit: " + ", ".join(stale)


SERVICE_ROOT = {"__init__.py", "app.py", "cli.py", "settings.py", "startup.py"}
"""The service root holds its entry points only: the app, the command line, the settings, the start-up."""


def test_the_service_root_holds_only_its_entry_points() -> None:
    extra = sorted(p.name for p in (ROOT / "service").glob("*.py") if p.name not in SERVICE_ROOT)
    assert not extra, f"move into the package they belong to: {extra}"


FREE_FORM = re.compile(r"dict\[str, ?Any\]|Mapping\[str, ?Any\]|\[str, ?JSON\]")
MAX_FREE_FORM = 80
"""Free-form JSON annotations left in the product: wire bodies are typed at the edge instead."""


def _unexplained_free_form(lines: list[str]) -> Iterator[int]:
    """Lines with a free-form JSON annotation and no reason: a comment on the line or the line above,
    or a docstring on the line below (a named alias's)."""
    for number, line in enumerate(lines, 1):
        if FREE_FORM.search(line):
            above = lines[number - 2].strip() if number > 1 else ""
            below = lines[number].strip() if number < len(lines) else ""
            if "#" not in line and not above.startswith("#") and not below.startswith('"""'):
                yield number


def test_free_form_json_is_rare_and_says_why() -> None:
    found, bad = 0, []
    for top in ("service", "workers"):
        for path in sorted((ROOT / top).rglob("*.py")):
            lines = path.read_text().splitlines()
            found += sum(1 for line in lines if FREE_FORM.search(line))
            bad += [f"{path.relative_to(ROOT)}:{n}" for n in _unexplained_free_form(lines)]
    assert found <= MAX_FREE_FORM, f"{found} free-form JSON annotations (at most {MAX_FREE_FORM}): type the body"
    assert not bad, "free-form without a reason:\n" + "\n".join(bad)


def test_the_free_form_check_wants_a_reason() -> None:
    lines = [
        "x: dict[str, Any] = {}",
        "# schemas are free-form",
        "y: dict[str, Any]",
        "Z = Mapping[str, JSON]",
        '"""why"""',
    ]
    assert list(_unexplained_free_form(lines)) == [1]
