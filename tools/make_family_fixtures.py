#!/usr/bin/env python3
"""Writes the model-family fixtures under tests/data/ with transformers itself.

Design note: opfuse's config reader and rope tables are checked against what transformers writes
and computes, not against our reading of its source. So this script (run once, its output
committed; nothing here runs in CI) asks transformers for every file the tests compare with:

  tests/data/configs/<name>.v4.json, <name>.v5.json
      config.json as transformers 4.x (`rope_theta` + `rope_scaling`, `torch_dtype`) and 5.x
      (`rope_parameters`, `dtype`) save the same model config, for every family and rope type,
      written by each version's own `save_pretrained`.
  tests/data/configs/rope_expected.json
      transformers 5's own inverse frequencies and attention scaling for each rope config
      (ROPE_INIT_FUNCTIONS, as LlamaRotaryEmbedding calls them), and cos / sin at a few positions
      from the rotary module's forward.
  tests/data/families/<family>/{config.json, config.v4.json, model.safetensors, expected.json}
      a tiny random-weight model per family saved by transformers 5 (`save_pretrained`), every
      weight perturbed (norm weights around 1, biases nonzero) so a missing bias or norm shows, and
      transformers' greedy tokens and f32 logits per step with its KV cache (eager attention).
      config.v4.json is the same config as transformers 4.x writes it.

  --gpu-models DIR (instead): one larger bf16 random-weight model per family under DIR/<family>,
      saved by transformers 5, for tools/family_gpu_check.sh (hf_compare on the GPU); not committed.

Usage (PyPI has both versions; neither needs a GPU):
  python3 -m venv /tmp/v5 && /tmp/v5/bin/pip install "transformers>=5" torch safetensors
  python3 -m venv /tmp/v4 && /tmp/v4/bin/pip install "transformers>=4.57,<5"
  /tmp/v5/bin/python tools/make_family_fixtures.py --v4-python /tmp/v4/bin/python
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from hf_compare import hf_greedy  # noqa: E402  (transformers' own greedy loop with its KV cache)

# A tiny shape every family shares: GQA (4 heads, 2 kv heads), head_dim 16, two layers.
BASE = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=160, max_position_embeddings=256, rms_norm_eps=1e-5)

# name -> (model_type, extra config kwargs, rope dict or None, rope_theta)
ROPE_CASES = {
    "llama_default": ("llama", {}, None, 10000.0),
    "llama_linear": ("llama", {}, {"rope_type": "linear", "factor": 4.0}, 10000.0),
    "llama_dynamic": ("llama", {}, {"rope_type": "dynamic", "factor": 2.0}, 10000.0),
    "llama_llama3": ("llama", {"head_dim": 128, "num_attention_heads": 4, "hidden_size": 256},
                     {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 64}, 500000.0),
    "llama_yarn": ("llama", {"head_dim": 128, "num_attention_heads": 4, "hidden_size": 256},
                   {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}, 1000000.0),
    "llama_yarn_mscale": ("llama", {"head_dim": 64, "hidden_size": 256},
                          {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 32, "mscale": 0.707,
                           "mscale_all_dim": 1.0, "beta_fast": 16, "beta_slow": 2}, 10000.0),
    "llama_yarn_attn": ("llama", {}, {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 128,
                                      "attention_factor": 1.25, "truncate": False}, 50000.0),
    "qwen2_yarn": ("qwen2", {}, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}, 1000000.0),
    "mistral_default": ("mistral", {"sliding_window": 4096}, None, 1000000.0),
    "qwen3_default": ("qwen3", {"head_dim": 32}, None, 1000000.0),
}

# family fixture -> (model_type, extra kwargs, rope, theta, tied)
FAMILIES = {
    "llama": ("llama", {"attention_bias": True, "mlp_bias": True},
              {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 32}, 500000.0, False),
    "mistral": ("mistral", {"sliding_window": 4096}, None, 1000000.0, False),
    "qwen2": ("qwen2", {}, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}, 1000000.0, True),
    "qwen3": ("qwen3", {"head_dim": 32}, None, 1000000.0, True),
    # Sliding windows shorter than the fixture's 17 positions: every layer (Mistral), the layers
    # from max_window_layers on (Qwen2).
    "mistral_window": ("mistral", {"sliding_window": 5}, None, 10000.0, False),
    "qwen2_window": ("qwen2", {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1}, None,
                     10000.0, False),
}

V4_WRITER = r"""
import json, sys
import transformers
from transformers import AutoConfig
spec = json.loads(sys.argv[1])
cls = transformers.CONFIG_MAPPING[spec["model_type"]]
kw = dict(spec["kwargs"])
kw["rope_theta"] = spec["theta"]
if spec["rope"] is not None:
    kw["rope_scaling"] = spec["rope"]
c = cls(**kw)
if spec.get("dtype"):
    c.torch_dtype = spec["dtype"]
c.save_pretrained(spec["out"])
print(transformers.__version__)
"""


def v5_config(model_type, kwargs, rope, theta, dtype=None):
    import transformers
    cls = transformers.CONFIG_MAPPING[model_type]
    rp = dict(rope) if rope else {"rope_type": "default"}
    rp["rope_theta"] = theta
    c = cls(**kwargs, rope_parameters=rp)
    if dtype:
        c.dtype = dtype
    return c


def write_config_pair(args, name, model_type, kwargs, rope, theta, out_dir, dtype=None, v5_name=None, v4_name=None):
    """config.json of transformers 5 and 4 for the same model, as <name>.v5.json / <name>.v4.json."""
    c = v5_config(model_type, kwargs, rope, theta, dtype)
    with tempfile.TemporaryDirectory() as t:
        c.save_pretrained(t)
        with open(os.path.join(t, "config.json")) as f:
            v5 = f.read()
        spec = {"model_type": model_type, "kwargs": kwargs, "rope": rope, "theta": theta, "out": t + "/v4", "dtype": dtype}
        subprocess.run([args.v4_python, "-c", V4_WRITER, json.dumps(spec)], check=True, capture_output=True)
        with open(os.path.join(t, "v4", "config.json")) as f:
            v4 = f.read()
    with open(os.path.join(out_dir, v5_name or f"{name}.v5.json"), "w") as f:
        f.write(v5)
    with open(os.path.join(out_dir, v4_name or f"{name}.v4.json"), "w") as f:
        f.write(v4)
    assert ("rope_parameters" in v5) and ("rope_parameters" not in v4), name
    return c


def rope_expected(config, positions):
    import torch
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
    rtype = config.rope_parameters.get("rope_type", "default")
    rot = LlamaRotaryEmbedding(config)  # the module every family's rotary embedding copies
    if rtype == "default":
        inv = rot.inv_freq.clone()
        scale = 1.0
    else:
        inv, scale = ROPE_INIT_FUNCTIONS[rtype](config, "cpu")
    x = torch.zeros(1, 1, dtype=torch.float32)
    pos = torch.tensor([positions])
    cos, sin = rot(x, pos)
    return {"inv_freq": inv.float().tolist(), "attention_scaling": float(scale), "positions": positions,
            "cos": cos[0].tolist(), "sin": sin[0].tolist()}


def perturb(model, seed):
    import torch
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=g))


# --gpu-models: shapes of real small models (Llama-3.2-1B-like head_dim 64; Qwen3-0.6B-like q_dim 2048 >
# hidden), few layers so that hf_compare stays quick.
GPU_BASE = dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=4, num_attention_heads=16,
                num_key_value_heads=4, vocab_size=32000, max_position_embeddings=4096, rms_norm_eps=1e-5,
                bos_token_id=1, eos_token_id=2)
GPU_FAMILIES = {
    "llama": ("llama", {"tie_word_embeddings": True},
              {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 512}, 500000.0),
    "mistral": ("mistral", {"sliding_window": 4096}, None, 1000000.0),
    "qwen2": ("qwen2", {"tie_word_embeddings": True},
              {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}, 1000000.0),
    "qwen3": ("qwen3", {"head_dim": 128, "tie_word_embeddings": True}, None, 1000000.0),
    # Sliding windows shorter than the context family_gpu_check.sh runs (a 90-token prompt, so the
    # prefill takes the tensor-core kernel, then decode): every layer (Mistral), layers 2.. (Qwen2).
    "mistral_window": ("mistral", {"sliding_window": 32}, None, 1000000.0),
    "qwen2_window": ("qwen2", {"use_sliding_window": True, "sliding_window": 24, "max_window_layers": 2},
                     None, 1000000.0),
}


def gpu_models(out):
    import torch
    from transformers import AutoModelForCausalLM
    for fam, (mt, extra, rp, theta) in GPU_FAMILIES.items():
        c = v5_config(mt, dict(GPU_BASE, **extra), rp, theta)
        torch.manual_seed(len(fam))
        model = AutoModelForCausalLM.from_config(c, dtype=torch.float32)
        g = torch.Generator().manual_seed(7)
        with torch.no_grad():  # norms and biases away from 1 / 0, so leaving one out shows
            for name, p in model.named_parameters():
                if name.endswith("norm.weight"):
                    p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
                elif name.endswith(".bias"):
                    p.copy_(0.1 * torch.randn(p.shape, generator=g))
        model.to(torch.bfloat16).save_pretrained(os.path.join(out, fam))
        print(f"gpu model {fam}: {sum(p.numel() for p in model.parameters()) / 1e6:.0f} M parameters")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--v4-python", help="a python with transformers 4.x (writes the 4.x configs)")
    ap.add_argument("--gpu-models", metavar="DIR", help="write larger bf16 models per family to DIR instead")
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data"))
    ap.add_argument("--new-tokens", type=int, default=8)
    args = ap.parse_args()
    if args.gpu_models:
        return gpu_models(args.gpu_models)
    if not args.v4_python:
        ap.error("--v4-python is required to write the fixtures")
    import torch
    import transformers
    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    made_by = f"tools/make_family_fixtures.py (transformers {transformers.__version__}, torch {torch.__version__})"

    cfg_dir = os.path.join(args.out, "configs")
    os.makedirs(cfg_dir, exist_ok=True)
    positions = [0, 1, 7, 63, 64, 200, 255]
    rope = {"made_by": made_by, "cases": {}}
    for name, (mt, extra, rp, theta) in ROPE_CASES.items():
        kw = dict(BASE, **extra)
        c = write_config_pair(args, name, mt, kw, rp, theta, cfg_dir)
        rope["cases"][name] = dict(rope_expected(c, positions), config=f"{name}.v5.json")
        print(f"config {name}: attention_scaling {rope['cases'][name]['attention_scaling']:.6f}")
    with open(os.path.join(cfg_dir, "rope_expected.json"), "w") as f:
        json.dump(rope, f)

    prompt = [1, 17, 93, 140, 5, 66, 121, 30, 8]
    for fam, (mt, extra, rp, theta, tied) in FAMILIES.items():
        d = os.path.join(args.out, "families", fam)
        os.makedirs(d, exist_ok=True)
        kw = dict(BASE, tie_word_embeddings=tied, bos_token_id=1, eos_token_id=2, **extra)
        c = v5_config(mt, kw, rp, theta)
        c._attn_implementation = "eager"
        model = AutoModelForCausalLM.from_config(c, dtype=torch.float32, attn_implementation="eager").eval()
        perturb(model, seed=len(fam) * 1000 + sum(map(ord, fam)))
        model.save_pretrained(d)  # config.json (5.x keys, dtype float32) + model.safetensors
        write_config_pair(args, fam, mt, kw, rp, theta, d, dtype="float32", v5_name="config.v5.json",
                          v4_name="config.v4.json")
        os.remove(os.path.join(d, "config.v5.json"))  # config.json is the 5.x one save_pretrained wrote
        for junk in ("generation_config.json",):
            p = os.path.join(d, junk)
            if os.path.exists(p):
                os.remove(p)
        toks, logits = hf_greedy(model, prompt, args.new_tokens, "cpu")
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump({"made_by": made_by + ", f32, CPU, eager attention, greedy with KV cache",
                       "prompt": prompt, "tokens": toks, "logits": logits}, f)
        print(f"family {fam}: tokens {toks}")


if __name__ == "__main__":
    sys.exit(main())
