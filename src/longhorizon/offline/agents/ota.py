r"""OTA: Option-aware Temporally Abstracted value for offline GCRL (Ahn, Park, Lee et al. 2025).

HIQL's high-level policy is trained with advantages from a value over *options* of ``n`` steps, so
that the value is in units of options rather than steps: consecutive subgoals differ by more than
the value's estimation noise, and the advantage signs stay right far from the goal. Everything else
(the one-step value V, its representation phi, the low-level policy, acting) is HIQL's
(:mod:`longhorizon.offline.agents.hiql`); the one change is a second value :math:`V^h` with the target

.. math::
    y = r^h + \gamma\, m^h\, \bar V^h(s_\tau, g), \qquad \tau = \min(t + n,\ t_g,\ T + 1),

with :math:`t_g` the step at which the goal is reached along the trajectory, :math:`T` the trajectory's
last transition, :math:`r^h = \mathbb 1(s_t = g) - 1` and :math:`m^h = 1 - \mathbb 1(s_t = g)`: ONE
discount per option, not :math:`\gamma^n`. With ``n = 1`` the target is HIQL's (``tau = t + 1``).
The high-level AWR uses :math:`A^h = V^h(s_{t+k}, g) - V^h(s_t, g)`.
"""

from __future__ import annotations

import dataclasses
import functools

from longhorizon.offline.agents import hiql
from longhorizon.offline.agents.hiql import Batch, act, agent_params, learn, values  # noqa: F401  (OTA is HIQL here)

NAME = "ota"


@dataclasses.dataclass(frozen=True)
class Config(hiql.Config):
    option_length: int = 5  # n, steps per option of the high-level value

    def validate(self) -> None:
        super().validate()
        self._check_positive("option_length")


init = functools.partial(hiql.init, high_value=True)


def sample(key, data, config: Config) -> Batch:
    return hiql.sample(key, data, config, option_length=config.option_length)
