"""Synthesize the CDK app once per source state and reuse the cloud assembly.

The cache key is a hash of every file under ``infra/``, ``lambdas/`` and ``containers/`` plus ``cdk.json``, the
stage and any extra context; an unchanged tree reuses ``.cdk-cache/assemblies/<stage>-<key>/``. Synthesis goes
through the project's CDK CLI (``node_modules/.bin/cdk``, i.e. ``cdk.json``) when it is installed, else through
``python -m infra.app`` with the same ``CDK_OUTDIR``/``CDK_CONTEXT_JSON`` contract the CLI uses.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lambdas.domain.json_types import JsonMapping, JsonObject

REPO_ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIRS = ("infra", "lambdas", "containers")
SOURCE_FILES = ("cdk.json", "package-lock.json")
_SKIPPED_PARTS = {"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache"}
MARKER = "dualtrack-synth.json"
KEEP_ASSEMBLIES = 4  # per stage; older ones are removed after a new synth


class SynthFailed(RuntimeError):
    pass


@dataclass(frozen=True)
class Assembly:
    """A synthesized cloud assembly: its directory, how it was made, and its stack templates by stack name."""

    path: Path
    method: str
    key: str

    def stack_names(self) -> list[str]:
        manifest = json.loads((self.path / "manifest.json").read_text())
        return sorted(name for name, artifact in manifest["artifacts"].items()
                      if artifact.get("type") == "aws:cloudformation:stack")

    def template(self, stack_name: str) -> JsonObject:
        path = self.path / f"{stack_name}.template.json"
        template = json.loads(path.read_text())
        if not isinstance(template, dict):
            raise SynthFailed(f"{path}: a template is a JSON object, not {type(template).__name__}")
        return template

    def templates(self) -> dict[str, JsonObject]:
        return {name: self.template(name) for name in self.stack_names()}

    def stack(self, suffix: str) -> str:
        """The stack whose name ends with ``-<suffix>`` (``Stateful``, ``Compute``, ``Control``)."""
        found = [name for name in self.stack_names() if name.endswith(f"-{suffix}")]
        if len(found) != 1:
            raise KeyError(f"expected one stack ending in -{suffix}, found {found}")
        return found[0]


def source_key(root: Path = REPO_ROOT, *, stage: str = "dev", context: JsonMapping | None = None) -> str:
    digest = hashlib.sha256()
    digest.update(json.dumps({"stage": stage, "context": context or {}}, sort_keys=True).encode())
    files: list[Path] = [root / name for name in SOURCE_FILES if (root / name).exists()]
    for folder in SOURCE_DIRS:
        base = root / folder
        if base.exists():
            files += [p for p in base.rglob("*") if p.is_file() and not (_SKIPPED_PARTS & set(p.parts))
                      and p.suffix != ".pyc"]
    for path in sorted(files):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def cache_dir(root: Path = REPO_ROOT) -> Path:
    return Path(os.environ.get("DUALTRACK_SYNTH_CACHE") or root / ".cdk-cache" / "assemblies")


def cdk_cli(root: Path = REPO_ROOT) -> Path | None:
    cli = root / "node_modules" / ".bin" / "cdk"
    return cli if cli.exists() else None


def synthesize(stage: str = "dev", *, root: Path = REPO_ROOT, context: JsonMapping | None = None,
               use_cli: bool | None = None, timeout_s: int = 600) -> Assembly:
    """The assembly for ``stage`` of the app at ``root``, synthesized now only if the sources changed."""
    key = source_key(root, stage=stage, context=context)
    target = cache_dir(root) / f"{stage}-{key[:20]}"
    marker = target / MARKER
    if marker.exists():
        return Assembly(target, json.loads(marker.read_text())["method"], key)

    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{stage}-", dir=target.parent))
    cli = cdk_cli(root) if use_cli in (None, True) else None
    if use_cli and cli is None:
        raise SynthFailed(f"the CDK CLI is not installed under {root / 'node_modules'}; run `npm ci`")
    env = {**os.environ, "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1"}
    extra = [f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in (context or {}).items()]
    if cli is not None:
        method = "cdk-cli"
        command = [str(cli), "synth", "--quiet", "--no-notices", "--output", str(staging), "-c", f"stage={stage}"]
        for item in extra:
            command += ["-c", item]
    else:
        method = "python"
        cdk_json = json.loads((root / "cdk.json").read_text())
        env["CDK_OUTDIR"] = str(staging)
        # The context the CLI adds by default, so both paths write the same templates.
        cli_defaults = {"aws:cdk:enable-path-metadata": True, "aws:cdk:enable-asset-metadata": True,
                        "aws:cdk:version-reporting": True, "aws:cdk:bundling-stacks": ["**"]}
        env["CDK_CONTEXT_JSON"] = json.dumps({**cli_defaults, **cdk_json.get("context", {}), **(context or {}),
                                              "stage": stage})
        command = [sys.executable, "-m", "infra.app"]
    done = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=timeout_s,
                          check=False)
    if done.returncode != 0:
        report = staging / "validation-report.json"
        details = report.read_text()[:4000] if report.exists() else ""
        shutil.rmtree(staging, ignore_errors=True)
        raise SynthFailed(f"`{' '.join(command)}` failed ({done.returncode}):\n{done.stdout[-3000:]}\n"
                          f"{done.stderr[-6000:]}\n{details}")
    (staging / MARKER).write_text(json.dumps({"method": method, "key": key, "stage": stage}))
    try:
        staging.rename(target)
    except OSError:  # a concurrent synth of the same sources won; its assembly is identical
        shutil.rmtree(staging, ignore_errors=True)
    _prune(target.parent, stage)
    return Assembly(target, method, key)


def _prune(folder: Path, stage: str) -> None:
    finished = sorted((p for p in folder.glob(f"{stage}-*") if (p / MARKER).exists()),
                      key=lambda p: (p / MARKER).stat().st_mtime, reverse=True)
    for old in finished[KEEP_ASSEMBLIES:]:
        shutil.rmtree(old, ignore_errors=True)
