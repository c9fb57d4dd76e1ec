"""longhorizon: reinforcement learning over long horizons and at scale, in JAX."""

__version__ = "0.1.0"
