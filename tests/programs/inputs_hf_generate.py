"""Hugging Face ``generate()`` with a static cache on a tiny random Llama (no download): the decode
step is compiled (reduce-overhead, CUDA graph trees); the cache is a static input the graph writes,
the weights constant inputs. Two generate calls. A checker must report nothing."""
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import _graphcount

if __name__ == "__main__":
    _graphcount.install()
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(cfg).to("cuda", torch.float16).eval()
    with torch.no_grad():
        for _ in range(2):
            ids = torch.randint(0, 256, (1, 8), device="cuda")
            out = model.generate(ids, max_new_tokens=16, do_sample=False, cache_implementation="static",
                                 pad_token_id=0)  # LINE_GENERATE
    torch.cuda.synchronize()
    _graphcount.result(tokens=int(out.shape[1] - ids.shape[1]))
