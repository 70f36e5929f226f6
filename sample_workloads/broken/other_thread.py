"""Broken on purpose: a background thread (a logger polling GPU state) calls into CUDA while the
step is captured in global mode, which invalidates the capture -> other-thread."""
import threading
import time

import torch


def setup():
    x = torch.randn(1024, device="cuda")
    stop = threading.Event()

    def monitor():
        while not stop.is_set():
            try:
                torch.cuda.synchronize()  # harmless on its own; breaks another thread's global capture
            except Exception:
                pass  # a real monitor would log and carry on
            time.sleep(0.001)

    threading.Thread(target=monitor, daemon=True).start()

    def step():
        y = x * 2
        time.sleep(0.05)  # the monitor runs meanwhile
        return y + 1

    return step
