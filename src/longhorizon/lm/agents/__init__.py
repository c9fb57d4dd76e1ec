"""Agentic, multi-turn RL for language-model policies: tool environments, rollouts, credit, distillation."""
