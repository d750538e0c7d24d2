"""``nki.isa.constants``: the ISA enums (``from neuronxcc.nki.isa.constants import oob_mode``)."""

from ..._src.isa.enums import dge_mode, engine, fp32, nc_version, oob_mode, reduce_cmd  # noqa: F401

__all__ = ["engine", "reduce_cmd", "dge_mode", "oob_mode", "nc_version", "fp32"]
