"""Pretrained checkpoints: reading GGUF files and fetching the default model (SmolLM2-135M-Instruct)."""

from longhorizon.lm.checkpoints.fetch import smollm2_path
from longhorizon.lm.checkpoints.gguf_file import CheckpointSpec, GGUFCheckpoint, read_gguf

__all__ = ["CheckpointSpec", "GGUFCheckpoint", "read_gguf", "smollm2_path"]
