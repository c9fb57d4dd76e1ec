"""Offline goal-conditioned RL on OGBench-format data: datasets (made locally), samplers, agents, evaluation."""
