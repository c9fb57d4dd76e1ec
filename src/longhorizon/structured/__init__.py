"""Structured decision making: combinatorial actions through MILPs (SEQUOIA), graph RL with LP layers
(E-AMoD) and shared-policy multi-agent learning on networked dilemmas."""
