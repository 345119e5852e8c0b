"""``python -m lab new`` end to end, in a temporary copy of the project: every ``bash`` command
of docs/new-method.md, in order, with the exit status the guide gives it (``# exit N``; 0
otherwise): generate a family, run its notebook, run its tests and the layering test, time
it, have its unquoted claim refused by ``lab claims verify``, and the refusals of a taken and
of a bad name leave every file as it was. The copy goes with the test's folder."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab.new.family import NewError, new_family
from tests.conftest import ROOT

GUIDE = ROOT / "docs" / "new-method.md"
BLOCK = re.compile(r"^```bash\n(.*?)^```", re.M | re.S)
EXIT = re.compile(r"\s+# exit (\d+)$")


def commands(text: str) -> list[tuple[str, int]]:
    """The guide's shell commands in order, each with the exit status it should have."""
    out = []
    for block in BLOCK.findall(text):
        for line in block.splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                m = EXIT.search(line)
                out.append((line[:m.start()] if m else line, int(m.group(1)) if m else 0))
    return out


def project_copy(dest: Path) -> Path:
    """The project's files as git sees them (tracked and new, not ignored)."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in listed:
        if name and (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def snapshot(root: Path) -> dict[str, float]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")
            if p.is_file()}


def test_the_guide_parses_into_the_commands_it_promises():
    cmds = commands(GUIDE.read_text())
    assert cmds[0] == ('python -m lab new toy_method --title "Toy" --paper "Doe, Toy (2026)"',
                       0)
    assert ("python -m lab run notebooks/15_toy_method.ipynb", 0) in cmds
    assert [c for c, rc in cmds if rc == 2] == ["python -m lab new toy_method",
                                                "python -m lab new 9lives"]
    assert commands("```bash\n# a comment\npython x.py  # exit 1\n```\n") == [("python x.py", 1)]


@pytest.mark.slow
def test_the_guide_runs_from_lab_new_to_a_verdict_in_a_copy_of_the_project(tmp_path):
    root = project_copy(tmp_path / "project")
    env = {**os.environ, "PYTHONPATH": str(root)}  # the copy's lab, not the installed one
    for command, status in commands(GUIDE.read_text()):
        before = snapshot(root) if status == 2 else None
        done = subprocess.run(sys.executable + command.removeprefix("python"), shell=True,
                              cwd=root, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == status, (command, done.stdout[-3000:], done.stderr[-3000:])
        if status == 2:  # refused in one line, nothing written
            assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1
            assert snapshot(root) == before, command
    claims = (root / "reports" / "claims.html").read_text()
    assert "beats_baseline" in claims and "FILL IN" in claims  # its row, its quote unfilled
    assert "notebooks/15_toy_method.ipynb" in (root / "README.md").read_text()


def test_lab_new_refuses_before_writing(tmp_path):
    (tmp_path / "lab").mkdir()
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_mine.py").write_text("")
    for name, message in (("9lives", "not a lowercase Python identifier"),
                          ("Mine", "not a lowercase Python identifier"),
                          ("class", "not a lowercase Python identifier"),
                          ("json", "shadows the package json"),
                          ("record", "is a name lab.experiments exports"),
                          ("mine", "exists already (tests/test_mine.py)")):
        with pytest.raises(NewError, match=re.escape(message)):
            new_family(tmp_path, name)
    with pytest.raises(NewError, match="must be one line"):
        new_family(tmp_path, "fine", title="two\nlines")
    with pytest.raises(NewError, match="is not the project's root"):
        new_family(tmp_path / "lab", "fine")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["lab", "notebooks", "test_mine.py",
                                                          "tests"]
