"""Dense peak throughput by device and dtype (TFLOP/s), for MFU.

Vendor datasheet numbers **without structured sparsity** (NVIDIA lists
"with sparsity" figures that are 2x these), tensor-core / matrix-core rates
for bf16/fp16/fp8/tf32/int8 and the FP32 rate for fp32 (CUDA cores / vector
units). Matched on the device name the trace records (Kineto
``deviceProperties[].name``, nsys ``TARGET_INFO_GPU.name``), first match wins;
the compute capability (``computeMajor``/``computeMinor``) then drops the dtypes
the architecture lacks (no bf16/TF32 before Ampere, no fp8 before Ada/Hopper).
Override with ``--peak-tflops`` when the clock, power cap or SKU differs.

``device_caps(meta)`` is the documented device context the levers read
(``ctx["device"]``): name, vendor, cc, arch, sm_count and whether the device has
bf16, TF32 and fp8 math (None when unknown).
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
    # GeForce: fp16/bf16 tensor rates with fp32 accumulate (what PyTorch uses)
    (r"RTX 4090", {"fp8": 330.3, "bf16": 165.2, "fp16": 165.2, "tf32": 82.6, "fp32": 82.6}),
    (r"RTX 3090", {"bf16": 71, "fp16": 71, "tf32": 35.6, "fp32": 35.6}),
    (r"RTX 2080 Ti", {"fp16": 53.8, "fp32": 13.4}),
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


def device_peaks(name: str, caps: dict | None = None) -> dict[str, float] | None:
    """Dense peak TFLOP/s by dtype for a device name; None when the device is unknown.
    ``caps`` (``device_caps``): dtypes the compute capability rules out are dropped."""
    for pat, peaks in _COMPILED:
        if pat.search(name or ""):
            if caps:
                return {d: v for d, v in peaks.items() if caps.get(_HAS.get(d, "")) is not False}
            return peaks
    return None


_HAS = {"bf16": "bf16", "tf32": "tf32", "fp8": "fp8"}
CAPS_KEYS = ("name", "vendor", "cc", "arch", "sm_count", "bf16", "tf32", "fp8")
_NV_ARCH = ((6, "Pascal"), (7, "Volta"), (7.5, "Turing"), (8, "Ampere"), (8.9, "Ada"),
            (9, "Hopper"), (10, "Blackwell"))
_AMD_NAME = re.compile(r"\bAMD\b|Instinct|Radeon|\bMI\d{3}", re.I)
_NV_NAME = re.compile(r"NVIDIA|GeForce|Tesla|Quadro|\bRTX\b|\bGTX\b|\b[ABHLTV]\d{2,3}\b|GH200|"
                      r"B200|GB200", re.I)


def device_caps(meta) -> dict:
    """What the trace says about its (first) GPU: ``{name, vendor, cc, arch, sm_count, bf16,
    tf32, fp8}``. Evidence: Kineto ``deviceProperties`` (name, computeMajor/Minor, numSms,
    warpSize) or nsys ``TARGET_INFO_GPU`` (name, computeMajor/Minor, smCount). ``bf16``/
    ``tf32``/``fp8``: True/False from the architecture, None when it is unknown."""
    d = next((x for x in getattr(meta, "devices", None) or [] if isinstance(x, dict)), {})
    name = str(d.get("name") or "")
    major, minor = _int(d.get("computeMajor")), _int(d.get("computeMinor"))
    vendor = _vendor(name, d, getattr(meta, "format", None))
    cc = f"{major}.{minor or 0}" if major is not None and major > 0 else None
    sms = _int(d.get("numSms", d.get("smCount", d.get("multiProcessorCount"))))
    caps = {"name": name, "vendor": vendor, "cc": cc, "arch": None,
            "sm_count": sms if sms and sms > 0 else None, "bf16": None, "tf32": None, "fp8": None}
    if vendor == "nvidia" and cc:
        v = major + (minor or 0) / 10
        caps["arch"] = [a for lo, a in _NV_ARCH if v >= lo][-1] if v >= 6 else "pre-Pascal"
        caps.update(bf16=v >= 8, tf32=v >= 8, fp8=v >= 8.9)
    elif vendor == "amd":
        caps.update(_amd(name, major, minor))
    if caps["bf16"] is None and vendor != "amd":      # no cc: what the peak table lists
        peaks = device_peaks(name)
        if peaks:
            caps.update(bf16="bf16" in peaks, tf32="tf32" in peaks, fp8="fp8" in peaks)
    return caps


def _int(v) -> int | None:
    try:
        return int(v) if v is not None else None
    except (TypeError, ValueError):
        return None


def _vendor(name: str, d: dict, fmt) -> str | None:
    if _AMD_NAME.search(name) or d.get("warpSize") == 64:
        return "amd"
    if _NV_NAME.search(name) or fmt == "nsys" or d.get("warpSize") == 32:
        return "nvidia"
    return None


def _amd(name: str, major, minor) -> dict:
    """CDNA generation from the name (MI100/MI2xx/MI3xx) or gfx9.4/9.5 (HIP's cc)."""
    if re.search(r"MI3[0-2]\d", name) or (major, minor) == (9, 4):
        return {"arch": "CDNA3", "bf16": True, "tf32": True, "fp8": True}   # xf32 on MI300
    if re.search(r"MI35\d", name) or (major, minor) == (9, 5):
        return {"arch": "CDNA4", "bf16": True, "tf32": False, "fp8": True}
    if re.search(r"MI2\d\d", name):
        return {"arch": "CDNA2", "bf16": True, "tf32": False, "fp8": False}
    if re.search(r"MI100", name):
        return {"arch": "CDNA1", "bf16": True, "tf32": False, "fp8": False}
    return {}


def device_name(meta) -> str:
    """The first GPU name the trace records (Kineto deviceProperties / nsys TARGET_INFO_GPU)."""
    for d in getattr(meta, "devices", None) or []:
        if isinstance(d, dict) and d.get("name"):
            return str(d["name"])
    return ""
