"""`longhorizon horizon` command (filled in by the tabular toolkit)."""


def register(app) -> None:  # noqa: D103 - placeholder until the tabular toolkit lands
    del app
