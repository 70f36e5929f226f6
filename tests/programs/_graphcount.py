"""What the test programs count themselves, per process: the CUDA graphs captured through
``torch.cuda.CUDAGraph`` (in the order their capture ended) and the replays of each. Not cgtool:
the programs patch torch's class with plain Python and print ``RESULT {pid, graphs, replays}``."""
import json
import os
import sys

import torch

_graphs: list[int] = []  # replays, per graph, in capture order


def install() -> None:
    G = torch.cuda.CUDAGraph
    if getattr(G, "_counted", False):
        return
    end, rep = G.capture_end, G.replay

    def capture_end(self: torch.cuda.CUDAGraph) -> None:
        end(self)
        self._seq = len(_graphs)
        _graphs.append(0)

    def replay(self: torch.cuda.CUDAGraph) -> None:
        _graphs[self._seq] += 1
        rep(self)

    G.capture_end, G.replay, G._counted = capture_end, replay, True


def result(**extra: object) -> None:
    """One line a test reads: this process's graphs and replays (cumulative: the last line of a pid counts)."""
    line = "RESULT " + json.dumps({"pid": os.getpid(), "graphs": len(_graphs), "replays": list(_graphs), **extra})
    sys.stdout.flush()  # what the program printed before comes first
    os.write(1, (line + "\n").encode())  # one write of one line: the processes of a program share stdout
