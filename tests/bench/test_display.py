"""The live progress display: it renders with the installed rich, pulling fresh numbers."""

from __future__ import annotations

import io

from rich.console import Console
from rich.progress import TextColumn

from bench.load.display import _LiveProgress


def test_live_progress_pulls_its_numbers_whenever_rich_renders_it() -> None:
    pulls: list[int] = []
    console = Console(file=io.StringIO(), force_terminal=True, width=80)
    progress = _LiveProgress(
        TextColumn("{task.description}"), pull=lambda: pulls.append(1), console=console
    )
    with progress:
        progress.add_task("producers", total=3)
        progress.refresh()
    assert pulls  # rich may render while it builds its Live, before __init__ returns
    assert "producers" in console.file.getvalue()  # type: ignore[attr-defined]
