"""The interpreter's table of executor-special instructions.

``SPECIAL[opcode] = factory(program, inst) -> run(state)``: instructions the numpy interpreter
runs by reaching into its own memory (indirect writes, collectives, several destinations,
engine registers) instead of through a value rule. What each computes still lives in
``semantics/``; a factory only moves memory. The interpreter fills it with its own entries,
``sim/isa_exec.py`` with the nki.isa ones and ``collectives/sim.py`` with the collectives; the
compiled lowering reads it to know which opcodes it must not lower from a value rule.
"""

from __future__ import annotations

__all__ = ["SPECIAL"]

SPECIAL: dict = {}
