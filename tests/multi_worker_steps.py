"""One worker of test_multi_worker.py's equivalence test (``TF_CONFIG=... python
multi_worker_steps.py OUT_DIR NUM_STEPS PER_REPLICA_BATCH``): worker w feeds rows
[w*b, (w+1)*b) of each global batch; the chief saves OUT_DIR/variables.npz."""

import os
import sys

import numpy as np

from cifar10.core.config import TrainConfig
from cifar10.distribute import devices
from cifar10.training.engine import Trainer


def batches(num_steps: int, global_batch: int):
    rng = np.random.default_rng(0)
    images = rng.normal(size=(num_steps, global_batch, 24, 24, 3)).astype(np.float32)
    return images, rng.integers(0, 10, size=(num_steps, global_batch)).astype(np.int32)


def main(out_dir: str, num_steps: int, batch: int) -> None:
    import tensorflow as tf

    strategy = devices.make_strategy(1, kind="multi_worker", worker_timeout_secs=120)
    images, labels = batches(num_steps, strategy.num_replicas_in_sync * batch)

    def dataset(ctx):
        rows = slice(ctx.input_pipeline_id * batch, (ctx.input_pipeline_id + 1) * batch)
        return tf.data.Dataset.from_tensor_slices((images[:, rows], labels[:, rows]))

    trainer = Trainer(TrainConfig(train_dir=out_dir, batch_size=batch), strategy,
                      examples_per_epoch=1000)
    iterator = iter(strategy.distribute_datasets_from_function(dataset))
    for _ in range(num_steps):
        trainer.step(iterator)
    if devices.worker_role(strategy)[0]:
        arrays = {f"model/{v.name}": v.numpy() for v in trainer.variables}
        arrays.update({f"averages/{v.name}": v.numpy()
                       for v in trainer.state.averages.parameters()})
        np.savez(os.path.join(out_dir, "variables.npz"), **arrays)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
