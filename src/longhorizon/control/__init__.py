"""Continuous control over long horizons: world models, action chunks, safe multi-agent control (docs/control.md)."""
