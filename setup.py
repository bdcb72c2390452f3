"""Installs the cifar10 package and its programs: cifar10-train, cifar10-eval,
cifar10-predict, cifar10-export and cifar10-prepare."""

import pathlib
import re

from setuptools import find_packages, setup

HERE = pathlib.Path(__file__).parent


def requirements(name):
    lines = (HERE / name).read_text().splitlines()
    return [l.strip() for l in lines if l.strip() and not l.startswith(("#", "-r"))]


setup(
    name="cifar10",
    version=re.search(r'__version__ = "(.+)"', (HERE / "cifar10/__init__.py").read_text())[1],
    description="TensorFlow 2 port of the TensorFlow CIFAR-10 tutorial: multi-GPU trainer "
                "and evaluator",
    long_description=(HERE / "README.md").read_text(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["cifar10", "cifar10.*"]),
    # The C++ kernels' sources, compiled on the user's machine on first use.
    package_data={"cifar10.kernels": ["*.cc", "*.h"]},
    python_requires=">=3.10",
    install_requires=requirements("requirements.txt"),
    extras_require={
        "test": requirements("requirements-test.txt"),
        # TensorBoard's Profile tab, to read cifar10-train --profile_steps' traces.
        "profile": ["tensorboard-plugin-profile>=2.16"],
        # LiteRT, which runs .tflite files (cifar10-eval --model=model.tflite).
        "litert": ["ai-edge-litert>=2.3,<3"],
    },
    # The programs start in cifar10.cli.entry, which answers a Ctrl-C with one line
    # from the first moment, then imports the program (cifar10.cli.<program>_main).
    entry_points={
        "console_scripts": [
            "cifar10-train=cifar10.cli.entry:train",
            "cifar10-eval=cifar10.cli.entry:evaluate",
            "cifar10-predict=cifar10.cli.entry:predict",
            "cifar10-export=cifar10.cli.entry:export",
            "cifar10-prepare=cifar10.cli.entry:prepare",
            "cifar10-launch=cifar10.cli.entry:launch",
        ],
    },
)
