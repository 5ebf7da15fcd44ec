"""The import rule: each package imports only the layers below it, so the trust boundary is visible.

``dpsql.private`` (the only code that reads the private table or draws noise) never imports the SQL
front end, and the HDMM math imports nothing but the foundation modules. Every import is checked,
including those inside functions.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "dpsql"
FOUNDATION = {"errors", "schema", "limits", "privacy", "released"}
ALLOWED = {  # layer -> the layers it may import
    "foundation": {"foundation"},
    "hdmm": {"foundation", "hdmm"},
    "sql": {"foundation", "hdmm", "sql"},
    "private": {"foundation", "hdmm", "private"},
    "synth": {"foundation", "hdmm", "sql", "private", "synth"},
    "engine": {"foundation", "hdmm", "sql", "private", "synth", "engine"},
    # the server translates wire messages into engine requests: it never reaches the kernel itself
    "server": {"foundation", "engine", "owner", "server"},
}


def layer(module: str) -> str:
    """``dpsql.hdmm.matrix`` -> ``hdmm``; the foundation modules -> ``foundation``; the package root -> ``api``."""
    parts = module.split(".")[1:]
    if not parts or parts[0] in ("__init__", "__main__"):
        return "api"
    return "foundation" if parts[0] in FOUNDATION else parts[0]


def imported(path: Path) -> set[str]:
    """The dpsql modules a file imports (``from dpsql import limits`` is ``dpsql.limits``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "dpsql"}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "dpsql":
            assert node.level == 0, f"{path}: relative import"
            subs = [f"{node.module}.{a.name}" for a in node.names]
            mods = [m for m in subs if (PACKAGE.parent / m.replace(".", "/")).with_suffix(".py").exists()
                    or (PACKAGE.parent / m.replace(".", "/")).is_dir()]
            out |= set(mods) if len(mods) == len(subs) else {node.module}
    return out


def test_every_import_goes_down_the_layers():
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 40
    broken = []
    for path in files:
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        allowed = ALLOWED.get(layer(module))
        if allowed is None:  # api and owner may import anything
            continue
        broken += [f"{module} imports {dep}" for dep in sorted(imported(path)) if layer(dep) not in allowed]
    assert not broken, "\n".join(broken)


def test_the_rule_catches_a_violation(tmp_path):
    bad = tmp_path / "kernel.py"
    bad.write_text("def f():\n    from dpsql.sql.compile import compile_batch\n")
    assert {layer(m) for m in imported(bad)} == {"sql"} and "sql" not in ALLOWED["private"]
    assert layer("dpsql") == "api" and layer("dpsql.limits") == "foundation"
