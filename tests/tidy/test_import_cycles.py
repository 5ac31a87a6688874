"""No import circle inside ``broker`` or ``sdk``: every module of either package can be
read, and changed, without the modules that import it (``docs/architecture.md``).

The graph is grimp's (the one import-linter checks its contracts on), with imports inside
functions and under ``TYPE_CHECKING`` counted: a circle through a lazy import is still a
circle in the design.
"""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest


def _circles(package: str) -> list[tuple[str, str]]:
    """Every (module, directly imported module) pair that lies on a circle."""
    graph = grimp.build_graph(package, cache_dir=None)
    return [
        (module, imported)
        for module in sorted(graph.modules)
        for imported in sorted(graph.find_modules_directly_imported_by(module))
        if graph.chain_exists(imported, module)
    ]


@pytest.mark.parametrize("package", ["broker", "sdk"])
def test_package_has_no_import_circle(package: str) -> None:
    assert _circles(package) == []


def test_a_planted_circle_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "circled"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "a.py").write_text("from circled import b\n")
    (root / "b.py").write_text("def f() -> None:\n    from circled import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _circles("circled") == [("circled.a", "circled.b"), ("circled.b", "circled.a")]
