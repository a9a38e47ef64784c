"""The README's Python example runs as written (and so stays true)."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_python_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "the README has no Python example"
    for i, code in enumerate(blocks):
        namespace = {}
        exec(compile(code, f"README.md[python block {i}]", "exec"), namespace)


def test_quick_start_is_two_commands_and_ci_runs_the_test_one():
    text = README.read_text()
    quick = text[text.index("## Quick start"):text.index("## The API")]
    commands = [line for line in re.findall(r"```bash\n(.*?)```", quick, re.S)[0].splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    assert len(commands) == 2
    ci = (README.parent / ".ci" / "run").read_text()
    for step in commands[1].split(" && "):
        assert step.strip() in ci, f"CI does not run the README's test step {step!r}"
