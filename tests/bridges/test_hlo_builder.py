"""The HLO text builder (hlo.py): text shape, builder checks, and XLA's own parser/verifier."""

import re

import pytest

from nki_workbench._src.bridges.hlo import (
    ELEMENT_TYPES,
    ArrayShape,
    HloBuilder,
    HloBuildError,
    TupleShape,
)

xc = pytest.importorskip("jax._src.lib").xla_client

F = ArrayShape("f32", (128, 512))


def xla_parse(text: str):
    """Parse with XLA's HLO text parser, then convert to StableHLO and verify it."""
    import jax.extend.mlir as jmlir
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir
    module = xc._xla.hlo_module_from_text(text) if hasattr(xc._xla, "hlo_module_from_text") \
        else xc.hlo.hlo_module_from_text(text)
    bytecode = jmlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
    with mlir.make_ir_context():
        return module, str(ir.Module.parse(bytecode))


def test_array_shape_text_and_layout():
    assert F.text == "f32[128,512]{1,0}"
    assert ArrayShape("bf16", (2, 3, 4)).text == "bf16[2,3,4]{2,1,0}"
    assert ArrayShape("pred", ()).text == "pred[]"
    assert TupleShape((F, ArrayShape("s32", (4,)))).text == "(f32[128,512]{1,0}, s32[4]{0})"
    with pytest.raises(HloBuildError, match="unknown XLA element type 'f128'"):
        ArrayShape("f128", (1,))
    with pytest.raises(HloBuildError, match="non-negative ints"):
        ArrayShape("f32", (2, -1))


def test_single_result_custom_call_text_and_xla_round_trip():
    b = HloBuilder("nki_add")
    x, y = b.parameter(F), b.parameter(F)
    cc = b.custom_call("AwsNeuronNkiKernel", [x, y], F, backend_config="e30=",
                       output_to_operand_aliasing={(): (1, ())}, name="custom-call")
    text = b.build(cc).text
    assert text.splitlines()[0] == ("HloModule nki_add, entry_computation_layout="
                                    "{(f32[128,512]{1,0}, f32[128,512]{1,0})->f32[128,512]{1,0}}")
    root = [ln for ln in text.splitlines() if "ROOT" in ln]
    assert root == ['  ROOT custom-call = f32[128,512]{1,0} custom-call(p0, p1), '
                    'custom_call_target="AwsNeuronNkiKernel", '
                    'output_to_operand_aliasing={{}: (1, {})}, backend_config="e30="']
    module, stablehlo = xla_parse(text)
    printed = module.to_string()
    assert 'custom_call_target="AwsNeuronNkiKernel"' in printed
    assert "output_to_operand_aliasing={{}: (1, {})}" in printed
    assert 'backend_config="e30="' in printed
    assert "stablehlo.custom_call @AwsNeuronNkiKernel(%arg0, %arg1)" in stablehlo
    assert "operand_index = 1" in stablehlo


def test_tuple_result_with_gte_and_tuple_root():
    b = HloBuilder("two")
    x = b.parameter(F)
    s = b.parameter(ArrayShape("s32", (4, 4)))
    shape = TupleShape((F, ArrayShape("s32", (4, 4)), ArrayShape("bf16", (8,))))
    cc = b.custom_call("T", [x, s], shape, output_to_operand_aliasing={(0,): (0, ()),
                                                                        (1,): (1, ())})
    g = [b.get_tuple_element(cc, i) for i in range(3)]
    module, stablehlo = xla_parse(b.build(b.tuple(g)).text)
    assert "output_to_operand_aliasing={{0}: (0, {}), {1}: (1, {})}" in module.to_string()
    assert stablehlo.count("stablehlo.get_tuple_element") == 3
    assert re.search(r"output_tuple_indices = \[1\], operand_index = 1", stablehlo)


def test_every_element_type_parses():
    b = HloBuilder("types")
    params = [b.parameter(ArrayShape(t, (2, 3))) for t in ELEMENT_TYPES]
    shape = TupleShape(tuple(p.shape for p in params))
    cc = b.custom_call("T", params, shape, has_side_effect=True)
    module, _ = xla_parse(b.build(cc).text)
    printed = module.to_string()
    for t in ELEMENT_TYPES:
        assert f"{t}[2,3]" in printed
    assert "custom_call_has_side_effect=true" in printed


def test_alias_shape_mismatch_is_caught_by_the_builder_and_by_xla():
    b = HloBuilder("bad")
    x = b.parameter(ArrayShape("f32", (4, 4)))
    with pytest.raises(HloBuildError, match=r"output \[\] \(f32\[128,512\]\{1,0\}\) cannot "
                                            r"alias operand 0 \(f32\[4,4\]\{1,0\}\)"):
        b.custom_call("T", [x], F, output_to_operand_aliasing={(): (0, ())})
    with pytest.raises(HloBuildError, match="names operand 3"):
        b.custom_call("T", [x], F, output_to_operand_aliasing={(): (3, ())})
    with pytest.raises(HloBuildError, match=r"shape index \[2\] does not exist"):
        b.custom_call("T", [x], TupleShape((F,)), output_to_operand_aliasing={(2,): (0, ())})
    # what the builder prevents: XLA's text parser accepts it, the StableHLO verifier does not
    text = ("HloModule bad\n\nENTRY main {\n  p0 = f32[4,4]{1,0} parameter(0)\n"
            '  ROOT c = f32[8]{0} custom-call(p0), custom_call_target="T", '
            "output_to_operand_aliasing={{}: (0, {})}\n}\n")
    with pytest.raises(Exception, match="shapes mismatch in the output_operand_alias"):
        xla_parse(text)


def test_builder_rejects_foreign_operands_bad_names_and_duplicates():
    a, b = HloBuilder("a"), HloBuilder("b")
    pa = a.parameter(F)
    with pytest.raises(HloBuildError, match="not an instruction of module 'b'"):
        b.custom_call("T", [pa], F)
    with pytest.raises(HloBuildError, match="not an HLO identifier"):
        HloBuilder("1bad name")
    with pytest.raises(HloBuildError, match="already used"):
        a.parameter(F, name="p0")
    with pytest.raises(HloBuildError, match="which is not a tuple"):
        a.get_tuple_element(pa, 0)
    with pytest.raises(HloBuildError, match="not an instruction"):
        a.build("p0")


def test_backend_config_is_quoted():
    b = HloBuilder("q")
    x = b.parameter(F)
    cc = b.custom_call("T", [x], F, backend_config='say "hi" \\ there')
    text = b.build(cc).text
    assert 'backend_config="say \\"hi\\" \\\\ there"' in text
    module, _ = xla_parse(text)
    assert 'say \\"hi\\"' in module.to_string()
