"""The install's optional parts: the base CLI imports none of them, and a command whose extra is missing says, in one
line, which extra to install and exits 9."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from dualtrack.cli import main
from dualtrack.extras import EXIT_MISSING_EXTRA, MODULES_OF_EXTRA, extra_missing, missing_modules

ROOT = Path(__file__).resolve().parents[3]
REHEARSAL_TRIAL = str(ROOT / "examples" / "trial-rehearsal.json")
# What only the deploy and rehearsal extras bring: the base CLI must load none of it.
EXTRA_ONLY = ("aws_cdk", "constructs", "cdk_nag", "jsii", "moto")


def without(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    """As if ``modules`` were not installed: a None entry in sys.modules makes their import fail."""
    for name in modules:
        monkeypatch.setitem(sys.modules, name, None)


def test_every_module_an_extra_names_is_installed_with_the_dev_set() -> None:
    for extra, modules in MODULES_OF_EXTRA.items():
        assert missing_modules(modules) == [], f"the {extra} extra names a module that is not installed"


def test_a_missing_module_is_one_line_naming_the_extra(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    without(monkeypatch, "aws_cdk")
    with pytest.raises(ImportError):
        import aws_cdk  # noqa: F401  (the simulation holds for a real import too)
    assert extra_missing("deploy", "dualtrack stage cost")
    assert capsys.readouterr().err == ("dualtrack stage cost needs the deploy extra: pip install 'dualtrack[deploy]' "
                                       "(not installed: aws_cdk)\n")


def test_nothing_is_printed_when_the_extra_is_there(capsys: pytest.CaptureFixture[str]) -> None:
    assert not extra_missing("deploy", "dualtrack stage cost")
    assert capsys.readouterr().err == ""


def test_stage_cost_without_the_cdk_exits_9_before_synthesizing(monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    without(monkeypatch, "aws_cdk", "cdk_nag")
    assert main(["stage", "cost", "--stage", "dev"]) == EXIT_MISSING_EXTRA == 9
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        "dualtrack stage cost needs the deploy extra: pip install 'dualtrack[deploy]' "
        "(not installed: aws_cdk, cdk_nag)"]


def test_local_run_without_moto_exits_9_naming_the_rehearsal_extra(monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    without(monkeypatch, "moto")
    assert main(["local", "run", REHEARSAL_TRIAL]) == EXIT_MISSING_EXTRA
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        "dualtrack local run needs the rehearsal extra: pip install 'dualtrack[rehearsal]' (not installed: moto)"]


PROBE = """\
import sys
{action}
loaded = sorted({{m.partition(".")[0] for m in sys.modules}} & set(sys.argv[1:]))
print("loaded:" + ",".join(loaded))
"""
HELP = """\
from dualtrack.cli import main
try:
    main(["--help"])
except SystemExit:
    pass
"""


@pytest.mark.parametrize("action", ["import dualtrack.cli", HELP], ids=["import", "help"])
def test_the_cli_and_its_help_import_no_extra(action: str) -> None:
    """`dualtrack --help` registers every command, so it loads every command module: none may import an extra."""
    done = subprocess.run([sys.executable, "-c", PROBE.format(action=action), *EXTRA_ONLY], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.splitlines()[-1] == "loaded:"


def test_the_base_dependencies_leave_the_extras_out() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = " ".join(project["dependencies"])
    for name in ("aws-cdk-lib", "constructs", "cdk-nag", "moto", "torch", "psutil"):
        assert name not in base
    extras = project["optional-dependencies"]
    assert {"deploy", "rehearsal", "train", "dev"} <= set(extras)
    assert any(d.startswith("aws-cdk-lib") for d in extras["deploy"])
    assert any(d.startswith("moto[") for d in extras["rehearsal"])


def lock_lines() -> list[str]:
    return [line for line in (ROOT / "requirements" / "lock.txt").read_text().splitlines()
            if line and not line.startswith((" ", "#"))]


def test_the_lock_pins_every_package_and_the_cpu_torch() -> None:
    lock = lock_lines()
    assert lock and all("==" in line for line in lock), [line for line in lock if "==" not in line]
    names = {line.partition("==")[0].lower() for line in lock}
    assert "dualtrack" not in names  # make install adds the project itself, editable, with --no-deps
    assert not {n for n in names if n.startswith("nvidia-") or n == "triton"}, "the lock resolved a CUDA torch"
    assert [line for line in lock if line.startswith("torch==")] in (["torch==2.13.0"], ["torch==2.13.0+cpu"])


def test_the_lock_satisfies_pyproject() -> None:
    """`make install` installs the lock, then the project with --no-deps: a dependency added to pyproject.toml
    without `make lock` would be missing from the venv."""
    pins = {canonicalize_name(name): version
            for name, _, version in (line.partition("==") for line in lock_lines())}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [*project["dependencies"], *(d for deps in project["optional-dependencies"].values() for d in deps)]
    stale = []
    for text in wanted:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        if name == "dualtrack" or (requirement.marker and not requirement.marker.evaluate()):
            continue
        if name not in pins or not requirement.specifier.contains(pins[name], prereleases=True):
            stale.append(f"{text} (lock: {pins.get(name, 'absent')})")
    assert not stale, f"requirements/lock.txt is stale, run `make lock`: {stale}"
