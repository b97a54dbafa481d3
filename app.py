"""Post-Training Studio: assembles the tabs and launches the Gradio app; nothing else."""

from __future__ import annotations

import os

import gradio as gr

from backend.api import StudioAPI
from components import train


def build_app(api: StudioAPI) -> gr.Blocks:
    with gr.Blocks(title="Post-Training Studio") as demo:
        gr.Markdown("# Post-Training Studio\nPost-train an open LLM with SFT, LoRA and 4-bit loading.")
        with gr.Tab("Train"):
            train.build(api)
    return demo


def main() -> None:
    api = StudioAPI(scheduler="thread")
    demo = build_app(api)
    demo.queue(default_concurrency_limit=8).launch(
        server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
        theme=gr.themes.Soft(),
    )


if __name__ == "__main__":
    main()
