"""A chain of processes: the program runs itself with `subprocess` (level 1), which becomes another
Python program through os.execv (level 2); level 2 runs a program that is not Python and forks
after it has initialised CUDA (the child must not use CUDA, and must not hang). Each level captures
one graph and replays it LEVEL + 2 times."""
import os
import shutil
import subprocess
import sys

import torch

import _graphcount


def graph(level: int) -> None:
    x = torch.randn(128, device="cuda")
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        x.mul(level + 1).add(1)  # LINE_LEVEL
    for _ in range(level + 2):
        g.replay()
    torch.cuda.synchronize()


if __name__ == "__main__":
    level = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    _graphcount.install()
    graph(level)
    _graphcount.result(level=level, image=1 if level == 2 else 0)
    if level == 0:
        subprocess.run([sys.executable, __file__, "1"], check=True)
    elif level == 1:
        os.execv(sys.executable, [sys.executable, __file__, "2"])
    else:
        tool = shutil.which("nvidia-smi")
        subprocess.run([tool, "-L"] if tool else ["sh", "-c", "true"], check=True, stdout=subprocess.DEVNULL)
        pid = os.fork()  # after CUDA was initialised: the child may not use CUDA
        if pid == 0:
            _graphcount._graphs.clear()
            _graphcount.result(level=3, forked=True)
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
