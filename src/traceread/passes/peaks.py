"""Dense peak throughput by device and dtype (TFLOP/s), for MFU.

Vendor datasheet numbers **without structured sparsity** (NVIDIA lists
"with sparsity" figures that are 2x these), tensor-core / matrix-core rates
for bf16/fp16/fp8/tf32/int8 and the FP32 rate for fp32 (CUDA cores / vector
units). Matched on the device name the trace records (Kineto
``deviceProperties[].name``, nsys ``TARGET_INFO_GPU.name``), first match wins.
Override with ``--peak-tflops`` when the clock, power cap or SKU differs.
"""
from __future__ import annotations

import re

# (pattern, {dtype: dense TFLOP/s}); the source is the vendor's datasheet for the SKU.
PEAKS: tuple[tuple[str, dict[str, float]], ...] = (
    (r"B200", {"fp8": 4500, "bf16": 2250, "fp16": 2250, "tf32": 1100, "fp32": 75,
               "fp64": 37, "int8": 4500}),
    (r"H200|GH200", {"fp8": 1978.9, "bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9,
                     "fp64": 66.9, "int8": 1978.9}),
    (r"H100.*NVL", {"fp8": 1670.5, "bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60,
                    "fp64": 60, "int8": 1670.5}),
    (r"H100.*PCIe", {"fp8": 1513, "bf16": 756.5, "fp16": 756.5, "tf32": 378, "fp32": 51.2,
                     "fp64": 51.2, "int8": 1513}),
    (r"H100|H800", {"fp8": 1978.9, "bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9,
                    "fp64": 66.9, "int8": 1978.9}),       # SXM5 (e.g. "NVIDIA H100 80GB HBM3")
    (r"H20\b", {"fp8": 296, "bf16": 148, "fp16": 148, "tf32": 74, "fp32": 44, "int8": 296}),
    (r"A100|A800", {"bf16": 312, "fp16": 312, "tf32": 156, "fp32": 19.5, "fp64": 19.5,
                    "int8": 624}),
    (r"L40S", {"fp8": 733, "bf16": 362.05, "fp16": 362.05, "tf32": 183, "fp32": 91.6,
               "int8": 733}),
    (r"L40\b", {"fp8": 362, "bf16": 181, "fp16": 181, "tf32": 90.5, "fp32": 90.5, "int8": 362}),
    (r"\bL4\b", {"fp8": 242.5, "bf16": 121, "fp16": 121, "tf32": 60, "fp32": 30.3,
                 "int8": 242.5}),
    (r"A10G", {"bf16": 70, "fp16": 70, "tf32": 35, "fp32": 31.2, "int8": 140}),
    (r"A10\b", {"bf16": 125, "fp16": 125, "tf32": 62.5, "fp32": 31.2, "int8": 250}),
    (r"V100.*PCIe", {"fp16": 112, "fp32": 14, "fp64": 7}),
    (r"V100", {"fp16": 125, "fp32": 15.7, "fp64": 7.8}),
    (r"\bT4\b", {"fp16": 65, "fp32": 8.1, "int8": 130}),
    (r"MI325X|MI300X", {"fp8": 2614.9, "bf16": 1307.4, "fp16": 1307.4, "tf32": 653.7,
                        "fp32": 163.4, "fp64": 163.4, "int8": 2614.9}),
    (r"MI300A", {"fp8": 1961.2, "bf16": 980.6, "fp16": 980.6, "tf32": 490.3, "fp32": 122.6,
                 "fp64": 122.6, "int8": 1961.2}),
    (r"MI250X", {"bf16": 383, "fp16": 383, "fp32": 95.7, "fp64": 95.7, "int8": 383}),
    (r"MI250", {"bf16": 362.1, "fp16": 362.1, "fp32": 90.5, "fp64": 90.5, "int8": 362.1}),
)
_COMPILED = tuple((re.compile(p, re.I), v) for p, v in PEAKS)


def device_peaks(name: str) -> dict[str, float] | None:
    """Dense peak TFLOP/s by dtype for a device name; None when the device is unknown."""
    for pat, peaks in _COMPILED:
        if pat.search(name or ""):
            return peaks
    return None


def device_name(meta) -> str:
    """The first GPU name the trace records (Kineto deviceProperties / nsys TARGET_INFO_GPU)."""
    for d in getattr(meta, "devices", None) or []:
        if isinstance(d, dict) and d.get("name"):
            return str(d["name"])
    return ""
