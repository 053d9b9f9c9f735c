"""Static checks of src/tidelog's structure, by reading the source with ``ast``.

Nothing under test is imported, so these run in well under a second.

* Determinism of the core. tidelog.records, .storage, .metadata, .controller,
  .replication, .broker and .core are the logic the simulator replays seed by
  seed: they start no threads, tasks or processes, open no sockets, and read no
  clock or randomness of their own. Time comes from an injected ``Clock``,
  randomness from an injected (or seeded) ``random.Random``. tidelog.core.clock
  is where ``SystemClock`` reads the real clock; tidelog.storage is the one core
  package that does file I/O.
* No import cycles anywhere in tidelog, counting imports under
  ``if TYPE_CHECKING:`` and imports inside functions (a cycle hidden that way
  is still a design knot, and breaks as soon as someone moves the import).
* Kafka's API-key numbers are written once, in tidelog.protocol.api_keys
  (``ApiKey``); everywhere else names them ``ApiKey.FETCH`` and so on.

Each check has an allow-list of known violations in modules that are being
rewritten elsewhere. An entry that no longer matches a violation fails the test
as well, so the lists can only shrink.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
TESTS = ROOT / "tests"
API_KEYS_MODULE = "tidelog.protocol.api_keys"


# --------------------------------------------------------------------- modules

@functools.cache
def _modules() -> dict[str, Path]:
    """Every module under src/tidelog by dotted name (a package by its __init__.py)."""
    found = {}
    for path in sorted((SRC / "tidelog").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


@functools.cache
def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _tree(module: str) -> ast.Module:
    return _parse(_modules()[module])


@functools.cache
def _nodes(tree: ast.Module) -> dict[type, list[ast.AST]]:
    """The tree's nodes by type (one walk per file, shared by every check)."""
    found: dict[type, list[ast.AST]] = {}
    for node in ast.walk(tree):
        found.setdefault(type(node), []).append(node)
    return found


def _of_type(tree: ast.Module, *types: type) -> list:
    nodes = _nodes(tree)
    return [node for t in types for node in nodes.get(t, ())]


def _from_origin(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    """The absolute module a ``from ... import`` statement in ``module`` reads from."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[:len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


@functools.cache
def _imports(module: str, tree: ast.Module, is_package: bool) -> tuple[tuple[str, str, str], ...]:
    """(local name, dotted origin, imported module) for every name bound by an import, any scope.

    ``import a.b`` binds ``a`` and imports module ``a.b``; ``from a.b import c``
    binds ``c`` from ``a.b.c`` and imports module ``a.b.c`` when that is one of
    ours, else module ``a.b``.
    """
    found = []
    for node in _of_type(tree, ast.Import, ast.ImportFrom):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    found.append((alias.asname, alias.name, alias.name))
                else:
                    root = alias.name.split(".")[0]
                    found.append((root, root, alias.name))
        elif isinstance(node, ast.ImportFrom):
            origin = _from_origin(module, node, is_package)
            for alias in node.names:
                full = f"{origin}.{alias.name}"
                found.append((alias.asname or alias.name, full, full if full in _modules() else origin))
    return tuple(found)


# ------------------------------------------------------ determinism of the core

CORE_PACKAGES = ("tidelog.records", "tidelog.storage", "tidelog.metadata", "tidelog.controller",
                 "tidelog.replication", "tidelog.broker", "tidelog.core")
# Concurrency, networking and processes belong to the shell around the core.
FORBIDDEN_MODULES = {"asyncio", "socket", "selectors", "ssl", "threading", "_thread", "subprocess",
                     "multiprocessing", "concurrent", "signal", "secrets"}
# Reading the clock (any call that answers "what time is it", or waits for it).
CLOCK_READS = {f"time.{name}" for name in (
    "time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns",
    "process_time", "process_time_ns", "thread_time", "thread_time_ns", "sleep",
    "clock_gettime", "clock_gettime_ns")} | {
    "datetime.datetime.now", "datetime.datetime.utcnow", "datetime.datetime.today",
    "datetime.date.today", "tidelog.core.clock.SystemClock"}
# Randomness that no seed controls.
UNSEEDED_RANDOMNESS = {"uuid.uuid1", "uuid.uuid4", "os.urandom", "os.getrandom", "random.SystemRandom"}
# What tidelog.storage may do and the other core packages may not: touch files
# (os.path and pathlib.PurePath only compute names, so they are fine anywhere).
FILE_IO_MODULES = {"shutil", "tempfile", "mmap", "fcntl"}
FILE_IO_NAMES = {"pathlib.Path", "io.open", "io.FileIO", "builtins.open"}
OS_PURE = ("os.path", "os.fspath", "os.sep", "os.PathLike", "os.linesep", "os.curdir", "os.pardir")

# Known violations in modules being rewritten elsewhere: (module, what). Remove
# an entry when its module is fixed (or deleted); never add one for new code.
CORE_ALLOWED: set[tuple[str, str]] = set()


def _in_packages(module: str, packages) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _dotted(node: ast.expr, aliases: dict[str, str]) -> str | None:
    """``a.b.c`` with ``a`` replaced by what it was imported as; None unless ``a`` is an import."""
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in aliases:
        return None
    return ".".join([aliases[node.id], *reversed(attrs)])


def _core_violations(module: str, tree: ast.Module, is_package: bool = False) -> set[str]:
    """What in ``module``'s source reaches for a clock, randomness, threads, sockets or files."""
    clock_module = module == "tidelog.core.clock"
    storage = _in_packages(module, ["tidelog.storage"])
    found: set[str] = set()
    aliases: dict[str, str] = {}
    names_used: list[str] = []
    for local, origin, imported in _imports(module, tree, is_package):
        aliases[local] = origin
        names_used.append(origin)
        top = imported.split(".")[0]
        if top in FORBIDDEN_MODULES or (top in FILE_IO_MODULES and not storage):
            found.add(f"import {max(origin, imported, key=len)}")
    for node in _of_type(tree, ast.Attribute, ast.Name):
        names_used.append(_dotted(node, aliases))
    for node in _of_type(tree, ast.Call):
        if _dotted(node.func, aliases) == "random.Random" and not node.args and not node.keywords:
            found.add("random.Random() without a seed")
        if isinstance(node.func, ast.Name) and node.func.id == "open" and "open" not in aliases \
                and not storage:
            found.add("open()")
    for name in filter(None, names_used):
        parts = name.split(".")
        if name in CLOCK_READS and not clock_module:
            found.add(name)
        elif name in UNSEEDED_RANDOMNESS:
            found.add(name)
        elif parts[0] == "random" and len(parts) > 1 and parts[1] != "Random":
            found.add(name)  # random's module functions share one hidden generator no one seeds
        elif not storage and (name in FILE_IO_NAMES or parts[0] == "os" and len(parts) > 1
                              and not any(name == p or name.startswith(p + ".") for p in OS_PURE)):
            found.add(name)
    return found


def _all_core_violations() -> set[tuple[str, str]]:
    return {(module, what) for module in _modules() if _in_packages(module, CORE_PACKAGES)
            for what in _core_violations(module, _tree(module), _modules()[module].name == "__init__.py")}


def test_core_packages_do_not_reach_for_clocks_randomness_threads_or_sockets():
    found = _all_core_violations()
    new = sorted(found - CORE_ALLOWED)
    assert not new, ("the deterministic core must be handed its clock (tidelog.core.clock.Clock), its "
                     "randomness (a seeded random.Random) and its files (tidelog.storage), not reach for them:\n"
                     + "\n".join(f"  {module}: {what}" for module, what in new))
    stale = sorted(CORE_ALLOWED - found)
    assert not stale, f"fixed: remove from CORE_ALLOWED: {stale}"


# ------------------------------------------------------------------ import cycles

# Import edges (importer, imported) known to close a cycle, in modules being
# rewritten elsewhere. Each is removed from the graph before looking for
# cycles; an entry whose edge no longer closes a cycle must be deleted.
CYCLE_EDGES_ALLOWED: set[tuple[str, str]] = set()


@functools.cache
def _import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {module: set() for module in _modules()}
    for module, path in _modules().items():
        for _local, _origin, imported in _imports(module, _tree(module), path.name == "__init__.py"):
            if imported in graph and imported != module:
                graph[module].add(imported)
    return graph


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle (as a closed path) in ``graph``, or None. Iterative DFS, deterministic order."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(graph, WHITE)
    for start in sorted(graph):
        if colour[start] != WHITE:
            continue
        path = [start]
        stack = [iter(sorted(graph[start]))]
        colour[start] = GREY
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                colour[path.pop()] = BLACK
                stack.pop()
            elif colour[nxt] == GREY:
                return path[path.index(nxt):] + [nxt]
            elif colour[nxt] == WHITE:
                colour[nxt] = GREY
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def _reaches(graph: dict[str, set[str]], source: str, target: str) -> bool:
    seen, todo = {source}, [source]
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt == target:
                return True
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return False


def test_no_import_cycles():
    graph = _import_graph()
    pruned = {module: targets - {b for a, b in CYCLE_EDGES_ALLOWED if a == module}
              for module, targets in graph.items()}
    cycle = _find_cycle(pruned)
    assert cycle is None, "import cycle (TYPE_CHECKING and function-local imports count): " + " -> ".join(cycle)
    stale = sorted((a, b) for a, b in CYCLE_EDGES_ALLOWED
                   if a not in graph or b not in graph[a] or not _reaches(graph, b, a))
    assert not stale, f"no longer part of a cycle: remove from CYCLE_EDGES_ALLOWED: {stale}"


# ---------------------------------------------------------------- API-key numbers

@functools.cache
def _api_key_names() -> dict[str, int]:
    """Kafka's API names and numbers, read from the ApiKey enum's source."""
    tree = _tree(API_KEYS_MODULE)
    (enum_class,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ApiKey"]
    return {statement.targets[0].id: statement.value.value for statement in enum_class.body
            if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Constant)}


def _api_constant_name(name: str) -> str | None:
    """The Kafka API a constant's name spells (FETCH, _FETCH, FETCH_KEY, API_VERSIONS_API_KEY...)."""
    bare = name.lstrip("_")
    for suffix in ("_API_KEY", "_KEY", "_API"):
        if bare.endswith(suffix):
            bare = bare[:-len(suffix)]
            break
    bare = bare.removeprefix("API_KEY_")
    return bare if bare in _api_key_names() else None


# Functions whose first argument is an API key: a bare number there is an API-key constant too.
API_KEY_FIRST_ARGUMENT = {"request", "forward", "encode_request", "decode_response", "kio_versions",
                          "version_for", "is_flexible", "load_request_schema", "load_response_schema",
                          "_request_class", "_response_class"}

# Known API-key constants in modules being rewritten elsewhere (tidelog.server
# becomes tidelog.broker): (module, name). Delete entries as they move to ApiKey.
API_CONSTANTS_ALLOWED: set[tuple[str, str]] = set()


def _python_files() -> dict[str, Path]:
    files = dict(_modules())
    for path in sorted(TESTS.rglob("*.py")):
        files[".".join(path.relative_to(ROOT).with_suffix("").parts)] = path
    return files


def _int_literals(value: ast.expr) -> list[int | None]:
    if isinstance(value, ast.Tuple):
        return [v.value if isinstance(v, ast.Constant) and type(v.value) is int else None for v in value.elts]
    return [value.value if isinstance(value, ast.Constant) and type(value.value) is int else None]


def _other_enum_members(tree: ast.Module) -> set[int]:
    """Assignments that are members of an enum with its own numbering (an ACL operation
    named ALTER_CONFIGS is not the API key), by node id."""
    ids = set()
    for node in _of_type(tree, ast.ClassDef):
        bases = {getattr(b, "attr", getattr(b, "id", None)) for b in node.bases}
        if bases & {"Enum", "IntEnum", "IntFlag"}:
            ids.update(id(child) for child in node.body if isinstance(child, (ast.Assign, ast.AnnAssign)))
    return ids


def _api_constants(tree: ast.Module) -> set[str]:
    found = set()
    enum_members = _other_enum_members(tree)
    for node in _of_type(tree, ast.Assign, ast.AnnAssign, ast.Call):
        if id(node) in enum_members:
            continue
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names = target.elts if isinstance(target, ast.Tuple) else [target]
                values = _int_literals(node.value)
                if len(values) != len(names):
                    values = [None] * len(names)
                for name, value in zip(names, values):
                    if isinstance(name, ast.Name) and value is not None and _api_constant_name(name.id):
                        found.add(name.id)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            first = node.args[0]
            if called in API_KEY_FIRST_ARGUMENT and isinstance(first, ast.Constant) \
                    and type(first.value) is int:
                found.add(f"{called}({first.value}, ...)")
    return found


def _all_api_constants() -> set[tuple[str, str]]:
    return {(module, name) for module, path in _python_files().items() if module != API_KEYS_MODULE
            for name in _api_constants(_parse(path))}


def test_api_key_numbers_are_written_only_in_the_api_key_enum():
    found = _all_api_constants()
    new = sorted(found - API_CONSTANTS_ALLOWED)
    assert not new, ("use tidelog.protocol.api_keys.ApiKey instead of these API-key numbers:\n"
                     + "\n".join(f"  {module}: {name}" for module, name in new))
    stale = sorted(API_CONSTANTS_ALLOWED - found)
    assert not stale, f"fixed: remove from API_CONSTANTS_ALLOWED: {stale}"


def test_api_key_enum_is_kafkas_numbering():
    """ApiKey's names and numbers are exactly those of Kafka's protocol (kio's schema index)."""
    names = _api_key_names()
    assert len(set(names.values())) == len(names), "two API names share a number"
    kio_index = pytest.importorskip("kio.schema.index")
    assert {name.lower(): key for name, key in names.items()} == {
        name: key for key, name in kio_index.api_key_map.items()}


# ---------------------------------------------------------------- the checks bite

def _core_violations_of(module: str, source: str) -> set[str]:
    return _core_violations(module, ast.parse(source))


def test_the_detectors_flag_planted_examples():
    """Each detector sees what it looks for (so a check cannot pass by seeing nothing)."""
    assert _core_violations_of("tidelog.records.x", "import asyncio\nfrom concurrent import futures\n"
                               "def f():\n    import threading") == {
        "import asyncio", "import concurrent.futures", "import threading"}
    assert _core_violations_of("tidelog.replication.x", "import time as t\nfrom time import monotonic\n"
                               "x = t.time() + monotonic()\n") == {"time.time", "time.monotonic"}
    assert _core_violations_of("tidelog.metadata.x", "from datetime import datetime\nx = datetime.now()") == {
        "datetime.datetime.now"}
    assert _core_violations_of("tidelog.controller.x", "import random\nrandom.shuffle([])\n"
                               "a = random.Random()\nb = random.Random(7)\nc: random.Random") == {
        "random.shuffle", "random.Random() without a seed"}
    assert _core_violations_of("tidelog.controller.x", "import uuid\nx = uuid.uuid4()") == {"uuid.uuid4"}
    assert _core_violations_of("tidelog.broker.x", "from tidelog.core.clock import SystemClock") == {
        "tidelog.core.clock.SystemClock"}
    assert _core_violations_of("tidelog.core.clock", "import time\nx = time.time_ns()") == set()
    assert _core_violations_of("tidelog.metadata.x", "import os\nos.makedirs(os.path.join('a', 'b'))\n"
                               "open('f')") == {"os.makedirs", "open()"}
    assert _core_violations_of("tidelog.metadata.x", "from pathlib import Path, PurePath\n"
                               "PurePath('a')\nPath('f').read_text()") == {"pathlib.Path"}
    assert _core_violations_of("tidelog.storage.x", "import os, shutil, pathlib\nos.makedirs('a')\n"
                               "open('f')\npathlib.Path('f').read_bytes()") == set()

    assert _api_constant_name("FETCH") == "FETCH"
    assert _api_constant_name("API_VERSIONS_KEY") == "API_VERSIONS"
    assert _api_constant_name("_BROKER_HEARTBEAT") == "BROKER_HEARTBEAT"
    assert _api_constant_name("FETCH_SIZE") is None
    assert _api_constants(ast.parse("FETCH, ALTER_PARTITION = 1, 56\nLATEST = -1\nPRODUCE = 'p'\n"
                                    "def f():\n    API_VERSIONS_KEY = 18\n    c.request(60, {})\n"
                                    "    c.request(ApiKey.FETCH, {})")) == {
        "FETCH", "ALTER_PARTITION", "API_VERSIONS_KEY", "request(60, ...)"}

    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


# ------------------------------------------------------------ function length

FUNCTION_LINES_MAX = 70
# Functions longer than FUNCTION_LINES_MAX when the ratchet was set (issue 27): this
# list may only shrink. Split a function and remove its entry; never add one.
LONG_FUNCTIONS: set[str] = set()


def _function_lengths(tree: ast.Module, prefix: str = "") -> dict[str, int]:
    """``Qualified.name`` → lines, for every function and method (nested ones too)."""
    lengths = {}
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            lengths[prefix + child.name] = child.end_lineno - child.lineno + 1
            lengths.update(_function_lengths(child, prefix + child.name + "."))
        elif isinstance(child, ast.ClassDef):
            lengths.update(_function_lengths(child, prefix + child.name + "."))
    return lengths


def _long_functions() -> dict[str, int]:
    package = SRC / "tidelog"
    found = {}
    for path in sorted(package.rglob("*.py")):
        for name, lines in _function_lengths(_parse(path)).items():
            if lines > FUNCTION_LINES_MAX:
                found[f"{path.relative_to(package).as_posix()}:{name}"] = lines
    return found


def test_functions_are_short_enough_to_see_whole():
    found = _long_functions()
    new = {name: lines for name, lines in found.items() if name not in LONG_FUNCTIONS}
    assert not new, f"functions over {FUNCTION_LINES_MAX} lines (split them): {new}"
    shortened = LONG_FUNCTIONS - set(found)
    assert not shortened, f"no longer over {FUNCTION_LINES_MAX} lines, remove from LONG_FUNCTIONS: {shortened}"


def test_the_function_length_detector_counts_methods_and_nested_functions():
    tree = ast.parse("class A:\n    def f(self):\n        def g():\n            pass\n        return 1\n")
    assert _function_lengths(tree) == {"A.f": 4, "A.f.g": 2}


# ------------------------------------------------- metadata records: one schema

def test_every_metadata_record_schema_names_its_dataclass_fields_in_order():
    """A record's fields are declared twice (the dataclass and its SCHEMA, which the
    codec writes in order); the two must name the same fields in the same order."""
    import dataclasses
    import inspect

    from tidelog.metadata import records
    checked = 0
    for name, cls in inspect.getmembers(records, inspect.isclass):
        if cls.__module__ != records.__name__ or not hasattr(cls, "SCHEMA"):
            continue
        assert dataclasses.is_dataclass(cls), name
        assert [entry[0] for entry in cls.SCHEMA] == [f.name for f in dataclasses.fields(cls)], name
        checked += 1
    assert checked >= 10, checked


# ------------------------------------------------------------ one logger name

def _module_loggers(tree: ast.Module) -> list[str]:
    """Names bound at module level to ``logging.getLogger(...)``."""
    names = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            func = node.value.func
            if isinstance(func, ast.Attribute) and func.attr == "getLogger":
                names += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return names


def test_every_module_logger_is_called_logger():
    odd = {module: names for module in _modules()
           if (names := [n for n in _module_loggers(_tree(module)) if n != "logger"])}
    assert not odd, f"a module's logger is called `logger` (one name across modules): {odd}"


def test_the_logger_name_detector_finds_module_loggers():
    tree = ast.parse("import logging\nlog = logging.getLogger('x')\ndef f():\n    log2 = logging.getLogger('y')\n")
    assert _module_loggers(tree) == ["log"]
