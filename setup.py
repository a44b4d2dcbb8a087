"""pixelmill: raw image folders + CSV labels -> clean sharded TFRecords, and back into training.

This file is the one install path: `pip install -e .[test]` for development, and what Dataflow
workers install through `--setup_file ./setup.py`.
"""
import setuptools

setuptools.setup(
    name="pixelmill",
    version="0.1.0",
    description="Validated, quality-filtered, deduplicated, sharded TFRecords from raw images",
    python_requires=">=3.11,<3.12",
    packages=setuptools.find_packages(include=["pipelines", "transforms", "transforms.*",
                                                "runners", "runners.*", "configs"]),
    package_data={"configs": ["*.yaml"]},
    # The quality analysis's passes, compiled (transforms/offline/_analysis_kernel.c): the
    # analysis copy's resize and its luma, levels and channel sums (the same integers as their
    # numpy forms) and its float metrics (the same float64 operations in numpy's order, so
    # -ffp-contract=off: no multiply and add fused into one rounding), with less CPU. Optional:
    # where it cannot be built (no C compiler) the numpy forms run, with the same outputs.
    ext_modules=[setuptools.Extension("transforms.offline._analysis_kernel",
                                      ["transforms/offline/_analysis_kernel.c"],
                                      extra_compile_args=["-O3", "-ffp-contract=off"],
                                      optional=True)],
    install_requires=[
        "tensorflow==2.21.0",
        # TensorFlow imports ml_dtypes in every process that imports it. 0.7.0 registers its
        # numpy loops in ~0.6 s of CPU (0.6.0: ~0.01 s), which the job's decoders wait for
        # before their first image (docs/benchmarks.md, twentieth round). TF allows >=0.5.1.
        "ml_dtypes==0.6.0",
        # aws: Beam's s3:// file system (and boto3: the reader's S3 copies, the S3 run lock).
        "apache-beam[gcp,aws]==2.77.0",
        "tensorflow-transform==1.21.0",
        "pyyaml>=6",
        "pillow>=10",
        "google-crc32c>=1.5",
    ],
    extras_require={
        # tensorflow-datasets: tests read snapshots with tfds.builder_from_directory; ruff:
        # `make lint` (ruff.toml), pinned so the rules do not change under CI; moto[server]:
        # the local S3 server the s3:// tests start on 127.0.0.1 (tests/s3util.py).
        "test": ["pytest>=8", "pytest-xdist>=3", "tensorflow-datasets>=4.9.10,<4.10",
                 "ruff==0.17.6", "moto[server]>=5.1,<6"],
        # The nightly DAG in runners/jobs/airflow_dag.py; not needed to run pixelmill itself.
        "airflow": ["apache-airflow>=2.9"],
    },
    entry_points={"console_scripts": ["pixelmill = runners.cli:console_main"]},
)
