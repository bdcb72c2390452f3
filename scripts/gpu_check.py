"""Checks cifar10 on the first GPU at hand and prints one table of what works and how fast.

docs/performance.md, "Check a GPU machine": examples/sec of the step alone, the input alone,
end-to-end and evaluation (scripts/benchmark.py's (a)-(d)) and a short run's loss, in
float32, TF32, float16 and bfloat16; the compiled CPU kernels off the GPU; the GPU memory of
a --num_gpus=0 run; two replicas on one GPU; cifar10-export and cifar10-eval; the seconds
from SIGTERM to a trainer's exit.  Each part runs programs, each with a time limit, within
--budget_secs in all, writing under one new folder, their output in its logs/.  Exits 1
naming the parts that failed (without a GPU the GPU-only ones are skipped); stopped (Ctrl-C,
SIGTERM), 130 after the rows measured so far.  --quick: float32 and a few steps (the tests).
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

try:
    from cifar10.cli.process import ArgumentParser
    from cifar10.runs import cleanup, records
except ImportError as e:
    sys.exit(f"gpu_check.py: error: {sys.executable} cannot import the cifar10 package ({e}): "
             f"install it (pip install .) or set PYTHON to the Python it is installed in")

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.path.dirname(sys.executable)  # the programs beside this Python
PRECISIONS = {"float32": [], "TF32": ["--allow_tf32"], "float16": ["--use_fp16"],
              "bfloat16": ["--use_bf16"]}
LOSS_TAG = "total_loss (raw)"
LOSS_TOLERANCE = 0.2  # |loss - float32's|; bfloat16 on a CPU: 0.01 at 200 steps
CPU_RUN_MIB = 64  # GPU memory a --num_gpus=0 run may seem to add (other processes')
# Seconds each program may take (the benchmark: per precision), within --budget_secs.
# "first": the first on a GPU may JIT-compile TensorFlow's PTX (no sm_90 code in its wheels).
LIMITS = {"data": 60, "first": 300, "loss": 90, "export": 60, "eval": 90, "cpu": 90,
          "split": 120, "speed": 150}
SPEED_ROWS = (("a", "step alone, ex/s per GPU"), ("b", "input alone, ex/s (host)"),
              ("c", "end-to-end, ex/s per GPU"), ("d", "evaluation, ex/s per GPU"))
# (steps of the loss runs, records per generated file, the benchmark's windows, the
# two-replica run's flags)
MODES = {False: (200, 2000, ["--windows=3", "--window_steps=50", "--warmup_steps=20"], []),
         True: (4, 200, ["--windows=1", "--window_steps=2", "--warmup_steps=1"],
                ["--batch_size=16"])}
STEP = re.compile(r": step (\d+), loss = ")


class Failed(Exception):
    """A part that did not work; the message says why."""


def wait(proc: subprocess.Popen, log: str, seconds: float, step: int = 0) -> str:
    """The output (in ``log``) of ``proc`` once it ended well, or (``step``) once a log
    line passed that step; Failed otherwise, within ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        status, out = proc.poll(), read(log)  # (polled first: then the output is all there)
        if step and max(map(int, STEP.findall(out)), default=0) >= step:
            return out
        if status is not None:
            break
        if time.monotonic() > deadline:
            raise Failed(f"{f'no step {step} within' if step else 'still running after'} "
                         f"{seconds:.0f} s (see {log})")
        time.sleep(0.2)
    if status:
        last = out.strip().splitlines()[-1:] or [""]
        raise Failed(f"exit status {status}: {last[0][:200]} (see {log})")
    if step:
        raise Failed(f"ended before step {step} (see {log})")
    return out


def read(path: str) -> str:
    with open(path, errors="replace") as f:
        return f.read()


class Check:
    """What the parts share: the folder, the programs' environment, the clock, the GPU,
    and the float32 run's record (``trained``, which says whether it trained on it)."""

    def __init__(self, args):
        self.dir, self.quick = args.dir, args.quick
        self.steps, self.records_per_file, self.windows, self.split_flags = MODES[args.quick]
        self.start = time.monotonic()
        self.deadline = self.start + args.budget_secs
        for folder in ("logs", "tmp"):
            os.makedirs(self.path(folder))
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")  # ("" or -1: no GPU)
        self.gpu_id = "0" if visible is None else visible.split(",")[0].strip()
        self.env = dict(os.environ, PYTHONUNBUFFERED="1", TMPDIR=self.path("tmp"),
                        MPLCONFIGDIR=self.path("tmp"), CUDA_DEVICE_ORDER="PCI_BUS_ID",
                        CUDA_VISIBLE_DEVICES=self.gpu_id)  # the first GPU only
        # CUDA's cache of the kernels compiled from PTX at its most, 4 GiB: each compiled once
        self.env.setdefault("CUDA_CACHE_MAXSIZE", str(4 << 30))
        self.gpu_name = nvidia_smi(self.gpu_id, "name")
        self.trained: dict = {}
        self.on_gpu, self.machine = False, ""  # (the benchmark's machine line)
        # Why the GPU-only parts are skipped.
        self.no_gpu = "the GPU is not TensorFlow's" if self.gpu_name else "no GPU"
        self.loss_label = f"loss, mean of steps {self.steps // 2 + 1}-{self.steps}"
        self.rows = {label: (label, {}, "not run") for label in (  # the table's, in order
            "GPU", *(label for _, label in SPEED_ROWS), self.loss_label, "compiled CPU kernels",
            "GPU memory of a --num_gpus=0 run", "two replicas on one GPU", "cifar10-export",
            "cifar10-eval", "SIGTERM to exit")}

    def done(self, *rows: tuple) -> None:
        """``rows`` measured: in the table."""
        self.rows.update((r[0], r) for r in rows)

    def path(self, *names: str) -> str:
        return os.path.join(self.dir, *names)

    def limit(self, part: str) -> float:
        left = self.deadline - time.monotonic()
        if left < 1:
            raise Failed("not run: the check's --budget_secs were spent")
        return min(LIMITS[part], left)

    @contextlib.contextmanager
    def program(self, part: str, name: str, command: list[str], step: int = 0):
        """``command`` started, its output in logs/<name>.log: (its process, the output
        ``wait`` gave within the part's limit); stopped as the block ends (SIGTERM,
        SIGKILL 10 s later)."""
        seconds, log = self.limit(part), self.path("logs", f"{name}.log")
        say(f"{name} ...")
        try:
            with open(log, "w") as out:
                proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                        env=self.env)
        except OSError as e:
            raise Failed(f"cannot start {command[0]}: {e.strerror or e}") from None
        try:
            yield proc, wait(proc, log, seconds, step)
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()

    def run(self, part: str, name: str, command: list[str]) -> str:
        """``command``'s output once it ended well within the part's limit."""
        with self.program(part, name, command) as (_, out):
            return out

    def training(self, part: str, name: str, *flags: str, step: int):
        """A cifar10-train run as it passes ``step``; a loop a step, so that its log lines
        come as the steps pass."""
        return self.program(part, name, self.train(name, *flags, "--max_steps=1000000",
                                                   "--steps_per_loop=1"), step)

    def train(self, name: str, *flags: str) -> list[str]:
        return [installed("cifar10-train"), f"--data_dir={self.path('data')}",
                f"--train_dir={self.path('runs', name)}", *flags]


def installed(name: str) -> str:
    """cifar10's program ``name``: beside this Python, else on PATH (pip --user)."""
    beside = os.path.join(BIN, name)
    return beside if os.path.exists(beside) else shutil.which(name) or beside


def nvidia_smi(gpu: str, query: str) -> str | None:
    """One value of nvidia-smi's --query-gpu for ``gpu``; None without nvidia-smi."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "-i", gpu,
                              "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def on_gpu(record: dict) -> list[str]:
    """The GPUs among a run record's devices, as GPU:0."""
    return [d["name"].split("device:")[-1] for d in record.get("devices", [])
            if "GPU" in d["name"].upper()]


def mean_loss(train_dir: str, steps: int) -> float:
    """The mean of the run's summarised loss over its second half (one step's is noisy)."""
    from tensorboard.util import tensor_util

    losses = [float(tensor_util.make_ndarray(v.tensor))
              for path in glob.glob(os.path.join(train_dir, "events.out.tfevents.*"))
              for event in cleanup.events(path) if event.step > steps // 2
              for v in event.summary.value if v.tag == LOSS_TAG]
    if not losses:
        raise Failed(f"no {LOSS_TAG!r} summary beyond step {steps // 2} in {train_dir}")
    return sum(losses) / len(losses)


def row(label: str, cells: dict[str, object], skipped: str) -> tuple:
    """A row of a figure per precision (its text, or Failed)."""
    failures = "; ".join(f"{p}: {r}" for p, r in cells.items() if isinstance(r, Failed))
    status = f"FAILED: {failures}" if failures else "ok"
    return (label, {p: "FAILED" if isinstance(r, Failed) else r for p, r in cells.items()},
            status + (f" ({skipped})" if skipped else ""))


def single(label: str, part, c: Check) -> tuple:
    """A row of one check: ``part(c)`` gives its detail or 'skipped: why', or raises Failed."""
    try:
        detail = part(c)
    except Failed as e:
        return label, {}, f"FAILED: {e}"
    return label, {}, detail if detail.startswith("skipped") else f"ok: {detail}"


def losses(c: Check, precisions: list[str]) -> dict[str, object]:
    """Each precision's mean loss over the second half of a short run, seed 1 (or Failed)."""
    every = max(1, c.steps // 10)
    results: dict[str, object] = {}
    for precision in precisions:
        name = f"loss-{precision}"
        try:
            c.run("first" if precision == "float32" else "loss", name, c.train(
                name, f"--max_steps={c.steps}", "--seed=1", f"--summary_steps={every}",
                f"--log_frequency={every}", "--deterministic", *PRECISIONS[precision]))
            results[precision] = mean_loss(c.path("runs", name), c.steps)
        except Failed as e:
            results[precision] = e
    return results


def loss_cell(precision: str, loss: object, reference: object) -> object:
    """A loss and its difference from float32's ``reference``; Failed beyond LOSS_TOLERANCE."""
    if isinstance(loss, Failed) or precision == "float32":
        return loss if isinstance(loss, Failed) else f"{loss:.3f}"
    if not isinstance(reference, float):
        return Failed("no float32 loss to compare with")
    if not abs(loss - reference) <= LOSS_TOLERANCE:  # (NaN too)
        return Failed(f"{loss:.3f}, more than {LOSS_TOLERANCE} from float32's")
    return f"{loss:.3f} ({loss - reference:+.3f})"


def speeds(c: Check, precisions: list[str], skipped: str) -> None:
    """The rows of scripts/benchmark.py's (a)-(d), examples/sec per precision (or Failed),
    in c.rows as each precision is measured; its machine line in c.machine.  Off the GPU,
    the quick windows (a CPU takes minutes for the GPU's)."""
    figures = {letter: dict.fromkeys(precisions, "not run") for letter, _ in SPEED_ROWS}
    for precision in precisions:
        name, error = f"speed-{precision}", None
        log = c.path("logs", f"{name}.log")
        try:
            c.run("speed", name, [
                sys.executable, os.path.join(HERE, "benchmark.py"), "--figures=a,b,c,d",
                f"--data_dir={c.path('data')}", *(c.windows if c.on_gpu else MODES[True][2]),
                *(["--num_gpus=1"] if c.on_gpu else []), *PRECISIONS[precision]])
        except Failed as e:
            error = e
        out = read(log) if os.path.exists(log) else ""  # (its figures before a failure too)
        found = dict(re.findall(r"^\(([a-d])\)[^:]*:\s+([0-9.]+) examples/sec", out, re.M))
        c.machine = c.machine or "".join(re.findall(r"^machine: (.*)$", out, re.M)[:1])
        for letter, label in SPEED_ROWS:
            rate = found.get(letter)
            figures[letter][precision] = f"{float(rate):,.0f}" if rate else (
                error or Failed(f"no figure ({letter}) in its output"))
            c.done(row(label, figures[letter], skipped))


def gpu(c: Check) -> str:
    if c.on_gpu:
        kind = next(d["kind"] for d in c.trained["devices"] if "GPU" in d["name"].upper())
        return f"{kind}: the float32 run trained on {', '.join(on_gpu(c.trained))}"
    if c.gpu_name:
        raise Failed(f"nvidia-smi shows {c.gpu_name} but the float32 run did not train on it "
                     f"(see {c.path('logs', 'loss-float32.log')}); without its CUDA libraries "
                     f"TensorFlow sees no GPU: pip install 'tensorflow[and-cuda]'")
    return "skipped: no GPU (nvidia-smi finds none; TensorFlow trains on the CPU)"


def kernels(c: Check) -> str:
    used = c.trained.get("kernels") or {}
    if not c.on_gpu:
        return f"skipped: {c.no_gpu}" + (f" (the CPU run used: {used['kernel']}, {used['reason']})"
                                    if used else "")
    if used.get("kernel") != "tensorflow":
        raise Failed(f"the GPU run used {used or 'unrecorded kernels'}")
    return f"not used, TensorFlow's ops ({used['reason']})"


def cpu_run_memory(c: Check) -> str:
    if not (c.on_gpu and c.gpu_name):
        return f"skipped: {'nvidia-smi not found' if c.on_gpu else c.no_gpu}"
    before = memory_used(c)
    with c.training("cpu", "cpu", "--num_gpus=0", "--kernels=tensorflow", step=1):
        added = memory_used(c) - before
    if added > CPU_RUN_MIB:
        raise Failed(f"{added} MiB more in use while it trained: it holds GPU memory")
    return f"{max(added, 0)} MiB more in use while it trained (nvidia-smi)"


def memory_used(c: Check) -> int:
    """The GPU's memory in use, MiB (nvidia-smi); Failed where it gives no number."""
    value = nvidia_smi(c.gpu_id, "memory.used")
    if not (value or "").isdigit():  # ([N/A] on MIG or vGPU)
        raise Failed(f"nvidia-smi gives GPU {c.gpu_id}'s memory.used as {value or 'nothing'}")
    return int(value)


def split_and_sigterm(c: Check) -> list[tuple]:
    """Two replicas on one GPU (on logical CPU devices without a GPU) to step 20, then
    SIGTERM: the split's row and that of the seconds to the trainer's exit."""
    split, log = f"skipped: {c.no_gpu}", c.path("logs", "split.log")
    try:
        with c.training("split", "split", "--num_gpus=2", *c.split_flags,
                        *(["--replicas_per_gpu=2"] if c.on_gpu else []), step=20) as (proc, _):
            start = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            try:
                status, seconds = proc.wait(60), time.monotonic() - start
            except subprocess.TimeoutExpired:
                raise Failed(f"still running 60 s after SIGTERM (see {log})") from None
        out = read(log)
        if c.on_gpu:  # (its record's devices: the kind of GPU, and whose slice)
            kinds = [d["kind"] for d in (records.last_record(c.path("runs", "split")) or {}
                                         ).get("devices", []) if "GPU" in d["name"].upper()]
            split = (f"ok: 2 replicas trained past step 20, each on {kinds[0]}"
                     if len(kinds) == 2 and kinds[0] == kinds[1] and ", slice of " in kinds[0]
                     else f"FAILED: its run record shows {kinds or 'no GPU'}, not 2 slices of "
                     f"one GPU (see {c.path('runs', 'split')})")
        stopped = re.search(r"^Stopped at step (\d+); saved ", out, re.M)
        sigterm = (f"ok: {seconds:.1f} s, checkpoint of step {stopped[1]} saved"
                   if stopped and status == 0 else f"FAILED: exit status {status} after "
                   f"{seconds:.1f} s, no 'Stopped at step N; saved' line (see {log})")
    except Failed as e:
        split, sigterm = f"FAILED: {e}" if c.on_gpu else split, f"FAILED: {e}"
    return [("two replicas on one GPU", {}, split), ("SIGTERM to exit", {}, sigterm)]


def export(c: Check) -> str:
    c.run("export", "export", [installed("cifar10-export"),
                               f"--checkpoint_dir={c.path('runs', 'loss-float32')}",
                               f"--export_dir={c.path('export')}"])
    saved = glob.glob(c.path("export", "*", "saved_model.pb"))
    if not saved:
        raise Failed(f"no SavedModel in {c.path('export')}")
    return f"a SavedModel in {os.path.dirname(saved[0])}"


def evaluation(c: Check) -> str:
    out = c.run("eval", "eval", [installed("cifar10-eval"), "--run_once",
                                 f"--checkpoint_dir={c.path('runs', 'loss-float32')}",
                                 f"--eval_dir={c.path('eval')}", f"--data_dir={c.path('data')}"])
    precision = re.search(r"precision @ 1 = ([0-9.]+)", out)
    record = records.last_record(c.path("eval")) or {}
    if not precision:
        raise Failed(f"no 'precision @ 1' line (see {c.path('logs', 'eval.log')})")
    if c.on_gpu and not on_gpu(record):
        raise Failed(f"it ran on {record.get('devices', [])}, not the GPU")
    return f"precision @ 1 = {precision[1]} on {', '.join(on_gpu(record)) or 'the CPU'}"


def checks(c: Check) -> None:
    """Runs every part (the longest last), each row in c.rows once measured."""
    loss = losses(c, ["float32"])  # first: it shows whether TensorFlow trains on a GPU
    c.trained = records.last_record(c.path("runs", "loss-float32")) or {}
    c.on_gpu = bool(on_gpu(c.trained))
    precisions = list(PRECISIONS) if c.on_gpu and not c.quick else ["float32"]
    skipped = "" if len(precisions) > 1 else (
        f"TF32, float16, bfloat16 skipped: {'--quick' if c.quick else c.no_gpu}")
    c.done(single("GPU", gpu, c), single("compiled CPU kernels", kernels, c))
    loss.update(losses(c, precisions[1:]))
    c.done(row(c.loss_label, {p: loss_cell(p, v, loss.get("float32")) for p, v in loss.items()},
               skipped))
    for label, part in (("cifar10-export", export), ("cifar10-eval", evaluation),
                        ("GPU memory of a --num_gpus=0 run", cpu_run_memory)):
        c.done(single(label, part, c))
    c.done(*split_and_sigterm(c))
    speeds(c, precisions, skipped)


def table(rows: list[tuple]) -> list[str]:
    """The rows as one Markdown table, to paste into docs/performance.md."""
    lines = ["| part | " + " | ".join(PRECISIONS) + " | status |",
             "|---|" + "---:|" * len(PRECISIONS) + "---|"]
    for label, cells, status in rows:
        texts = [label, *(str(cells.get(p, "")) for p in PRECISIONS), status]
        lines.append("| " + " | ".join(t.replace("|", "/") for t in texts) + " |")
    return lines


def parse_args(argv):
    p = ArgumentParser(prog="gpu_check.py", description=__doc__.splitlines()[0])
    p.add_argument("--dir", help="a new folder to write everything in (default: a new "
                                 "temporary folder, kept for its logs)")
    p.add_argument("--quick", action="store_true",
                   help="float32 only and a few steps: the check's own test")
    p.add_argument("--budget_secs", type=float, default=540,  # (10 minutes with a margin)
                   help="the most seconds the parts may take in all (default 540)")
    args = p.parse_args(argv)
    if args.dir is None:
        args.dir = tempfile.mkdtemp(prefix="cifar10-gpu-check-")
    elif os.path.exists(args.dir) and (not os.path.isdir(args.dir) or os.listdir(args.dir)):
        p.error(f"--dir={args.dir} exists and is not an empty folder: name a new one")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    c = Check(args)
    say(f"writing under {c.dir}")
    try:
        try:
            c.run("data", "data", [sys.executable, os.path.join(HERE, "make_synthetic_data.py"),
                                   c.path("data"), f"--records_per_file={c.records_per_file}"])
        except Failed as e:
            say(f"error: cannot generate the data: {e}")
            return 1
        checks(c)
    except KeyboardInterrupt:  # (SIGTERM too) its programs stopped
        return report(c, interrupted=True)
    return report(c)


def report(c: Check, interrupted: bool = False) -> int:
    """Prints the table (the rows not measured 'not run'); the exit status: 130 where
    ``interrupted``, else 1 where a part failed."""
    machine = c.machine or f"TensorFlow {c.trained.get('tensorflow', '?')}"
    took = "interrupted after" if interrupted else "checked in"
    print(f"cifar10 GPU check, {time.strftime('%Y-%m-%d')}{', --quick' if c.quick else ''}: "
          f"{c.gpu_name or 'no GPU'}; {machine}; {took} {time.monotonic() - c.start:.0f} s; "
          f"logs in {c.path('logs')}\n")
    print("\n".join(table(list(c.rows.values()))), flush=True)
    failed = [label for label, _, status in c.rows.values() if status.startswith("FAILED")]
    if interrupted or failed:
        say(f"interrupted; what it wrote is in {c.dir}" if interrupted
            else f"FAILED: {'; '.join(failed)}")
    return 130 if interrupted else 1 if failed else 0


def say(line: str) -> None:
    print(f"gpu_check.py: {line}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # its programs stopped too
    sys.exit(main())
