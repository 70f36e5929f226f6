"""A Hugging Face GPT-2 decode step with a static KV cache (random weights, nothing downloaded).

Graph: one decode step of GPT-2 small (12 layers, 768 wide): per layer a LayerNorm, the QKV
projection, the in-place write of this token's K/V into the static cache, attention over the
cache, the output projection and the MLP — a chain of a few hundred kernel nodes, plus the final
LayerNorm and the LM head. The step writes the same cache slot each time, so replaying it is
idempotent and replay matches eager.
"""

import torch


def setup():
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config()  # GPT-2 small
    model = GPT2LMHeadModel(cfg).cuda().eval()
    batch, prompt, max_len = 4, 32, 128
    try:
        cache = transformers.StaticCache(config=cfg, max_cache_len=max_len)
    except TypeError:  # older transformers want the batch size and device up front
        cache = transformers.StaticCache(
            config=cfg, max_batch_size=batch, max_cache_len=max_len, device="cuda", dtype=torch.float32
        )
    ids = torch.randint(0, cfg.vocab_size, (batch, prompt), device="cuda")
    with torch.no_grad():
        model(input_ids=ids, past_key_values=cache, cache_position=torch.arange(prompt, device="cuda"),
              use_cache=True)
    tok = torch.randint(0, cfg.vocab_size, (batch, 1), device="cuda")
    pos = torch.tensor([prompt], device="cuda")

    @torch.no_grad()
    def step():
        return model(input_ids=tok, past_key_values=cache, cache_position=pos, use_cache=True).logits

    return step
