"""The figures of scripts/benchmark.py, each a small function over one measuring helper.

    measure.py   the shared helpers: time a call, the median rate of N windows,
                 a silent training run's reports, the machine line
    training.py  (a) the train step alone, (b) the input pipeline, (c) end-to-end
    compute.py   (g) the matmul rate and the step's FLOPs, (k) each layer's time
    programs.py  (d) evaluation, (e)-(f) cifar10-train's start, (h) serving,
                 (i) cifar10-predict, (j) cifar10-prepare; the programs it starts
                 stopped and waited for when the benchmark stops
    options.py   (l) --deterministic and (m) --steps_per_loop, timed in turns
    kernels.py   (n) the train step without each compiled kernel, timed in turns
    report.py    the run: the data, then one small function per printed figure,
                 and which of them --figures runs
"""
