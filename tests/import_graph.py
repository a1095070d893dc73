"""The import graph of a package, read from source (nothing is imported): which module imports which,
counting imports under ``if TYPE_CHECKING:`` and inside functions too, and the cycles in it.

``python tests/import_graph.py [--packages]`` prints every cycle (modules, or with
``--packages`` the sub-packages of ``sparklog``) and exits 1 if there is one; ``tests/test_architecture.py``
keeps the count at zero. A cycle is a strongly connected component of more than one node (or a node
importing itself): each is printed once, with the edges that close it.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT_PACKAGE = "sparklog"


def module_files(source_root: Path, package: str = ROOT_PACKAGE) -> dict[str, Path]:
    """Every module of ``package`` under ``source_root`` (``src``), by dotted name."""
    found: dict[str, Path] = {}
    for path in sorted((source_root / package).rglob("*.py")):
        parts = list(path.relative_to(source_root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imported(tree: ast.AST, module: str, is_package: bool) -> Iterator[str]:
    """The dotted names ``module``'s source imports (``from a import b`` yields ``a.b`` and ``a``)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".") if is_package else module.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph(source_root: Path, package: str = ROOT_PACKAGE) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports (a name that is not a module counts as the
    module that defines it)."""
    files = module_files(source_root, package)
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        targets: set[str] = set()
        for name in _imported(tree, module, path.name == "__init__.py"):
            while name and name not in files:
                name = name.rpartition(".")[0]
            if name and name != module and not module.startswith(f"{name}."):  # a package's own __init__
                targets.add(name)
        graph[module] = targets
    return graph


def package_graph(graph: dict[str, set[str]], depth: int = 2) -> dict[str, set[str]]:
    """The same graph between packages (``sparklog.broker``, ``sparklog.security``...): the first
    ``depth`` parts of each name; imports within one package are left out."""

    def package(name: str) -> str:
        return ".".join(name.split(".")[:depth])

    out: dict[str, set[str]] = {}
    for module, targets in graph.items():
        source = package(module)
        out.setdefault(source, set()).update(package(t) for t in targets if package(t) != source)
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:  # iterative, so deep graphs do not hit the recursion limit
        nonlocal counter
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def describe(graph: dict[str, set[str]], component: Iterable[str]) -> list[str]:
    """The edges inside one cycle, as ``a -> b`` lines."""
    members = set(component)
    return [f"{a} -> {b}" for a in sorted(members) for b in sorted(graph.get(a, ())) if b in members]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=str(Path(__file__).resolve().parents[1] / "src"), help="the src directory")
    parser.add_argument("--packages", action="store_true", help="cycles between sparklog's sub-packages")
    args = parser.parse_args(argv)
    graph = import_graph(Path(args.source))
    if args.packages:
        graph = package_graph(graph)
    found = cycles(graph)
    for component in found:
        print(f"cycle of {len(component)}: " + ", ".join(component))
        for edge in describe(graph, component):
            print(f"  {edge}")
    print(f"{len(found)} cycle(s) among {len(graph)} {'packages' if args.packages else 'modules'}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
