"""The README's promises stay true: its example runs, and CI runs its test command."""

import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _readme() -> str:
    with open(os.path.join(ROOT, "README.md")) as f:
        return f.read()


def test_ten_line_example_runs_and_selects_finite_strategies(capsys):
    code = re.search(r"## Choosing a strategy in ten lines\n\n```python\n(.*?)```", _readme(), re.S).group(1)
    assert len(code.strip().splitlines()) <= 10
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out
    found = re.findall(r"^(laplace|gaussian) (OPT_\w+) expected RMSE ([0-9.]+)$", out, re.M)
    assert [f[0] for f in found] == ["laplace", "gaussian"]
    assert all(0 < float(f[2]) < 100 for f in found)


def test_ci_runs_the_readme_test_command():
    command = re.search(r"Run the tests:\n\n```\n(.*?)\n```", _readme(), re.S).group(1).strip()
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        assert command in [line.strip() for line in f]


def test_private_answers_example_runs(capsys):
    code = re.search(r"## Private answers in ten lines\n\n```python\n(.*?)```", _readme(), re.S).group(1)
    assert len(code.strip().splitlines()) <= 10
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert re.search(r"^-- laplace noise, epsilon=0.5; .*$", out, re.M)
    assert re.search(r"^-- expected RMSE: n 2.828$", out, re.M)
    assert re.search(r"^smoker +n +std_error +ci_low +ci_high$", out, re.M)
    assert "Cost(epsilon=0.5, delta=0.0, rho=0.0)" in out
