"""tools/hf_compare.py's token verdict (the part that needs no torch): identical to the f32 reference,
else to transformers in the model dtype, else a failure."""
import importlib.util
import os

_SPEC = importlib.util.spec_from_file_location(
    "hf_compare", os.path.join(os.path.dirname(__file__), "..", "..", "tools", "hf_compare.py"))
hf_compare = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(hf_compare)


def test_identical_to_reference_wins():
    peer = {"opfuse_mismatches": [{"step": 3}]}
    assert hf_compare.tokens_identical_to([], peer, "f32", "bf16") == "transformers f32"
    assert hf_compare.tokens_identical_to([], None, "f32", "bf16") == "transformers f32"


def test_identical_to_same_precision_peer():
    mism = [{"step": 13}, {"step": 21}]
    assert hf_compare.tokens_identical_to(mism, {"opfuse_mismatches": []}, "f32", "bf16") == "transformers bf16"


def test_neither_fails():
    mism = [{"step": 13}]
    assert hf_compare.tokens_identical_to(mism, {"opfuse_mismatches": [{"step": 13}]}, "f32", "bf16") is None
    assert hf_compare.tokens_identical_to(mism, None, "f32", "bf16") is None
