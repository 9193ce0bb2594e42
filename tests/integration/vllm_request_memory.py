"""Run with the vLLM virtualenv's python: vLLM 0.32's own start-up check, ``vllm.v1.worker.utils.request_memory``
(lines 716-772), on snapshots read from stdin as JSON ``[{free_bytes, total_bytes, util}]``; prints, per case,
the bytes requested or vLLM's refusal message. The snapshot is vLLM's own ``MemorySnapshot`` with
``auto_measure=False`` and the free and total memory set, as ``gpu_worker.init_device`` would have measured them.
"""

import json
import sys

from vllm.config import CacheConfig
from vllm.utils.mem_utils import MemorySnapshot
from vllm.v1.worker.utils import request_memory

out = []
for case in json.load(sys.stdin):
    snap = MemorySnapshot(device="cpu", auto_measure=False)
    snap.free_memory, snap.total_memory = case["free_bytes"], case["total_bytes"]
    try:
        out.append(request_memory(snap, CacheConfig(gpu_memory_utilization=case["util"])))
    except ValueError as refused:
        out.append(str(refused))
print(json.dumps(out))
