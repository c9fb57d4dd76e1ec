"""A TRL-style tool environment (`environment_factory` convention): `reset(**row)` plus public tool methods.

    longhorizon lm agent --env examples/agents/calculator.py:Calculator --tasks examples/agents/tasks.jsonl --out runs/calc
"""


class Calculator:
    def reset(self, answer: str = "", **_columns) -> str | None:
        self.answer_key, self.reward, self.done = str(answer), 0.0, False
        return None  # nothing to add to the first message

    def multiply(self, a: float, b: float) -> str:
        """Multiply two numbers.

        Args:
            a: the first factor.
            b: the second factor.
        """
        return str(float(a) * float(b))

    def add(self, a: float, b: float) -> str:
        """Add two numbers.

        Args:
            a: the first term.
            b: the second term.
        """
        return str(float(a) + float(b))

    def answer(self, value: str) -> str:
        """Give the final answer; this ends the episode.

        Args:
            value: the answer.
        """
        self.reward = float(str(value).strip().rstrip("0").rstrip(".") == self.answer_key)
        self.done = True
        return "recorded"
