"""The determinism guard and the import contracts, each shown to bite on a planted bug."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.tidy.checker import check_source, check_tree

ROOT = Path(__file__).resolve().parents[2]


def test_tidy_deterministic_packages_are_clean() -> None:
    findings = check_tree(ROOT)
    assert not findings, "\n".join(str(f) for f in findings)


@pytest.mark.parametrize(
    ("rule", "source"),
    [
        ("clock", "import time\nx = time.time()\n"),
        ("clock", "import time\nx = time.monotonic_ns()\n"),
        ("clock", "from time import perf_counter\nx = perf_counter()\n"),
        ("clock", "import datetime\nx = datetime.datetime.now()\n"),
        ("clock", "from datetime import datetime\nx = datetime.utcnow()\n"),
        ("randomness", "import random\nx = random.random()\n"),
        ("randomness", "import random\nx = random.choice([1, 2])\n"),
        ("randomness", "from random import shuffle\nshuffle([1, 2])\n"),
        ("randomness", "import random\nr = random.Random()\n"),
        ("randomness", "import os\nx = os.urandom(8)\n"),
        ("randomness", "import uuid\nx = uuid.uuid4()\n"),
        ("randomness", "import secrets\n"),
        ("threads", "import threading\n"),
        ("threads", "from concurrent.futures import ThreadPoolExecutor\n"),
        ("set-iteration", "for x in {1, 2}:\n    pass\n"),
        ("set-iteration", "for x in set([1, 2]):\n    pass\n"),
        ("set-iteration", "xs = [x for x in frozenset('ab')]\n"),
        ("set-iteration", "s = set()\nfor x in s:\n    pass\n"),
        ("set-iteration", "def f(s: set[str]) -> list[str]:\n    return list(s)\n"),
        (
            "set-iteration",
            "class A:\n    def __init__(self) -> None:\n        self.s: set[int] = set()\n"
            "    def f(self) -> None:\n        for x in self.s:\n            pass\n",
        ),
    ],
)
def test_tidy_flags_planted_violation(rule: str, source: str) -> None:
    findings = check_source(source)
    assert [f.rule for f in findings].count(rule) >= 1, findings


@pytest.mark.parametrize(
    "source",
    [
        "import random\nr = random.Random(7)\nx = r.random()\n",
        "def f(prng: 'random.Random') -> int:\n    return prng.randint(0, 9)\n",
        "s = {1, 2}\nfor x in sorted(s):\n    pass\nn = len(s)\n",
        "d = {'a': 1}\nfor k in d:\n    pass\n",
        "x = 3 in {1, 2, 3}\n",
    ],
)
def test_tidy_accepts_deterministic_code(source: str) -> None:
    assert check_source(source) == []


# Each import contract, with a module that breaks it. The contract is checked on a copy of
# the tree with the planted import added (to a new module, or appended to an existing one),
# so the real tree is never touched.
PLANTED_IMPORTS = [
    ("sdk/wire/_planted.py", "import trio\n"),
    ("sdk/wire/_planted.py", "import consensus\n"),
    ("consensus/_planted.py", "import time\n"),
    ("consensus/_planted.py", "import socket\n"),
    ("consensus/_planted.py", "import journal\n"),
    ("journal/_planted.py", "import os\n"),
    ("journal/_planted.py", "import consensus\n"),
    ("broker/state/_planted.py", "import trio\n"),
    ("broker/runtime/_planted.py", "import sim\n"),
    ("broker/runtime/_planted.py", "import broker.cli\n"),
    ("broker/core/_planted.py", "import sdk.blocking\n"),
    ("sdk/_planted.py", "import broker\n"),
    ("sdk/_planted.py", "import cbor2\n"),
    ("sdk/_protocol.py", "import trio\n"),
    ("sdk/errors.py", "import socket\n"),
    ("sdk/producer.py", "import sdk.blocking\n"),
    ("sim/_planted.py", "import trio\n"),
    ("sim/_planted.py", "import broker.runtime\n"),
]


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("lint-imports")
    return subprocess.run(
        [str(exe), "--config", str(root / "pyproject.toml"), "--no-cache"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PYTHONPATH": str(root), "PATH": str(exe.parent)},
    )


@pytest.fixture(scope="module")
def tree_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("tree")
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    for package in ("broker", "consensus", "journal", "sdk", "sim", "bench"):
        shutil.copytree(
            ROOT / package, dest / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    return dest


def test_import_contracts_pass_on_the_real_tree(tree_copy: Path) -> None:
    result = _lint_imports(tree_copy)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(("where", "source"), PLANTED_IMPORTS)
def test_import_contracts_catch_planted_import(tree_copy: Path, where: str, source: str) -> None:
    planted = tree_copy / where
    original = planted.read_text(encoding="utf-8") if planted.exists() else None
    planted.write_text((original or "") + textwrap.dedent(source), encoding="utf-8")
    try:
        result = _lint_imports(tree_copy)
    finally:
        if original is None:
            planted.unlink()
        else:
            planted.write_text(original, encoding="utf-8")
    assert result.returncode != 0, result.stdout
    assert "BROKEN" in result.stdout or "broken" in result.stdout.lower(), result.stdout
