# Post-Training Studio on your own NVIDIA GPU (or as a Docker Space).
#   docker build -t post-training-studio .
#   docker run --gpus all -p 7860:7860 -v studio-data:/home/user/data post-training-studio
# A first version: the Spaces packaging issue finishes it (hadolint, OAuth settings).
FROM nvidia/cuda:12.9.1-cudnn-runtime-ubuntu24.04

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1

RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv python3-dev build-essential git \
    && rm -rf /var/lib/apt/lists/* \
    && (userdel -r ubuntu 2>/dev/null || true) \
    && useradd -m -u 1000 user \
    && python3 -m venv /opt/venv \
    && chown -R user /opt/venv

# Docker Spaces run the image as uid 1000 with its HOME; the app listens on 7860.
USER user
ENV HOME=/home/user \
    PATH=/home/user/.local/bin:/opt/venv/bin:$PATH \
    STUDIO_DATA_DIR=/home/user/data \
    GRADIO_SERVER_NAME=0.0.0.0 \
    GRADIO_SERVER_PORT=7860
WORKDIR /home/user/app

COPY --chown=user requirements.txt requirements-gpu.txt ./
RUN pip install -r requirements-gpu.txt

COPY --chown=user . .
EXPOSE 7860
CMD ["python", "app.py"]
