"""Facts of the CIFAR-10 binary distribution: file names and record layout.

Each ``.bin`` file holds records of 3,073 bytes: one label byte (0-9) followed
by 3,072 image bytes, the 1,024 red, then green, then blue values of a 32x32
image in row-major order.  The real files hold 10,000 records each.
"""

IMAGE_SIZE = 32  # height and width of a stored image
NUM_CHANNELS = 3
NUM_CLASSES = 10
MAX_CLASSES = 256  # a record's label is one byte
LABEL_BYTES = 1
IMAGE_BYTES = IMAGE_SIZE * IMAGE_SIZE * NUM_CHANNELS  # 3,072
RECORD_BYTES = LABEL_BYTES + IMAGE_BYTES  # 3,073

RECORDS_PER_REAL_FILE = 10_000
NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN = 50_000

BATCHES_DIRNAME = "cifar-10-batches-bin"
TRAIN_FILES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
TEST_FILES = ("test_batch.bin",)
META_FILE = "batches.meta.txt"

CLASS_NAMES = (
    "airplane", "automobile", "bird", "cat", "deer",
    "dog", "frog", "horse", "ship", "truck",
)

# The tarball of the binary version, as published by its authors.
DATA_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz"
TARBALL_NAME = "cifar-10-binary.tar.gz"
TARBALL_BYTES = 170_052_171
TARBALL_MD5 = "c32a1d4ab5d03f1284b67883e8d87530"

# Environment variable that overrides DATA_URL (a mirror, a local server or a
# file:// path); the --data_url flag overrides both.
DATA_URL_ENV = "CIFAR10_DATA_URL"

# Which files each evaluation split reads.
SPLIT_FILES = {"train": TRAIN_FILES, "train_eval": TRAIN_FILES, "test": TEST_FILES}
