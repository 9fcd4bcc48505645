"""``python -m rafka.chaos_tests run ...`` — the same commands as ``rafka chaos``."""

from .cli import chaos

if __name__ == "__main__":
    chaos(prog_name="python -m rafka.chaos_tests")
