"""The passes sit below the verdict: no module of passes/ imports verdict/ or the rooms above it."""
from __future__ import annotations

import ast
from pathlib import Path

import traceread

PKG = Path(traceread.__file__).parent
# (passes/info.py still reaches up into multirank/ for nsys's process split: not listed here)
ABOVE_PASSES = ("verdict", "analysis", "render", "cli", "batch", "tracediff")


def _imports(path: Path) -> set[str]:
    """Top-level traceread rooms a module imports (relative imports resolved)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 0:
                names = [node.module or ""]
            else:   # from .. import x / from ..x import y, seen from traceread/passes/
                base = "traceread" if node.level == 2 else "traceread.passes"
                names = [f"{base}.{node.module}"] if node.module else \
                    [f"{base}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        out |= {n.split(".")[1] for n in names if n.startswith("traceread.") and n.count(".")}
    return out


def test_passes_never_import_the_verdict_or_anything_above():
    files = sorted((PKG / "passes").glob("*.py"))
    assert len(files) > 20
    bad = {f.name: sorted(_imports(f) & set(ABOVE_PASSES)) for f in files}
    assert {k: v for k, v in bad.items() if v} == {}


def test_the_check_sees_an_upward_import(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("from ..verdict import levers\nfrom ..passes import steps\n"
                 "def g():\n    from ..render.text import fmt_ns\n")
    assert _imports(f) == {"verdict", "passes", "render"}
