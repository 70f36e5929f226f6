"""Hugging Face `generate` with a static cache on a small Llama with random weights (no network):
transformers compiles the decoding step (reduce-overhead: CUDA graph trees). Every kernel of the
decode graph comes from a line of modeling_llama.py and an nn.Module of the model."""
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import _graphcount

if __name__ == "__main__":
    _graphcount.install()
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(cfg).to("cuda", torch.float16).eval()
    ids = torch.randint(0, 256, (1, 8), device="cuda")
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=24, do_sample=False, cache_implementation="static",
                             pad_token_id=0)  # LINE_GENERATE
    torch.cuda.synchronize()
    import transformers
    _graphcount.result(tokens=int(out.shape[1] - ids.shape[1]), transformers=transformers.__version__)
