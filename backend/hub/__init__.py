"""Leaving the machine: publishing to the Hub, the model card, the TRL CLI export and Hugging Face Jobs."""
