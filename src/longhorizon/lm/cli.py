"""`longhorizon lm` commands (filled in by the language-model toolkit)."""


def register(app) -> None:  # noqa: D103 - placeholder until the language-model toolkit lands
    del app
