"""The README's promises stay true: its examples and walk-through run as written, its links resolve, and CI runs
its test command."""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _read(path: str) -> str:
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def _section(text: str, title: str) -> str:
    return re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M).group(1)


def test_readme_is_short_and_starts_with_the_user():
    text = _read("README.md")
    assert len(text.splitlines()) <= 400
    titles = re.findall(r"^## (.*)$", text, re.M)
    assert titles.index("Set up") < titles.index("Your own data, step by step") < titles.index("The API")


def test_every_relative_link_of_the_docs_resolves():
    pages = ["README.md", "benchmarks/README.md"] + [f"docs/{p}" for p in os.listdir(os.path.join(ROOT, "docs"))]
    missing = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", _read(page)):
            if not target.startswith(("http://", "https://")):
                if not os.path.exists(os.path.join(ROOT, os.path.dirname(page), target)):
                    missing.append(f"{page}: {target}")
    assert missing == []


def test_ten_line_example_runs_and_selects_finite_strategies(capsys):
    code = re.search(r"## Choosing a strategy in ten lines\n\n```python\n(.*?)```", _read("docs/architecture.md"),
                     re.S).group(1)
    assert len(code.strip().splitlines()) <= 10
    exec(compile(code, "docs/architecture.md", "exec"), {})
    out = capsys.readouterr().out
    found = re.findall(r"^(laplace|gaussian) (OPT_\w+) expected RMSE ([0-9.]+)$", out, re.M)
    assert [f[0] for f in found] == ["laplace", "gaussian"]
    assert all(0 < float(f[2]) < 100 for f in found)


def test_ci_runs_the_readme_test_command():
    command = re.search(r"Run the tests:\n\n```\n(.*?)\n```", _read("README.md"), re.S).group(1).strip()
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        assert command in [line.strip() for line in f]


def test_private_answers_example_runs(capsys):
    code = re.search(r"## Private answers in ten lines\n\n```python\n(.*?)```", _read("README.md"), re.S).group(1)
    assert len(code.strip().splitlines()) <= 10
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert re.search(r"^-- laplace noise, epsilon=0.5; .*$", out, re.M)
    assert re.search(r"^-- expected RMSE: n 2.828$", out, re.M)
    assert re.search(r"^smoker +n +std_error +ci_low +ci_high$", out, re.M)
    assert "Cost(epsilon=0.5, delta=0.0, rho=0.0)" in out


def test_walkthrough_runs_as_written(tmp_path, monkeypatch, capsys):
    """Every block of "Your own data, step by step", in order, in an empty directory: Python blocks in one
    namespace, and each `$ dpsql ...` line of a console block as a command that must succeed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.close("all")
    monkeypatch.chdir(tmp_path)
    blocks = re.findall(r"```(python|console)\n(.*?)```", _section(_read("README.md"), "Your own data, step by step"),
                        re.S)
    assert [kind for kind, _ in blocks].count("console") >= 4
    namespace: dict = {}
    outputs = []
    for kind, body in blocks:
        if kind == "python":
            exec(compile(body, "README.md", "exec"), namespace)
            continue
        for line in body.splitlines():
            if line.startswith("$ "):
                command = line[2:].replace("dpsql ", f"{sys.executable} -m dpsql ", 1)
                done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=300,
                                      env={**os.environ, "PYTHONPATH": ROOT})
                assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
                outputs.append(done.stdout)
    assert os.path.exists("people.yaml") and os.path.exists("people.ledger")
    explained, asked, budget = outputs[2], outputs[3], outputs[4]
    assert re.search(r"epsilon=\d", explained)
    assert "rich" in asked and "std_error" in asked
    assert "0.5" in budget
    out = capsys.readouterr().out
    assert re.search(r"^smoker +n +std_error", out, re.M)
    assert plt.get_fignums(), "res.plot() drew no figure"


def test_quickstart_notebook_executes_and_plots(monkeypatch):
    import nbclient
    import nbformat

    monkeypatch.setenv("PYTHONPATH", ROOT)  # the kernel imports this tree's dpsql

    notebook = nbformat.read(os.path.join(ROOT, "examples", "quickstart.ipynb"), as_version=4)
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": os.path.join(ROOT, "examples")}}).execute()
    kinds = {kind for cell in notebook.cells if cell.cell_type == "code"
             for output in cell.get("outputs", []) for kind in output.get("data", {})}
    assert "image/png" in kinds
    assert "text/html" in kinds
