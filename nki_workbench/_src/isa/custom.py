"""``builtin_custom_op``: calls into pre-built GpSimd libraries.

``builtin_custom_op``: a call into a pre-built GpSimd micro-kernel library. The library
cannot run here; a Python reference registered with :func:`register_custom_op` stands in
for it in simulation.
"""

from __future__ import annotations

from . import common as K

__all__ = ["builtin_custom_op", "register_custom_op", "CUSTOM_OPS"]

CUSTOM_OPS: dict = {}  # function_name -> Python reference fn(*src_arrays) -> dst arrays


def register_custom_op(function_name: str, reference):
    """Register a Python reference for ``builtin_custom_op(function_name, ...)``.

    Args:
        function_name: the micro-kernel's name as passed to ``builtin_custom_op``.
        reference: ``fn(*srcs) -> dst or tuple of dsts``: numpy arrays in, numpy arrays shaped
            like the ``dsts`` out.
    """
    if not callable(reference):
        raise TypeError(f"register_custom_op: reference for {function_name!r} must be callable")
    CUSTOM_OPS[str(function_name)] = reference


def builtin_custom_op(function_name, lib_file_name, ulib_to_ucode_version, ulib_to_isa_version,
                      srcs, dsts, **kwargs):
    """Call a pre-built GpSimd library function on ``srcs``, writing ``dsts``.

    Args:
        function_name: function in the library.
        lib_file_name: library file.
        ulib_to_ucode_version: library/ucode version string.
        ulib_to_isa_version: library/ISA version string.
        srcs: input tiles.
        dsts: output tiles (written in place).
        **kwargs: other NKI keyword arguments (accepted and ignored).

    Raises:
        NkiError: ``wb_custom_op_not_simulatable`` unless a reference was registered with
            ``nisa.register_custom_op``.
    """
    api = "nisa.builtin_custom_op"
    name = str(function_name)
    if name not in CUSTOM_OPS:
        raise K.err("wb_custom_op_not_simulatable",
                    f"{api}: '{name}' from '{lib_file_name}' is a GpSimd micro-kernel binary "
                    "that cannot be simulated", "register a Python reference first: "
                    f"nisa.register_custom_op({name!r}, fn) where fn(*srcs) returns the dsts")
    srcs, dsts = list(srcs), list(dsts)
    for t in srcs + dsts:
        if not K.is_tile(t):
            raise K.err(None, f"{api}: srcs and dsts must be tensors, got {type(t).__name__}")
    if not dsts:
        raise K.err(None, f"{api}: dsts is empty")
    K.emit("builtin_custom_op", dsts, srcs, "gpsimd", api=api,
           attrs={"function_name": name, "lib_file_name": str(lib_file_name),
                  "ulib_to_ucode_version": str(ulib_to_ucode_version),
                  "ulib_to_isa_version": str(ulib_to_isa_version),
                  "dtypes": tuple(t.decl.dtype for t in dsts)})
