"""Installing llama.cpp's converter: only the converter, its package, its gguf-py and the license are unpacked from the
sdist, the folder appears whole, a second install of the same version is kept, and the backend finds it."""

from __future__ import annotations

import importlib.util
import io
import tarfile

import pytest

from backend.platform.gguf_converter import (
    CONVERTER_VAR,
    CONVERTER_VERSION,
    converter_dir,
    converter_problem,
    installed_version,
)
from tests.helpers import ROOT

PREFIX = f"llama_cpp_python-{CONVERTER_VERSION}/"
SDIST_FILES = {
    "vendor/llama.cpp/convert_hf_to_gguf.py": "print('converter')\n",
    "vendor/llama.cpp/conversion/__init__.py": "",
    "vendor/llama.cpp/conversion/qwen.py": "# qwen\n",
    "vendor/llama.cpp/gguf-py/gguf/__init__.py": "",
    "vendor/llama.cpp/LICENSE": "MIT\n",
    "vendor/llama.cpp/src/llama-vocab.cpp": "// not kept\n",
    "vendor/llama.cpp/convert_lora_to_gguf.py": "# not kept\n",
    "llama_cpp/llama.py": "# not kept\n",
    "vendor/llama.cpp/conversion/../../escape.py": "# never written\n",
}


@pytest.fixture()
def script():
    spec = importlib.util.spec_from_file_location(
        "install_gguf_converter", ROOT / "scripts" / "install_gguf_converter.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture()
def sdist(tmp_path):
    path = tmp_path / f"llama_cpp_python-{CONVERTER_VERSION}.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        for name, text in SDIST_FILES.items():
            data = text.encode()
            info = tarfile.TarInfo(PREFIX + name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_only_the_converter_files_are_unpacked_and_the_backend_finds_them(script, sdist, tmp_path, monkeypatch):
    target = tmp_path / "tools" / "converter"
    monkeypatch.setenv(CONVERTER_VAR, str(target))
    assert converter_dir() == target and "is not installed on this machine" in converter_problem()

    line = script.install(target, sdist)
    assert line == f"installed llama.cpp's converter (llama-cpp-python {CONVERTER_VERSION}, 5 files) in {target}"
    files = sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file())
    assert files == [
        "LICENSE",
        "conversion/__init__.py",
        "conversion/qwen.py",
        "convert_hf_to_gguf.py",
        "gguf-py/gguf/__init__.py",
        "studio-converter.json",
    ]
    assert not (tmp_path / "escape.py").exists() and not list((tmp_path / "tools").glob(".*"))
    assert installed_version(target) == CONVERTER_VERSION and converter_problem() is None

    again = script.install(target, sdist)
    assert again == f"llama.cpp's converter (llama-cpp-python {CONVERTER_VERSION}) is already installed in {target}"
    (target / "conversion" / "qwen.py").write_text("# changed\n")
    script.install(target, sdist, force=True)
    assert (target / "conversion" / "qwen.py").read_text() == "# qwen\n"


def test_an_sdist_without_the_converter_installs_nothing(script, tmp_path):
    empty = tmp_path / "empty.tar.gz"
    with tarfile.open(empty, "w:gz") as archive:
        info = tarfile.TarInfo(PREFIX + "vendor/llama.cpp/LICENSE")
        archive.addfile(info, io.BytesIO(b""))
    with pytest.raises(SystemExit, match="has no vendor/llama.cpp/convert_hf_to_gguf.py; nothing installed"):
        script.install(tmp_path / "converter", empty)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.tar.gz"]
    assert script.kept_name(PREFIX + "vendor/llama.cpp/conversion/base.py") == "conversion/base.py"
    assert script.kept_name(PREFIX + "vendor/llama.cpp/gguf-py/../x.py") is None
