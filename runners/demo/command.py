"""`pixelmill demo [--workdir DIR]`: make a small realistic dataset (with every kind of bad
input the job must catch), run the preprocessing job on it with the default local runner, and
print what happened.

    pixelmill demo --workdir demo_out
    pixelmill demo --workdir demo_out -- --direct_running_mode=multi_processing \
        --direct_num_workers=2
"""
from __future__ import annotations

import argparse
import os
import sys

from runners.flags import CommandParser, count_at_least

__all__ = ["run"]


def run(argv=None) -> int:
    parser = CommandParser(prog="pixelmill demo", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default="demo_out",
                        help="Folder for the demo data and output (default: demo_out).")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the generated data.")
    parser.add_argument("--images_per_class", type=count_at_least(1), default=12)
    args, beam_args = parser.parse_known_args(argv)
    beam_args = [a for a in beam_args if a != "--"]
    from runners.demo.data import generate_demo
    from runners.jobs import preprocess  # Beam and TensorFlow: after the flags are parsed
    from runners.jobs.summary import format_summary
    from runners.progress_report import reporting
    workdir = os.path.abspath(args.workdir)
    demo = generate_demo(workdir, seed=args.seed,
                         images_per_class=args.images_per_class)
    print(f"demo data: {demo.root} ({len(demo.expected)} image files, labels in "
          f"{demo.labels_csv})")
    with reporting():
        snapshot = preprocess.run([
            "--data_root", demo.root, "--labels", demo.labels_csv, "--classes",
            demo.classes_txt, "--boxes", demo.boxes_csv, "--output_dir",
            os.path.join(workdir, "output"), *beam_args])
    print()
    print(format_summary(snapshot))
    return 0 if snapshot.accounting["ok"] else 1


if __name__ == "__main__":
    from runners.cli import console_main
    console_main(["demo", *sys.argv[1:]])
