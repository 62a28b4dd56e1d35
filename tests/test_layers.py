"""The layout of docs/architecture.md, held against the code's own imports (lazy ones included):
no import circle between modules, the passes below the verdict, the readers below the passes,
and no private name taken from another room."""
from __future__ import annotations

import ast
from pathlib import Path

import traceread

PKG = Path(traceread.__file__).parent
ABOVE_PASSES = {"verdict", "analysis", "render", "cli", "jobs", "diffs", "cache", "capture"}
ABOVE_READERS = ABOVE_PASSES | {"passes", "synth", "outputs"}


def _module(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package(path: Path) -> str:
    mod = _module(path)
    return mod if path.name == "__init__.py" else mod.rpartition(".")[0]


MODULES = {_module(p): p for p in PKG.rglob("*.py")}
# compiled extensions (readers/_cscan.c): modules too, built or not, with no imports to read
EXTENSIONS = {f"{_module(c.parent / '__init__.py')}.{c.stem}" for c in PKG.rglob("*.c")}


def _edges(path: Path):
    """(module imported, names taken from it) for every import in ``path``, relative ones resolved."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, []
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package(path).split(".")
                base = ".".join(base[: len(base) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            names = [a.name for a in node.names]
            subs = [n for n in names if f"{target}.{n}" in MODULES or f"{target}.{n}" in EXTENSIONS]
            for n in subs:          # `from pkg import module`: an arrow to the module itself
                yield f"{target}.{n}", []
            rest = [n for n in names if n not in subs]
            if rest or not subs:
                yield target, rest


def _room(mod: str) -> str:
    return mod.split(".")[1] if mod.count(".") else ""


def _graph() -> dict[str, set[str]]:
    g = {}
    for mod, path in MODULES.items():
        # a package's face (its __init__) hands names on; an arrow into it is an arrow to the room
        g[mod] = {t for t, _ in _edges(path) if t in MODULES and t != mod}
    return g


def _cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def _faces_removed(g: dict[str, set[str]]) -> dict[str, set[str]]:
    """Without the package's face: ``traceread/__init__`` hands the API on (lazily: analysis for
    ``traceread.analyze``) and the CLI imports ``traceread.load`` through it; that is not a
    circle of the layers."""
    return {m: {t for t in ts if t != "traceread"} for m, ts in g.items() if m != "traceread"}


def test_no_import_circle_between_modules():
    assert _cycles(_faces_removed(_graph())) == []


def test_passes_never_import_the_verdict_or_anything_above():
    bad = {m: sorted({_room(t) for t in ts} & ABOVE_PASSES)
           for m, ts in _graph().items() if _room(m) == "passes"}
    assert len(bad) > 20
    assert {k: v for k, v in bad.items() if v} == {}


def test_readers_never_import_the_passes_or_anything_above():
    bad = {m: sorted({_room(t) for t in ts} & ABOVE_READERS)
           for m, ts in _graph().items() if _room(m) == "readers"}
    assert {k: v for k, v in bad.items() if v} == {}


def test_no_private_name_taken_from_another_room():
    bad = []
    for mod, path in MODULES.items():
        for target, names in _edges(path):
            if not target.startswith("traceread.") or _room(target) == _room(mod):
                continue
            private = [n for n in names if n.startswith("_") and n != "__version__"]
            hidden_module = any(p.startswith("_") and not p.startswith("__")
                                for p in target.split(".")[2:])
            if private or hidden_module:
                bad.append((mod, target, private))
    assert bad == []


def test_the_checks_see_what_they_guard(tmp_path):
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    # relative imports resolve: steps.py has `from ..table import` and `from .common import`
    edges = dict(_edges(PKG / "passes" / "steps.py"))
    assert "GPU_OP_KINDS" in edges["traceread.table"] and "kind_in" in edges["traceread.passes.common"]
    # `from . import _cscan` in readers/_native.py is an arrow to the extension, not to readers/
    assert ("traceread.readers._cscan", []) in list(_edges(PKG / "readers" / "_native.py"))
    lazy = tmp_path / "x.py"      # an import inside a function counts too
    lazy.write_text("def g():\n    from traceread.render.text import fmt_ns\n")
    assert ("traceread.render.text", ["fmt_ns"]) in list(_edges(lazy))


# -- facts below, judgement above (issue 29): the verdict decides from the facts record alone

# the record, and the step replay the verdict may run levers through (issue 30)
VERDICT_MAY_READ = {"traceread.passes.facts", "traceread.passes.replay"}


def _in_room(room: str):
    return {m: p for m, p in MODULES.items() if _room(m) == room}


def test_the_verdict_reads_only_the_facts_record():
    """verdict/ takes nothing from passes/ but the record: no detector, no event table."""
    bad = {m: sorted(t for t, _ in _edges(p) if _room(t) == "passes" and t not in VERDICT_MAY_READ)
           for m, p in _in_room("verdict").items()}
    assert len(bad) >= 8
    assert {k: v for k, v in bad.items() if v} == {}


def test_the_verdict_computes_no_table():
    """No module of verdict/ imports pandas or numpy: whatever needs a table is a pass."""
    bad = {m: sorted(t for t, _ in _edges(p) if t.split(".")[0] in ("pandas", "numpy"))
           for m, p in _in_room("verdict").items()}
    assert {k: v for k, v in bad.items() if v} == {}


def _functions(path: Path) -> list[str]:
    return [n.name for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def test_no_pass_writes_a_lever():
    """passes/ defines no lever (no function named *lever*, no ``Lever`` row, no ``levers``
    key); the lever table's texts appear nowhere in passes/."""
    from traceread.verdict import levers as L

    passes = _in_room("passes")
    named = {m: [f for f in _functions(p) if "lever" in f.lower()] for m, p in passes.items()}
    assert {k: v for k, v in named.items() if v} == {}
    texts = [lv.text for lv in L.LEVERS + L.DIAGNOSTICS if isinstance(lv.text, str)]
    assert len(texts) > 50
    for m, p in passes.items():
        tree = ast.parse(p.read_text())
        strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
                   and isinstance(n.value, str)]
        assert not [s for s in strings if s in ("levers", "lever", "advice")], m
        calls = [n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and isinstance(n.func, ast.Name)]
        assert "Lever" not in calls, m
        # a lever's words start no string of a pass (the first 40 characters of each text)
        heads = {t[:40] for t in texts if len(t) >= 40}
        assert not [s for s in strings if s[:40] in heads], m


def test_the_fact_checks_see_what_they_guard(tmp_path):
    bad = tmp_path / "x.py"
    bad.write_text("import pandas as pd\nfrom traceread.passes.culprits import culprits\n"
                   "def busy_levers():\n    return {'levers': []}\n")
    edges = [t for t, _ in _edges(bad)]
    assert "pandas" in edges
    assert [t for t in edges if _room(t) == "passes" and t not in VERDICT_MAY_READ] == \
        ["traceread.passes.culprits"]
    assert "busy_levers" in _functions(bad)
    # the verdict's own modules are seen, and decision.py reads the record
    verdict = _in_room("verdict")
    assert "traceread.verdict.decision" in verdict
    assert ("traceread.passes.facts", ["WindowFacts"]) in list(_edges(verdict["traceread.verdict.decision"]))
