#!/usr/bin/env python3
"""Bytes of weights one decode step reads, per rank: every parameter of the model's config (bf16)
but the embedding table (a step reads one row a token); the LM head and the split layers divided by
the tensor-parallel size. Usage: decode_profile_weights.py MODEL_DIR|builtin TP"""
import json
import sys


def weight_bytes(c, tp, dtype_bytes=2):
    h, i, L = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    hd = c.get("head_dim") or h // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    kv_rank = max(kv // tp, hd)  # KV heads replicated when fewer than the ranks
    per_layer = h * q // tp + 2 * h * kv_rank + q * h // tp + 3 * h * i // tp + 2 * h
    return dtype_bytes * (L * per_layer + h + c["vocab_size"] * h // tp)


def main():
    model, tp = sys.argv[1], int(sys.argv[2])
    if model == "builtin":  # TinyLlama-1.1B (src/model/llama/config.cc)
        c = {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32,
             "num_key_value_heads": 4, "head_dim": 64, "vocab_size": 32000}
    else:
        c = json.load(open(f"{model}/config.json"))
    print(weight_bytes(c, tp))


if __name__ == "__main__":
    main()
