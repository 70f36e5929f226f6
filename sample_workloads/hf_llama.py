"""A Hugging Face Llama forward of one token per sequence (random weights, nothing downloaded).

``transformers``' ``LlamaForCausalLM`` from a small ``LlamaConfig`` (hidden 512, 4 layers, 8 heads,
4 KV heads; the other fields the config's defaults), in eval mode, cast to ``-- --dtype`` (bf16 by
default, or fp32). The step is what a new user writes: ``m(input_ids, position_ids=...,
use_cache=False)`` under ``no_grad`` for a batch of 4 one-token sequences, the whole model's
forward (embedding, RMSNorms, rotary embedding, SDPA attention, SwiGLU MLPs, LM head) with no KV
cache: a decode step's shape without its cache.

Graph: about 50 kernels a layer in one chain (the RMSNorms and the rotary embedding are several
small kernels each), then the final norm and the LM head.
"""

import argparse
import sys

import torch


def setup():
    from transformers import LlamaConfig, LlamaForCausalLM

    p = argparse.ArgumentParser()
    p.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    p.add_argument("--batch", type=int, default=4)
    a = p.parse_args(sys.argv[1:])
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4)
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    m = LlamaForCausalLM(cfg).to("cuda", dtype).eval()
    ids = torch.randint(0, cfg.vocab_size, (a.batch, 1), device="cuda")
    pos = torch.full((a.batch, 1), 7, dtype=torch.long, device="cuda")

    @torch.no_grad()
    def step():
        return m(ids, position_ids=pos, use_cache=False).logits

    return step
