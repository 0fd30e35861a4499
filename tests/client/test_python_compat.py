"""The Python client runs on Python 3.8 (JetPack 5's python3; Debian 11 has 3.9).

Every module of the client (firmware/client/python/edgemon/) and every example
(firmware/client/python/examples/) is parsed with ast.parse(source, feature_version=(3, 8)),
which rejects the grammar newer than 3.8 that the running parser knows how to date (match,
parenthesized context managers, except*). feature_version dates neither the rest of the newer
grammar nor any library name, so a walk of each tree also looks for:

- grammar that 3.8's parser refuses but feature_version lets through: decorators that are not
  a dotted name or a call of one (3.9), a starred expression in a subscript (3.11);
- annotations that 3.8 evaluates and cannot (list[int] 3.9, int | None 3.10), in a module
  without `from __future__ import annotations`;
- names of the standard library newer than 3.8 reached as an attribute or imported (the table
  NEWER below). A module reaches one only through getattr() with a fallback, or inside an
  `if` whose test is a HAS_* flag or a hasattr() call (the guard that 3.8 takes the other
  branch of), e.g. _pyprof.py's HAS_CO_QUALNAME.

A failure lists each finding as path:line: what, and since which Python. The whole client test
suite also runs on a real Python 3.8 where one is installed (ctest client_python_py38).

Run with: /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/client/test_python_compat.py
"""

import ast
import sys
from pathlib import Path

import pytest

PYTHON_DIR = Path(__file__).resolve().parents[2] / "firmware" / "client" / "python"
SOURCES = sorted(PYTHON_DIR.glob("edgemon/*.py")) + sorted(PYTHON_DIR.glob("examples/*.py"))
OLDEST = (3, 8)

# Attributes (methods, functions, constants) of the standard library added after 3.8, with
# the version that added them. A module-qualified entry ("functools.cache") matches that
# module's attribute; a bare one (".removeprefix") any attribute of that name.
NEWER = {
    ".removeprefix": "3.9 (str/bytes)", ".removesuffix": "3.9 (str/bytes)",
    ".bit_count": "3.10 (int)", ".co_qualname": "3.11 (code objects)",
    ".is_relative_to": "3.9 (pathlib)", ".with_stem": "3.9 (pathlib)",
    ".hardlink_to": "3.10 (pathlib)", ".randbytes": "3.9 (random)",
    ".to_thread": "3.9 (asyncio)",
    "functools.cache": "3.9", "math.lcm": "3.9", "math.nextafter": "3.9", "math.ulp": "3.9",
    "os.pidfd_open": "3.9", "os.waitstatus_to_exitcode": "3.9", "os.eventfd": "3.10",
    "os.splice": "3.10", "os.EFD_CLOEXEC": "3.10", "os.MFD_NOEXEC_SEAL": "3.12",
    "socket.send_fds": "3.9", "socket.recv_fds": "3.9", "socket.SO_INCOMING_CPU": "3.11",
    "fcntl.F_GETPIPE_SZ": "3.10", "fcntl.F_SETPIPE_SZ": "3.10",
    "mmap.MAP_POPULATE": "3.10", "mmap.MAP_STACK": "3.12",
    "sys.orig_argv": "3.10", "sys.stdlib_module_names": "3.10", "sys.platlibdir": "3.9",
    "sys.exception": "3.11", "sys.activate_stack_trampoline": "3.12",
    "threading.gettrace": "3.10", "threading.getprofile": "3.10",
    "typing.TypeAlias": "3.10", "typing.ParamSpec": "3.10", "typing.Self": "3.11",
    "typing.Annotated": "3.9", "itertools.pairwise": "3.10", "itertools.batched": "3.12",
    "operator.call": "3.11", "inspect.get_annotations": "3.10",
    "types.GenericAlias": "3.9", "types.NoneType": "3.10", "types.EllipsisType": "3.10",
    "contextlib.aclosing": "3.10", "contextlib.chdir": "3.11",
    "asyncio.TaskGroup": "3.11", "asyncio.timeout": "3.11", "asyncio.Runner": "3.11",
    "dataclasses.KW_ONLY": "3.10", "enum.StrEnum": "3.11",
}
NEWER_MODULES = {
    "zoneinfo": "3.9", "graphlib": "3.9", "tomllib": "3.11", "_interpreters": "3.13",
}
NEWER_KEYWORDS = {"strict": ("zip", "3.10"), "key": ("bisect", "3.10")}
GENERIC_BUILTINS = {"list", "dict", "tuple", "set", "frozenset", "type"}


def _dotted(node):
    """a.b.c as "a.b.c" for a Name/Attribute chain, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _subscript_items(node):
    """The expressions inside a subscript's brackets (3.8 wraps them in ast.Index)."""
    inner = node.slice
    if type(inner).__name__ == "Index":  # Python 3.8
        inner = inner.value
    return inner.elts if isinstance(inner, ast.Tuple) else [inner]


class Finder(ast.NodeVisitor):
    """Collects (line, what) for each construct or name newer than OLDEST."""

    def __init__(self, future_annotations):
        self.found = []
        self.future_annotations = future_annotations
        self.guarded = 0  # inside the body of an if HAS_*: / if hasattr(...):

    def visit_If(self, node):
        guard = any((isinstance(n, ast.Name) and n.id.startswith("HAS_"))
                    or (isinstance(n, ast.Call) and _dotted(n.func) == "hasattr")
                    for n in ast.walk(node.test))
        self.visit(node.test)
        self.guarded += guard
        for stmt in node.body:
            self.visit(stmt)
        self.guarded -= guard
        for stmt in node.orelse:
            self.visit(stmt)

    def note(self, node, what):
        self.found.append((node.lineno, what))

    def visit_Attribute(self, node):
        full = _dotted(node)
        if self.guarded:
            pass
        elif full in NEWER:
            self.note(node, "%s: Python %s" % (full, NEWER[full]))
        elif "." + node.attr in NEWER:
            self.note(node, ".%s: Python %s" % (node.attr, NEWER["." + node.attr]))
        self.generic_visit(node)

    def visit_Import(self, node):
        for alias in node.names:
            top = alias.name.split(".")[0]
            if top in NEWER_MODULES:
                self.note(node, "import %s: Python %s" % (alias.name, NEWER_MODULES[top]))

    def visit_ImportFrom(self, node):
        top = (node.module or "").split(".")[0]
        if node.level == 0 and top in NEWER_MODULES:
            self.note(node, "from %s import: Python %s" % (node.module, NEWER_MODULES[top]))
        for alias in node.names:
            full = "%s.%s" % (node.module, alias.name)
            if node.level == 0 and full in NEWER:
                self.note(node, "from %s import %s: Python %s" % (node.module, alias.name,
                                                                  NEWER[full]))

    def visit_Call(self, node):
        callee = _dotted(node.func) or ""
        for kw in node.keywords:
            rule = NEWER_KEYWORDS.get(kw.arg)
            if rule and (callee == rule[0] or callee.startswith(rule[0] + ".")):
                self.note(node, "%s(%s=...): Python %s" % (callee, kw.arg, rule[1]))
        self.generic_visit(node)

    def visit_Subscript(self, node):
        if any(isinstance(item, ast.Starred) for item in _subscript_items(node)):
            self.note(node, "a starred expression in a subscript: Python 3.11")
        self.generic_visit(node)

    def _decorators(self, node):
        for dec in node.decorator_list:
            target = dec.func if isinstance(dec, ast.Call) else dec
            if _dotted(target) is None:
                self.note(dec, "a decorator that is not a dotted name or its call: Python 3.9")

    def _annotation(self, ann):
        if ann is None or self.future_annotations:
            return
        for sub in ast.walk(ann):
            if isinstance(sub, ast.Subscript) and _dotted(sub.value) in GENERIC_BUILTINS:
                self.note(sub, "%s[...] evaluated as an annotation: Python 3.9"
                          % _dotted(sub.value))
            elif isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.BitOr):
                self.note(sub, "X | Y evaluated as an annotation: Python 3.10")

    def visit_FunctionDef(self, node):
        self._decorators(node)
        args = node.args
        for arg in args.posonlyargs + args.args + args.kwonlyargs:
            self._annotation(arg.annotation)
        for arg in (args.vararg, args.kwarg):
            if arg is not None:
                self._annotation(arg.annotation)
        self._annotation(node.returns)
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        self._decorators(node)
        self.generic_visit(node)

    def visit_AnnAssign(self, node):
        self._annotation(node.annotation)
        self.generic_visit(node)


def findings(source, filename):
    """path:line: what for each construct newer than OLDEST in source ([] when none)."""
    try:
        tree = ast.parse(source, filename, feature_version=OLDEST)
    except SyntaxError as exc:
        return ["%s:%s: %s (ast.parse feature_version=%s)"
                % (filename, exc.lineno, exc.msg, OLDEST)]
    future = any(isinstance(n, ast.ImportFrom) and n.module == "__future__"
                 and any(a.name == "annotations" for a in n.names) for n in tree.body)
    finder = Finder(future)
    finder.visit(tree)
    return ["%s:%d: %s" % (filename, line, what) for line, what in sorted(finder.found)]


def _relative(path):
    return str(path.relative_to(PYTHON_DIR.parents[2]))


def test_every_client_module_and_example_is_checked():
    names = {p.name for p in SOURCES}
    assert {"__init__.py", "_client.py", "_pyprof.py", "_ring.py", "_state.py"} <= names
    assert {"sample_inference.py", "torch_inference.py"} <= names


@pytest.mark.parametrize("path", SOURCES, ids=_relative)
def test_the_client_uses_nothing_newer_than_python_3_8(path):
    found = findings(path.read_text(encoding="utf-8"), _relative(path))
    assert not found, "newer than Python 3.8:\n" + "\n".join(found)


# Each row: source that 3.8 cannot run, the line of the construct, a word of the finding and
# the Python that brought it. On an older Python (this suite also runs on 3.8) the parser itself
# refuses the grammar: the finding is then its SyntaxError, on a line of the construct.
NEWER_SAMPLES = [
    ("match x:\n    case 1:\n        pass\n", 1, "attern matching", (3, 10)),
    ("with (open('a') as f, open('b') as g):\n    pass\n", 1, "ontext managers", (3, 9)),
    ("import r\n@r.handlers[0].register\ndef f():\n    pass\n", 2, "decorator", (3, 9)),
    ("x[*a]\n", 1, "starred", (3, 11)),
    ("def f(x: list[int]) -> None:\n    pass\n", 1, "list[...]", OLDEST),
    ("def f(x: int | None):\n    pass\n", 1, "X | Y", OLDEST),
    ("z = 1\ny: dict[str, int] = {}\n", 2, "dict[...]", OLDEST),
    ("name = text.removeprefix('a')\n", 1, ".removeprefix", OLDEST),
    ("n = value.bit_count()\n", 1, ".bit_count", OLDEST),
    ("name = code.co_qualname\n", 1, ".co_qualname", OLDEST),
    ("if ok:\n    name = code.co_qualname\n", 2, ".co_qualname", OLDEST),
    ("import functools\n@functools.cache\ndef f():\n    pass\n", 2, "functools.cache", OLDEST),
    ("import math\nm = math.lcm(4, 6)\n", 2, "math.lcm", OLDEST),
    ("import zoneinfo\n", 1, "import zoneinfo", OLDEST),
    ("from zoneinfo import ZoneInfo\n", 1, "zoneinfo", OLDEST),
    ("from functools import cache\n", 1, "functools import cache", OLDEST),
    ("import os\nfd = os.pidfd_open(1)\n", 2, "os.pidfd_open", OLDEST),
    ("import socket\nsocket.send_fds(s, [b'x'], [3])\n", 2, "socket.send_fds", OLDEST),
    ("pairs = list(zip(a, b, strict=True))\n", 1, "zip(strict", OLDEST),
]


@pytest.mark.parametrize("source,line,word,since", NEWER_SAMPLES)
def test_each_newer_construct_is_found_with_its_line(source, line, word, since):
    found = findings(source, "sample.py")
    assert len(found) == 1, found
    where, what = found[0].split(": ", 1)
    if "ast.parse feature_version" in what:  # the parser's line: within the construct
        assert line <= int(where.split(":")[1]) <= source.count("\n"), found
    else:
        assert where == "sample.py:%d" % line, found
    if sys.version_info >= since:
        assert word in what, found
    else:
        assert "ast.parse feature_version" in what, found


def test_what_3_8_runs_is_not_found():
    ok = ("from __future__ import annotations\n"
          "import functools\n"
          "def f(x: list[int]) -> int | None:\n    return (n := len(x))\n"
          "name = getattr(code, 'co_qualname', None)\n"
          "if HAS_CO_QUALNAME:\n    name = code.co_qualname\nelse:\n    name = code.co_name\n"
          "if hasattr(str, 'removeprefix'):\n    name = name.removeprefix('_')\n"
          "@functools.lru_cache(maxsize=None)\ndef g(a, /, b):\n    return f'{a=}'\n"
          "pairs = dict(zip(a, b))\n")
    assert findings(ok, "ok.py") == []
    assert sys.version_info >= OLDEST
