"""This machine's CPU instruction sets, as Linux's /proc/cpuinfo names them."""

from __future__ import annotations

import functools


def features(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str] | None:
    """The CPU's feature flags ('avx2', 'avx512_bf16', 'amx_bf16', Arm's 'bf16', ...);
    None where ``cpuinfo`` cannot be read (not Linux)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):  # x86, Arm
                    return frozenset(value.split())
    except OSError:
        pass
    return None


@functools.lru_cache(maxsize=None)
def has_amx() -> bool:
    """Whether this CPU has AMX's bfloat16 tiles (Intel Sapphire Rapids and later)."""
    return "amx_bf16" in (features() or ())
