"""GPUs on a machine without any, for the device tests: tf.config's GPU calls answered
from a list of (name, compute capability), what a program sets recorded; and a fake
nvidia-smi on PATH."""

from __future__ import annotations

import os
import stat
import sys

import tensorflow as tf

H200 = ("NVIDIA H200", (9, 0))
V100 = ("Tesla V100-SXM2-16GB", (7, 0))


class FakeGPUs:
    """``gpus`` ((name, capability) each) as this process's GPUs, all visible at first;
    ``started``: as where TensorFlow has started, which refuses any change."""

    def __init__(self, monkeypatch, *gpus, started: bool = False):
        self.physical = [tf.config.PhysicalDevice(f"/physical_device:GPU:{i}", "GPU")
                         for i in range(len(gpus))]
        self.visible, self.growth, self.slices = list(self.physical), set(), {}
        details = {device: {"device_name": name, "compute_capability": capability}
                   for device, (name, capability) in zip(self.physical, gpus)}
        config, experimental = tf.config, tf.config.experimental
        listed, visible, set_visible, get_slices, set_slices = (
            config.list_physical_devices, config.get_visible_devices,
            config.set_visible_devices, config.get_logical_device_configuration,
            config.set_logical_device_configuration)
        mine = self.physical.__contains__

        def unstarted():
            if started:
                raise RuntimeError("Visible devices cannot be modified after being initialized")

        for name, fake in {
                "list_physical_devices": lambda kind=None: (
                    self.physical if kind == "GPU" else listed(kind)),
                "get_visible_devices": lambda kind=None: (
                    self.visible if kind == "GPU" else visible(kind)),
                "set_visible_devices": lambda devices, kind=None: (
                    unstarted() or setattr(self, "visible", list(devices)) if kind == "GPU"
                    else set_visible(devices, kind)),
                "get_logical_device_configuration": lambda device: (
                    self.slices.get(device) if mine(device) else get_slices(device)),
                "set_logical_device_configuration": lambda device, logical: (
                    unstarted() or self.slices.__setitem__(device, logical) if mine(device)
                    else set_slices(device, logical))}.items():
            monkeypatch.setattr(config, name, fake)
        monkeypatch.setattr(experimental, "get_device_details", details.__getitem__)
        monkeypatch.setattr(experimental, "set_memory_growth", lambda device, on: (
            unstarted() or self.growth.add(device) if on else None))

    def state(self) -> tuple[list[int], list[int], dict[int, int]]:
        """(the visible GPUs' indices, those with memory growth, {index: slices})."""
        index = self.physical.index
        return (sorted(map(index, self.visible)), sorted(map(index, self.growth)),
                {index(gpu): len(config) for gpu, config in self.slices.items()})


def nvidia_smi(tmp_path, monkeypatch, *memory_mb: int | str, fails: bool = False,
               mig: bool = False) -> None:
    """A fake nvidia-smi first on PATH listing GPUs of ``memory_mb`` (or failing), MIG
    enabled on each if ``mig``, all visible in CUDA's default order (fastest first)."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    rows = "".join(f"{i}, GPU-{i}abc, {mb}, {'Enabled' if mig else 'Disabled'}\n"
                   for i, mb in enumerate(memory_mb))
    _on_path(tmp_path, monkeypatch, lambda script: "#!/bin/sh\n" + (
        "echo 'NVIDIA-SMI has failed' >&2; exit 9\n" if fails else f"printf '{rows}'\n"))


def nvidia_smi_queries(tmp_path, monkeypatch, **answers: list[str]) -> None:
    """A fake nvidia-smi first on PATH that answers ``--query-gpu=QUERY`` (QUERY's dots
    as _ in ``answers``) with the next of its answers at each call, the last one again
    after them; exit status 9 for a query without answers."""
    _on_path(tmp_path, monkeypatch, lambda script: (
        f"#!{sys.executable}\nimport sys\nanswers, calls = {answers!r}, {f'{script}.calls'!r}\n"
        "query = sys.argv[1].split('=', 1)[1].replace('.', '_')\n"
        "with open(calls, 'a+') as f:\n"
        "    f.write(query + '\\n')\n"
        "    f.seek(0)\n"
        "    n = f.read().split().count(query)\n"
        "values = answers.get(query) or sys.exit(9)\n"
        "print(values[min(n, len(values)) - 1])\n"))


def _on_path(tmp_path, monkeypatch, text) -> None:
    """tmp_path/bin/nvidia-smi, holding ``text(its path)``, first on PATH."""
    script = tmp_path / "bin" / "nvidia-smi"
    script.parent.mkdir(exist_ok=True)
    script.write_text(text(script))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
