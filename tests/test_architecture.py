"""The shape of the code, read from source: no import cycle between modules or between sparklog's
packages (imports under ``TYPE_CHECKING`` and inside functions count), and one home for errors:
every public exception class is in ``sparklog.errors``, so ``error_from_code`` knows each one
without importing anything else."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

from import_graph import cycles, describe, import_graph, package_graph
from sparklog.errors import SparklogError, error_from_code

SOURCE = Path(__file__).resolve().parents[1] / "src"
ERRORS = SOURCE / "sparklog" / "errors.py"
BUILTIN_EXCEPTIONS = {
    name
    for name in dir(builtins)
    if isinstance(getattr(builtins, name), type) and issubclass(getattr(builtins, name), BaseException)
}


def _report(graph: dict[str, set[str]]) -> str:
    return "\n".join("; ".join(describe(graph, component)) for component in cycles(graph))


def test_no_module_imports_itself_through_others() -> None:
    graph = import_graph(SOURCE)
    assert len(graph) > 150, "the source was not found"
    assert not cycles(graph), _report(graph)


def test_packages_depend_one_way() -> None:
    graph = package_graph(import_graph(SOURCE))
    assert "sparklog.security" not in graph["sparklog.coordination"]
    assert not cycles(graph), _report(graph)


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert describe(graph, ["a", "b", "c"]) == ["a -> b", "b -> c", "c -> a"]


def _exception_classes_outside_errors() -> list[str]:
    defined = {node.name for node in ast.parse(ERRORS.read_text()).body if isinstance(node, ast.ClassDef)}
    found: list[str] = []
    for path in sorted((SOURCE / "sparklog").rglob("*.py")):
        if path == ERRORS:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):  # private control flow
                continue
            bases = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
            if bases & (BUILTIN_EXCEPTIONS | defined):
                found.append(f"{path.relative_to(SOURCE)}: {node.name}({', '.join(sorted(bases))})")
    return found


def test_every_public_exception_lives_in_errors() -> None:
    assert not _exception_classes_outside_errors()


def test_every_error_is_rebuilt_from_its_code() -> None:
    seen: dict[str, type[SparklogError]] = {}
    stack: list[type[SparklogError]] = [SparklogError]
    while stack:
        cls = stack.pop()
        assert cls.code not in seen or seen[cls.code] is cls, f"{cls.__name__} reuses code {cls.code}"
        seen[cls.code] = cls
        stack.extend(cls.__subclasses__())
    for name in ("SchemaError", "SinkConflict", "CliError", "ZooKeeperStartError", "KafkaNotInstalled"):
        assert name in {cls.__name__ for cls in seen.values()}, name
    for code, cls in seen.items():
        assert type(error_from_code(code, "m")) is cls
