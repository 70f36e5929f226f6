"""Broken on purpose: another thread uses CUDA while the step is captured -> other-thread."""
import threading

import torch


def setup():
    x = torch.randn(1024, device="cuda")

    def worker(errors):
        try:
            torch.cuda.synchronize()  # legal alone, not while another thread captures in global mode
        except Exception as e:
            errors.append(e)

    def step():
        y = x * 2
        errors = []
        t = threading.Thread(target=worker, args=(errors,))
        t.start()
        t.join()
        if errors:
            raise errors[0]
        return y

    return step
