"""An AST check that keeps the deterministic packages deterministic.

The packages ``consensus/``, ``journal/``, ``broker/state/``, ``broker/core/`` and ``sim/``
must replay bit for bit from a seed, so they may not:

1. read a clock (``time.*``, ``datetime.now()`` and friends, ``uuid.uuid1/uuid4``);
2. draw from module-level randomness (``random.random()``, ``random.choice()``, an
   unseeded ``random.Random()``, ``secrets``) or the OS (``os.urandom``, ``os.getrandom``);
3. use threads (``threading``, ``concurrent.futures``, ``_thread``);
4. iterate a set: the order of a ``set`` of ``str`` changes with ``PYTHONHASHSEED``.
   Iterating ``sorted(s)`` is fine. The check knows set literals, set comprehensions,
   ``set(...)``/``frozenset(...)`` calls, and names or attributes annotated as sets in the
   same module.

Each finding names the file, line and rule. The check is syntactic on purpose: it is cheap
and it errs towards flagging, and a true exception can be written another way.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

DETERMINISTIC_PACKAGES = ("consensus", "journal", "broker/state", "broker/core", "sim")

# The one module allowed to touch the OS for storage; it may not read clocks either.
CLOCK_MODULES = {"time", "datetime"}
THREAD_MODULES = {"threading", "_thread", "concurrent", "concurrent.futures", "multiprocessing"}
RANDOM_MODULE_FUNCTIONS = {
    "random",
    "randint",
    "randrange",
    "choice",
    "choices",
    "shuffle",
    "sample",
    "uniform",
    "getrandbits",
    "gauss",
    "seed",
    "randbytes",
    "triangular",
    "betavariate",
    "expovariate",
    "normalvariate",
    "lognormvariate",
    "vonmisesvariate",
    "gammavariate",
    "paretovariate",
    "weibullvariate",
    "binomialvariate",
}
DATETIME_CLOCK_METHODS = {"now", "utcnow", "today", "fromtimestamp", "utcfromtimestamp"}
OS_ENTROPY = {"urandom", "getrandom"}
SET_CONSTRUCTORS = {"set", "frozenset"}
ORDER_FREE_CONSUMERS = {"sorted", "len", "min", "max", "sum", "any", "all", "frozenset", "set"}


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.rule}: {self.detail}"


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _is_set_annotation(annotation: ast.AST | None) -> bool:
    if annotation is None:
        return False
    if isinstance(annotation, ast.Subscript):
        annotation = annotation.value
    name = _dotted(annotation)
    return name in {
        "set",
        "frozenset",
        "typing.Set",
        "typing.FrozenSet",
        "Set",
        "FrozenSet",
        "typing.AbstractSet",
        "AbstractSet",
        "collections.abc.Set",
        "MutableSet",
        "typing.MutableSet",
    }


class _Visitor(ast.NodeVisitor):
    def __init__(self, path: str, set_names: set[str]) -> None:
        self.path = path
        self.set_names = set_names
        self.findings: list[Finding] = []
        # Local aliases: ``import time as t`` -> {"t": "time"}; ``from time import time``.
        self.module_aliases: dict[str, str] = {}
        self.function_aliases: dict[str, str] = {}

    def _flag(self, node: ast.AST, rule: str, detail: str) -> None:
        self.findings.append(Finding(self.path, getattr(node, "lineno", 0), rule, detail))

    # Imports -----------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            root = alias.name.split(".")[0]
            if alias.name in THREAD_MODULES or root in THREAD_MODULES:
                self._flag(node, "threads", f"import {alias.name}")
            if root == "secrets":
                self._flag(node, "randomness", "import secrets")
            self.module_aliases[alias.asname or root] = alias.name if alias.asname else root
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        root = module.split(".")[0]
        if module in THREAD_MODULES or root in THREAD_MODULES:
            self._flag(node, "threads", f"from {module} import ...")
        if root == "secrets":
            self._flag(node, "randomness", "from secrets import ...")
        for alias in node.names:
            self.function_aliases[alias.asname or alias.name] = f"{module}.{alias.name}"
        self.generic_visit(node)

    # Calls -------------------------------------------------------------------------------
    def _resolve(self, func: ast.AST) -> str | None:
        name = _dotted(func)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        if head in self.function_aliases:
            target = self.function_aliases[head]
            return f"{target}.{rest}" if rest else target
        if head in self.module_aliases:
            target = self.module_aliases[head]
            return f"{target}.{rest}" if rest else target
        return name

    def visit_Call(self, node: ast.Call) -> None:
        name = self._resolve(node.func)
        if name is not None:
            parts = name.split(".")
            reads_clock = (parts[0] == "time" and len(parts) > 1) or (
                parts[0] == "datetime" and parts[-1] in DATETIME_CLOCK_METHODS
            )
            if reads_clock:
                self._flag(node, "clock", f"{name}()")
            elif name in {"uuid.uuid1", "uuid.uuid4"}:
                self._flag(node, "randomness", f"{name}()")
            elif parts[0] == "random" and len(parts) == 2:
                if parts[1] in RANDOM_MODULE_FUNCTIONS:
                    self._flag(node, "randomness", f"module-level {name}()")
                elif parts[1] in {"Random", "SystemRandom"} and (
                    parts[1] == "SystemRandom" or not (node.args or node.keywords)
                ):
                    self._flag(node, "randomness", f"unseeded {name}()")
            elif parts[0] == "os" and parts[-1] in OS_ENTROPY:
                self._flag(node, "randomness", f"{name}()")
            elif (
                isinstance(node.func, ast.Name)
                and node.func.id in {"list", "tuple", "enumerate", "iter", "next", "zip"}
                and node.args
                and self._is_set_expr(node.args[0])
            ):
                self._flag(node, "set-iteration", f"{node.func.id}() over a set")
        self.generic_visit(node)

    # Set iteration -----------------------------------------------------------------------
    def _is_set_expr(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Set | ast.SetComp):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            return node.func.id in SET_CONSTRUCTORS
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr | ast.BitAnd | ast.Sub):
            return self._is_set_expr(node.left) or self._is_set_expr(node.right)
        name = _dotted(node)
        return name is not None and name in self.set_names

    def visit_For(self, node: ast.For) -> None:
        if self._is_set_expr(node.iter):
            self._flag(node, "set-iteration", "for-loop over a set")
        self.generic_visit(node)

    visit_AsyncFor = visit_For  # type: ignore[assignment]

    def visit_comprehension(self, node: ast.comprehension) -> None:
        if self._is_set_expr(node.iter):
            self._flag(node.iter, "set-iteration", "comprehension over a set")
        self.generic_visit(node)

    def visit_Starred(self, node: ast.Starred) -> None:
        if self._is_set_expr(node.value):
            self._flag(node, "set-iteration", "unpacking a set")
        self.generic_visit(node)


def _collect_set_names(tree: ast.AST) -> set[str]:
    """Names and ``self.x`` attributes that the module annotates or assigns as sets."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and _is_set_annotation(node.annotation):
            target = _dotted(node.target)
            if target:
                names.add(target)
        elif isinstance(node, ast.arg) and _is_set_annotation(node.annotation):
            names.add(node.arg)
        elif isinstance(node, ast.Assign) and (
            isinstance(node.value, ast.Set | ast.SetComp)
            or (
                isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name)
                and node.value.func.id in SET_CONSTRUCTORS
            )
        ):
            for target_node in node.targets:
                target = _dotted(target_node)
                if target:
                    names.add(target)
    return names


def check_source(source: str, path: str = "<source>") -> list[Finding]:
    """Return every determinism finding in one module's source."""
    tree = ast.parse(source, filename=path)
    visitor = _Visitor(path, _collect_set_names(tree))
    visitor.visit(tree)
    return sorted(visitor.findings, key=lambda f: (f.line, f.rule))


def check_tree(root: Path) -> list[Finding]:
    """Check every module of the deterministic packages under ``root``."""
    findings: list[Finding] = []
    for package in DETERMINISTIC_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            findings.extend(check_source(path.read_text(encoding="utf-8"), rel))
    return findings
