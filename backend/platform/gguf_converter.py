"""Where llama.cpp's GGUF converter is installed on this machine, and the sentence when it is not.

The converter (``convert_hf_to_gguf.py``, its ``conversion`` package and its own ``gguf-py``, with llama.cpp's
LICENSE) is not part of this project: ``scripts/install_gguf_converter.py`` takes it from the pinned
``llama-cpp-python`` source distribution on PyPI and unpacks only those files into a tools folder, by default
``<sys.prefix>/share/studio-llama-converter`` (the interpreter's own environment), or wherever
``STUDIO_GGUF_CONVERTER`` says. Only the standard library is imported here, so the install script can use it before
anything else is installed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

# The llama-cpp-python source distribution the converter comes from (its vendor/llama.cpp).
CONVERTER_PACKAGE = "llama-cpp-python"
CONVERTER_VERSION = "0.3.36"
CONVERTER_VAR = "STUDIO_GGUF_CONVERTER"
DEFAULT_SUBDIR = Path("share") / "studio-llama-converter"
MARKER = "studio-converter.json"  # written last by the install script: the folder is whole
SCRIPT = "convert_hf_to_gguf.py"
INSTALL_COMMAND = "python scripts/install_gguf_converter.py"


def converter_dir() -> Path:
    """The converter's folder: ``$STUDIO_GGUF_CONVERTER``, else ``<sys.prefix>/share/studio-llama-converter``."""
    configured = os.environ.get(CONVERTER_VAR, "").strip()
    return Path(configured).expanduser() if configured else Path(sys.prefix) / DEFAULT_SUBDIR


def installed_version(folder: Path | None = None) -> str | None:
    """The llama-cpp-python version the converter in ``folder`` came from; None when it is not installed whole."""
    folder = converter_dir() if folder is None else folder
    try:
        marker = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None
    if not (folder / SCRIPT).is_file() or not (folder / "conversion").is_dir() or not (folder / "gguf-py").is_dir():
        return None
    version = marker.get("version") if isinstance(marker, dict) else None
    return version if isinstance(version, str) else None


def converter_problem() -> str | None:
    """A sentence saying how to install the converter when it is not installed whole here; None when it is."""
    if installed_version() is not None:
        return None
    return (
        "GGUF export needs llama.cpp's converter, which is not installed on this machine: run "
        f"`{INSTALL_COMMAND}` in the studio's environment (or point {CONVERTER_VAR} at a folder it installed to)"
    )
