"""The host engine: Python environments (gymnasium) stepped on the host, ``act`` and ``learn`` jitted.

It is the fused engine's chunk program run over an environment whose ``reset``/``step`` call the
host (:class:`longhorizon.envs.gymnasium.GymnasiumVecEnv`): within a chunk, each step of the scanned
rollout hands the actions of every seed's env group to the host in one call and gets the next
observations back, while acting, GAE and the minibatch updates stay compiled. Nothing in the
algorithm modules changes; seeds are vmapped exactly as in the fused engine, one env group each.
The runner picks this engine for such environments; ``--engine host`` names it explicitly.
"""

from __future__ import annotations

from longhorizon.engine.fused import FusedEngine
from longhorizon.envs.gymnasium import close_groups


class HostEngine(FusedEngine):
    """:class:`~longhorizon.engine.fused.FusedEngine` over a host-stepped environment."""

    name = "host"

    def close(self) -> None:
        """Release the environments this process stepped (the runner calls it when a run ends)."""
        close_groups(self.env)
