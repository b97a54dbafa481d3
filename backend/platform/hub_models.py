"""A Hub model's weights, sized from the Hub's metadata before anything is downloaded: the files a transformers load
would fetch (safetensors when the repo has them, else PyTorch's ``.bin`` files), added up from ``model_info``'s file
list (``files_metadata``: each file's size)."""

from __future__ import annotations

from backend.core.hub_names import hub_endpoint

# What ``from_pretrained`` downloads, by preference: safetensors first; the pickled formats only where there are none.
SAFETENSORS = (".safetensors",)
PICKLED = (".bin", ".pt", ".pth")
LOOKUP_TIMEOUT_S = 10.0


class ModelNotOnHub(LookupError):
    """The Hub answered that there is no such model (or no such revision, or none this token may read)."""


class HubUnanswered(ConnectionError):
    """The Hub could not be asked, or answered with an error of its own; the message says which, briefly."""


def weights_bytes(repo_id: str, revision: str | None = None, token: str | bool | None = None) -> int | None:
    """The size in bytes of the weight files ``repo_id`` holds at ``revision``, read from the Hub's metadata (no
    file is downloaded); None when it holds none. ``token``: a user's token, or False for none (None would take the
    machine's own). Raises ModelNotOnHub, or HubUnanswered when the Hub cannot be reached or fails."""
    import httpx2
    from huggingface_hub import HfApi
    from huggingface_hub.errors import (
        HfHubHTTPError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        info = HfApi(endpoint=hub_endpoint()).model_info(
            repo_id, revision=revision, files_metadata=True, token=token, timeout=LOOKUP_TIMEOUT_S
        )
    except (RepositoryNotFoundError, RevisionNotFoundError):
        raise ModelNotOnHub(repo_id) from None
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        if status in (401, 404):
            raise ModelNotOnHub(repo_id) from None
        raise HubUnanswered(f"HTTP {status}") from None
    except OfflineModeIsEnabled:
        raise HubUnanswered("offline mode is on (HF_HUB_OFFLINE)") from None
    except (httpx2.TransportError, OSError) as exc:
        raise HubUnanswered(type(exc).__name__) from None
    return weight_total([(sibling.rfilename, sibling.size) for sibling in info.siblings or ()])


def weight_total(files: list[tuple[str, int | None]]) -> int | None:
    """The weights' bytes among ``(name, size)`` files: the safetensors files', else the pickled ones'; None when
    there are neither (a size the Hub left out counts 0).

    >>> weight_total([("model.safetensors", 500), ("pytorch_model.bin", 900), ("config.json", 1)])
    500
    >>> weight_total([("pytorch_model.bin", 900), ("README.md", 4)]), weight_total([("config.json", 1)])
    (900, None)
    """
    for suffixes in (SAFETENSORS, PICKLED):
        sizes = [size or 0 for name, size in files if name.endswith(suffixes)]
        if sizes:
            return sum(sizes)
    return None
