"""What ECS takes from a container image to start it, read from the image's Dockerfile instead of a built image.

:func:`parse_dockerfile` reads the ENTRYPOINT, CMD, WORKDIR and ENV that a Dockerfile's final stage (or a named
target) gives its image (:class:`ImageConfig`), following stages built from earlier stages, ARG defaults and build
args; :func:`asset_image_configs` does it for every container image asset of a cloud assembly, keyed by the ECR URI
CDK publishes it at. The local Batch runner starts a job's container from that config, as a process on this machine.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path


class DockerfileError(ValueError):
    pass


@dataclass(frozen=True)
class ImageConfig:
    """What ECS takes from an image to start its container: ENTRYPOINT, CMD, WORKDIR and ENV."""

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    workdir: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    def argv(self, command: Sequence[str] | None) -> list[str]:
        """ENTRYPOINT followed by the job's command, which replaces CMD only (the image's CMD when none is given).

        https://docs.docker.com/reference/dockerfile/#understand-how-cmd-and-entrypoint-interact
        """
        return [*self.entrypoint, *(command if command else self.cmd)]


_NO_OP = frozenset({"RUN", "COPY", "ADD", "USER", "LABEL", "EXPOSE", "VOLUME", "HEALTHCHECK", "STOPSIGNAL",
                    "MAINTAINER"})
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)([^}]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


@dataclass
class _Stage:
    name: str | None
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    cmd_set: bool = False
    workdir: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    args: dict[str, str] = field(default_factory=dict)
    shell: tuple[str, ...] = ("/bin/sh", "-c")


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        if line.lstrip().startswith("#") or (not line.strip() and pending):
            continue  # comments (and parser directives) and blank lines inside a continuation are dropped
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending += line
        if pending.strip():
            yield start, pending.strip()
        pending = ""
    if pending.strip():
        yield start, pending.strip()


def _expand(value: str, variables: Mapping[str, str], where: str) -> str:
    def replace(match: re.Match[str]) -> str:
        name, modifier = match.group(1) or match.group(3), match.group(2) or ""
        if modifier:
            raise DockerfileError(f"{where}: variable modifier in ${{{name}{modifier}}} is not supported")
        return variables.get(name, "")

    return _VARIABLE.sub(replace, value)


def _exec_or_shell(rest: str, stage: _Stage, where: str) -> tuple[str, ...]:
    if rest.startswith("["):
        try:
            parsed = json.loads(rest)
        except json.JSONDecodeError as exc:
            raise DockerfileError(f"{where}: malformed exec form {rest!r}: {exc}") from exc
        if not isinstance(parsed, list) or not all(isinstance(item, str) for item in parsed):
            raise DockerfileError(f"{where}: the exec form must be a JSON array of strings: {rest!r}")
        return tuple(parsed)
    return (*stage.shell, rest)  # shell form: run by the image's shell, variables left to it


def _env_pairs(rest: str, variables: Mapping[str, str], where: str) -> list[tuple[str, str]]:
    try:
        words = shlex.split(rest, posix=True)
    except ValueError as exc:
        raise DockerfileError(f"{where}: cannot parse {rest!r}: {exc}") from exc
    if not words:
        raise DockerfileError(f"{where}: ENV needs a value")
    if "=" not in words[0].split(" ")[0]:  # legacy `ENV NAME value with spaces`
        name, _, value = rest.partition(" ")
        return [(name, _expand(value.strip(), variables, where))]
    pairs = []
    for word in words:
        name, sep, value = word.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", name):
            raise DockerfileError(f"{where}: expected NAME=value, got {word!r}")
        pairs.append((name, _expand(value, variables, where)))
    return pairs


def _declare_arg(rest: str, stages: list[_Stage], global_args: dict[str, str], build_args: Mapping[str, str],
                 where: str) -> None:
    """ARG NAME[=default]: global before the first FROM, else the current stage's; ``build_args`` win."""
    name, sep, default = rest.partition("=")
    name = name.strip()
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise DockerfileError(f"{where}: ARG {rest!r}: one NAME[=default] per ARG is supported")
    scope = stages[-1].args if stages else global_args
    variables = {**global_args, **(stages[-1].args if stages else {}),
                 **(stages[-1].env if stages else {})}
    value = build_args.get(name)
    if value is None:
        value = _expand(default.strip().strip('"'), variables, where) if sep else global_args.get(name, "")
    scope[name] = value


def _from_stage(rest: str, stages: list[_Stage], global_args: Mapping[str, str], where: str) -> _Stage:
    """FROM image [AS name]: a new stage, inheriting the config of the earlier stage it is built from."""
    words = _expand(rest, global_args, where).split()
    words = [w for w in words if not w.startswith("--platform")]
    if len(words) not in (1, 3) or (len(words) == 3 and words[1].upper() != "AS"):
        raise DockerfileError(f"{where}: FROM {rest!r}: expected `FROM image [AS name]`")
    parent = next((s for s in stages if s.name and s.name == words[0].lower()), None)
    stage = _Stage(name=words[2].lower() if len(words) == 3 else None)
    if parent is not None:
        stage.entrypoint, stage.cmd, stage.workdir = parent.entrypoint, parent.cmd, parent.workdir
        stage.env, stage.shell = dict(parent.env), parent.shell
    return stage


def _apply_instruction(stage: _Stage, instruction: str, rest: str, where: str) -> None:
    """An instruction inside a stage: ENV, WORKDIR, ENTRYPOINT, CMD, SHELL, or one that changes none of them."""
    variables = {**stage.args, **stage.env}  # global ARGs reach a stage only when it redeclares them
    if instruction == "ENV":
        stage.env.update(_env_pairs(rest, variables, where))
    elif instruction == "WORKDIR":
        path = _expand(rest, variables, where)
        stage.workdir = path if path.startswith("/") else f"{(stage.workdir or '/').rstrip('/')}/{path}"
    elif instruction == "ENTRYPOINT":
        stage.entrypoint = _exec_or_shell(rest, stage, where)
        if not stage.cmd_set:  # an ENTRYPOINT resets a CMD inherited from the base (Dockerfile reference)
            stage.cmd = ()
    elif instruction == "CMD":
        stage.cmd, stage.cmd_set = _exec_or_shell(rest, stage, where), True
    elif instruction == "SHELL":
        shell = _exec_or_shell(rest, stage, where)
        if not rest.startswith("["):
            raise DockerfileError(f"{where}: SHELL must use the JSON form")
        stage.shell = shell
    elif instruction not in _NO_OP:
        raise DockerfileError(f"{where}: {instruction} is not understood by the local image reader")


def _final_stage(stages: list[_Stage], target: str | None, source: str) -> _Stage:
    """The stage the build produces: the last one, or the one named ``target``."""
    if not stages:
        raise DockerfileError(f"{source}: no FROM instruction")
    final = stages[-1]
    if target is not None:
        final = next((s for s in stages if s.name == target.lower()), None)  # type: ignore[assignment]
        if final is None:
            raise DockerfileError(f"{source}: no stage named {target!r}")
    return final


def parse_dockerfile(text: str, *, build_args: Mapping[str, str] | None = None, target: str | None = None,
                     source: str = "Dockerfile") -> ImageConfig:
    """The image config the Dockerfile's final stage (or ``target``) builds.

    Handles FROM (a stage built FROM an earlier stage inherits its config; a registry base image is assumed to
    set no ENTRYPOINT/CMD/WORKDIR/ENV of its own), ARG (global and per stage, with defaults and ``build_args``),
    ENV (``A=b C=d`` and legacy ``A b``), WORKDIR, ENTRYPOINT/CMD (exec and shell form), SHELL, and ignores the
    instructions that do not change those (RUN, COPY, USER, ...). Anything else raises :class:`DockerfileError`.
    """
    build_args = dict(build_args or {})
    global_args: dict[str, str] = {}
    stages: list[_Stage] = []
    for number, line in _logical_lines(text):
        where = f"{source}:{number}"
        instruction, _, rest = line.partition(" ")
        instruction, rest = instruction.upper(), rest.strip()
        if "<<" in rest and instruction in ("RUN", "COPY", "ADD"):
            raise DockerfileError(f"{where}: heredocs are not supported")
        if instruction == "ARG":
            _declare_arg(rest, stages, global_args, build_args, where)
        elif instruction == "FROM":
            stages.append(_from_stage(rest, stages, global_args, where))
        elif not stages:
            raise DockerfileError(f"{where}: {instruction} before the first FROM")
        else:
            _apply_instruction(stages[-1], instruction, rest, where)
    final = _final_stage(stages, target, source)
    return ImageConfig(entrypoint=final.entrypoint, cmd=final.cmd, workdir=final.workdir, env=dict(final.env))


def asset_image_configs(assembly_dir: Path, *, account: str, region: str, partition: str = "aws",
                        url_suffix: str = "amazonaws.com") -> dict[str, ImageConfig]:
    """The image config of every container image asset of a cloud assembly, by the ECR URI CDK publishes it at.

    ``*.assets.json`` lists ``dockerImages`` by asset hash, with the build context (``source.directory``), the
    Dockerfile in it (``source.dockerFile``), build args and target, and the ECR repository and tag each is
    published to; the job definitions name the image by that URI.
    """
    placeholders = {"${AWS::AccountId}": account, "${AWS::Region}": region, "${AWS::Partition}": partition,
                    "${AWS::URLSuffix}": url_suffix}

    def fill(text: str) -> str:
        for key, value in placeholders.items():
            text = text.replace(key, value)
        return text

    images: dict[str, ImageConfig] = {}
    for manifest in sorted(assembly_dir.glob("*.assets.json")):
        for asset_hash, asset in (json.loads(manifest.read_text()).get("dockerImages") or {}).items():
            src = asset.get("source") or {}
            if "directory" not in src:
                raise DockerfileError(f"{manifest.name}: image asset {asset_hash} is not built from a directory")
            dockerfile = assembly_dir / src["directory"] / src.get("dockerFile", "Dockerfile")
            config = parse_dockerfile(dockerfile.read_text(), build_args=src.get("dockerBuildArgs"),
                                      target=src.get("dockerBuildTarget"), source=str(dockerfile))
            for destination in (asset.get("destinations") or {}).values():
                repository, tag = fill(destination["repositoryName"]), fill(destination["imageTag"])
                images[f"{account}.dkr.ecr.{region}.{url_suffix}/{repository}:{tag}"] = config
    return images
