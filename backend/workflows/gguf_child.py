"""The child process that runs llama.cpp's own converter (``convert_hf_to_gguf.py``) on a merged model, unedited.

``python -m backend.workflows.gguf_child --converter DIR -- MODEL_DIR --outtype q8_0 --outfile FILE`` puts the
installed converter (``scripts/install_gguf_converter.py``: the converter, its ``conversion`` package and its own
``gguf-py``) first on the path, teaches it two things at run time, and then runs its ``main`` as the script would:

- **The demo tokenizer's pre-tokenizer.** The converter names a byte-level BPE's pre-tokenizer (``tokenizer.ggml.pre``,
  which tells llama.cpp how to split text before the merges) by hashing the token ids of a fixed text and looking the
  hash up in its table; the demo models' tokenizer (``backend/models/demo.py``) is not in it, so it stops with "BPE
  pre-tokenizer was not recognized". Its hash is registered here (:data:`REGISTERED_PRE_TOKENIZERS`) under ``smollm``:
  llama.cpp splits ``smollm`` text (and ``starcoder``'s, ``refact``'s) with two expressions in turn, every digit on
  its own and then GPT-2's expression, which is exactly the demo's ``Digits(individual_digits=True)`` followed by
  ``ByteLevel``'s GPT-2 expression; ``smollm`` also keeps spaces as they are on decoding, as the demo tokenizer does.
  Measured 2026-12-06 on the 11,121 distinct texts of the shipped datasets (every string, every rendered chat):
  llama.cpp itself (``benchmarks/gguf_export.py``) gives the demo tokenizer's ids for all of them under ``smollm``,
  and under ``qwen2``, ``gpt-2`` and ``llama-bpe`` too, because the demo's 1,024-token vocabulary has no merge across
  the places where those split differently; split by split (the tokenizers library running llama.cpp's expressions,
  once), ``smollm`` cuts all of them as the demo tokenizer does, ``qwen2`` 58%, ``llama-bpe`` 4% and ``gpt-2`` 3%.
  So ``smollm`` is the one that stays right for any text, and for any other vocabulary learned with this splitting.
  Declaring a pre-tokenizer the converter knows cannot work for this tokenizer: the hash is taken over its own ids, no
  table entry shares them, and the demo tokenizer cannot change (``builtin:tiny-qwen3-arith`` ships trained on it).
- **No sentencepiece for a byte-level model.** For Qwen models the converter first tries a SentencePiece vocabulary,
  and imports ``sentencepiece`` before it looks for ``tokenizer.model``; a byte-level BPE folder has no such file, so
  the child answers that first (the ``FileNotFoundError`` the converter itself raises after the import, which makes it
  read the BPE vocabulary instead). A model that has a ``tokenizer.model`` still needs ``sentencepiece`` installed.

Only the standard library is imported at module level: the converter brings torch, numpy and transformers itself.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import runpy
import signal
import sys
from pathlib import Path
from typing import Any

# The converter's hash of a tokenizer (sha256 of the ids it gives the converter's fixed text) -> the llama.cpp
# pre-tokenizer whose splitting matches it. The demo models' tokenizer, both builtin:tiny-qwen3 and
# builtin:tiny-qwen3-arith (and every job trained on them, which keeps the base's tokenizer).
REGISTERED_PRE_TOKENIZERS = {
    "422e0ebecbebb9bb1fd323915fb4ef5960df89acbe2b61ab1ff3c134d276b27e": "smollm",
}
CONVERTER_SCRIPT = "convert_hf_to_gguf.py"


class _RecordingTokenizer:
    """A tokenizer that hands everything to the real one and keeps what ``encode`` answered."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self.encoded: list[Any] = []

    def encode(self, *args: Any, **kwargs: Any) -> Any:
        ids = self._tokenizer.encode(*args, **kwargs)
        self.encoded.append(ids)
        return ids

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)


def converter_hash(ids: Any) -> str:
    """The converter's hash of a tokenizer: sha256 of the text of the ids it encoded its fixed text to."""
    return hashlib.sha256(str(ids).encode()).hexdigest()


def teach(base: Any, pre_tokenizer: str | None = None) -> None:
    """Register the known tokenizers' pre-tokenizers (and ``pre_tokenizer`` for any other it does not know) and the
    sentencepiece order with the converter's ``TextModel`` (``conversion.base``), leaving its code as it is."""
    text_model = base.TextModel
    find_pre = text_model.get_vocab_base_pre
    sentencepiece_vocab = text_model._create_vocab_sentencepiece

    def get_vocab_base_pre(self: Any, tokenizer: Any) -> str:
        recording = _RecordingTokenizer(tokenizer)
        try:
            return find_pre(self, recording)
        except NotImplementedError:
            known = [REGISTERED_PRE_TOKENIZERS.get(converter_hash(ids)) for ids in recording.encoded[:1]]
            answer = pre_tokenizer or (known[0] if known else None)
            if not answer:
                raise
            base.logger.info("tokenizer.ggml.pre: %r (registered by Post-Training Studio)", answer)
            return answer

    def create_vocab_sentencepiece(self: Any) -> Any:
        if not (Path(self.dir_model) / "tokenizer.model").is_file():
            raise FileNotFoundError(f"File not found: {Path(self.dir_model) / 'tokenizer.model'}")
        return sentencepiece_vocab(self)

    text_model.get_vocab_base_pre = get_vocab_base_pre
    text_model._create_vocab_sentencepiece = create_vocab_sentencepiece


def run_converter(converter: Path, arguments: list[str], pre_tokenizer: str | None = None) -> None:
    """Run the converter installed in ``converter`` with ``arguments``, as ``python convert_hf_to_gguf.py`` would,
    its own ``gguf-py`` first on the path (the version it was written for, not whatever ``gguf`` is installed)."""
    sys.path[:0] = [str(converter), str(converter / "gguf-py")]
    import conversion.base  # type: ignore[import-not-found]  # the installed converter's package

    teach(conversion.base, pre_tokenizer)
    sys.argv = [str(converter / CONVERTER_SCRIPT), *arguments]
    runpy.run_path(str(converter / CONVERTER_SCRIPT), run_name="__main__")


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this child when the process that started it dies: it runs in a session of its own (so a
    time limit can stop its whole group), out of reach of a signal to the export job's group, and a killed export
    job must not leave a converter writing on."""
    parent = os.getppid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the parent's time limit still stops it
        return
    if os.getppid() != parent:  # the parent died before the request took: nobody would signal us
        os._exit(1)


def main(argv: list[str] | None = None) -> int:
    """``python -m backend.workflows.gguf_child --converter DIR [--pre NAME] -- ARGS...``: the converter's exit status.

    ``--pre NAME`` answers NAME for a tokenizer the converter does not know (the benchmark tries llama.cpp's
    pre-tokenizers with it); without it only :data:`REGISTERED_PRE_TOKENIZERS` are answered.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    own, arguments = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    options = dict(zip(own[::2], own[1::2]))
    if len(own) % 2 or "--converter" not in options or set(options) - {"--converter", "--pre"} or not arguments:
        print(
            f"usage: python -m {__spec__.name if __spec__ else 'gguf_child'} --converter DIR [--pre NAME] -- "
            "CONVERTER_ARGS...",
            file=sys.stderr,
        )
        return 2
    die_with_parent()
    try:
        run_converter(Path(options["--converter"]), arguments, options.get("--pre"))
    except SystemExit as exc:  # the converter's main ends with sys.exit on a bad argument
        return exc.code if isinstance(exc.code, int) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
