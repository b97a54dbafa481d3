"""Installs llama.cpp's GGUF converter for the studio's GGUF export, from the pinned llama-cpp-python sdist on PyPI.

    python scripts/install_gguf_converter.py [--sdist FILE] [--target DIR] [--force]

Downloads ``llama-cpp-python`` (the version in backend/platform/gguf_converter.py) as a source distribution with pip,
and unpacks only ``convert_hf_to_gguf.py``, its ``conversion`` package, its ``gguf-py`` and llama.cpp's LICENSE from
``vendor/llama.cpp`` into the converter folder: ``$STUDIO_GGUF_CONVERTER``, else ``<sys.prefix>/share/
studio-llama-converter``. Nothing is compiled and nothing of llama.cpp enters the repository. The folder is written
beside its place and renamed, so it is whole or absent; an install of the same version is kept (``--force`` redoes
it). ``--sdist`` takes a copy already downloaded (offline machines).
"""

from __future__ import annotations

import argparse
import json
import secrets
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backend.platform.gguf_converter import (  # noqa: E402 - the path above first
    CONVERTER_PACKAGE,
    CONVERTER_VERSION,
    MARKER,
    converter_dir,
    installed_version,
)

# What is kept of the sdist's vendor/llama.cpp: the converter, the package it imports, its gguf library, the license.
KEPT = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/", "LICENSE")


def download(folder: Path) -> Path:
    """The pinned sdist, downloaded by pip into ``folder`` (no wheel, no dependencies, nothing built)."""
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:"]
    command += [f"{CONVERTER_PACKAGE}=={CONVERTER_VERSION}", "--dest", str(folder)]
    subprocess.run(command, check=True)
    found = sorted(folder.glob("llama_cpp_python-*.tar.gz"))
    if not found:
        raise SystemExit(f"pip downloaded no {CONVERTER_PACKAGE} source distribution into {folder}")
    return found[0]


def kept_name(member: str) -> str | None:
    """The path inside the converter folder of an sdist member to keep, else None.

    >>> kept_name("llama_cpp_python-0.3.36/vendor/llama.cpp/conversion/qwen.py")
    'conversion/qwen.py'
    >>> kept_name("llama_cpp_python-0.3.36/vendor/llama.cpp/src/llama-vocab.cpp") is None
    True
    """
    parts = member.split("/", 3)
    if len(parts) < 4 or parts[1:3] != ["vendor", "llama.cpp"]:
        return None
    inner = parts[3]
    keep = any(inner == k or (k.endswith("/") and inner.startswith(k)) for k in KEPT)
    return inner if keep and ".." not in inner.split("/") else None


def unpack(sdist: Path, target: Path) -> int:
    """Unpack the kept files of ``sdist`` into the new folder ``target``; the number of files written."""
    count = 0
    with tarfile.open(sdist) as archive:
        for member in archive.getmembers():
            inner = kept_name(member.name)
            if inner is None or not member.isfile():
                continue
            source = archive.extractfile(member)
            if source is None:
                continue
            destination = target / inner
            destination.parent.mkdir(parents=True, exist_ok=True)
            with source, open(destination, "wb") as out:
                shutil.copyfileobj(source, out)
            count += 1
    return count


def install(target: Path, sdist: Path | None = None, force: bool = False) -> str:
    """Install the converter into ``target`` (whole, or left as it was); a line saying what was done."""
    if not force and installed_version(target) == CONVERTER_VERSION:
        return f"llama.cpp's converter ({CONVERTER_PACKAGE} {CONVERTER_VERSION}) is already installed in {target}"
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.parent / f".{target.name}.partial-{secrets.token_hex(4)}"
    partial.mkdir()
    try:
        with tempfile.TemporaryDirectory(prefix="studio-converter-") as scratch:
            files = unpack(sdist or download(Path(scratch)), partial)
        for needed in ("convert_hf_to_gguf.py", "conversion", "gguf-py", "LICENSE"):
            if not (partial / needed).exists():
                raise SystemExit(f"the {CONVERTER_PACKAGE} sdist has no vendor/llama.cpp/{needed}; nothing installed")
        (partial / MARKER).write_text(json.dumps({"package": CONVERTER_PACKAGE, "version": CONVERTER_VERSION}))
        old = target.parent / f".{target.name}.old-{secrets.token_hex(4)}"
        if target.exists():
            target.rename(old)
        partial.rename(target)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return f"installed llama.cpp's converter ({CONVERTER_PACKAGE} {CONVERTER_VERSION}, {files} files) in {target}"


def main(argv: list[str] | None = None) -> int:
    """The command line: install, print one line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sdist", type=Path, help="a downloaded llama-cpp-python sdist to unpack instead")
    parser.add_argument(
        "--target",
        type=Path,
        help="the converter folder (default: STUDIO_GGUF_CONVERTER, else <sys.prefix>/share/studio-llama-converter)",
    )
    parser.add_argument("--force", action="store_true", help="install again even when this version is there")
    args = parser.parse_args(argv)
    print(install(args.target or converter_dir(), args.sdist, args.force))
    return 0


if __name__ == "__main__":
    sys.exit(main())
