"""The CUPTI ABI as cupti_callbacks.h lays it out (callback ids, domains, the callback data
structs; the values of CUPTI 13.0's headers), for the stand-ins of cupti-python that drive the recorder without a GPU: the CPU tests
(tests/test_record_recorder_fake.py) and benchmarks/bench_record_callbacks.py share it."""

from __future__ import annotations

import ctypes
import enum


class Res(enum.IntEnum):
    GRAPH_DESTROY_STARTING = 10
    GRAPHNODE_CREATED = 13
    GRAPHEXEC_CREATED = 18
    GRAPHEXEC_DESTROY_STARTING = 19
    GRAPHNODE_CLONED = 20


class Dom(enum.IntEnum):
    DRIVER_API = 1
    RUNTIME_API = 2
    RESOURCE = 3


class Site(enum.IntEnum):
    API_ENTER = 0
    API_EXIT = 1


class Rt(enum.IntEnum):
    cudaGraphLaunch_v10000 = 311
    cudaStreamBeginCapture_v10000 = 315
    cudaStreamEndCapture_v10000 = 319
    cudaGraphInstantiateWithFlags_v11040 = 418


class Drv(enum.IntEnum):
    cuGraphLaunch = 514


class CbData(ctypes.Structure):  # CUpti_CallbackData
    _fields_ = [("site", ctypes.c_int), ("name", ctypes.c_char_p), ("params", ctypes.c_void_p),
                ("ret", ctypes.c_void_p), ("sym", ctypes.c_char_p), ("ctx", ctypes.c_void_p),
                ("ctx_uid", ctypes.c_uint32), ("corr_data", ctypes.c_void_p), ("corr", ctypes.c_uint32)]


class ResData(ctypes.Structure):  # CUpti_ResourceData
    _fields_ = [("ctx", ctypes.c_void_p), ("stream", ctypes.c_void_p), ("desc", ctypes.c_void_p)]


class GraphData(ctypes.Structure):  # CUpti_GraphData
    _fields_ = [("graph", ctypes.c_void_p), ("orig_graph", ctypes.c_void_p), ("node", ctypes.c_void_p),
                ("orig_node", ctypes.c_void_p), ("node_type", ctypes.c_int), ("dep", ctypes.c_void_p),
                ("exec_", ctypes.c_void_p)]
