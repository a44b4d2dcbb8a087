"""The class table: ids never change across runs; frozen tables; explicit renames."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from runners import cli
from runners.demo_data import photo_like
from tests.jobutil import index_rows, run_job
from transforms.offline import classes


def test_parse_rejects_a_name_listed_twice():
    with pytest.raises(ValueError, match="lists 'cat' twice"):
        classes.parse_class_table("cat\ndog\ncat\n", "classes.txt")


def test_parse_ignores_blank_lines_and_whitespace():
    assert classes.parse_class_table(" cat \n\ndog\n", "x") == ["cat", "dog"]


def test_new_names_are_appended_sorted_after_existing_ids():
    assert classes.extend_class_table(["zebra", "cat"], ["dog", "cat", "ant"], frozen=False) == [
        "zebra", "cat", "ant", "dog"]


def test_frozen_table_takes_no_new_names():
    assert classes.extend_class_table(["cat"], ["dog"], frozen=True) == ["cat"]


def test_rename_keeps_the_id():
    assert classes.apply_renames(["cat", "dog"], {"dog": "canine"}) == ["cat", "canine"]


def test_rename_onto_an_existing_name_is_an_error():
    with pytest.raises(ValueError, match="ids cannot be merged"):
        classes.apply_renames(["cat", "dog"], {"dog": "cat"})


def _write(root, rel, seed, class_index):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    Image.fromarray(photo_like(np.random.default_rng(seed), 64, 80, class_index)).save(
        buffer, "JPEG", quality=90)
    path.write_bytes(buffer.getvalue())


@pytest.fixture()
def folders(tmp_path):
    root = tmp_path / "images"
    for i in range(3):
        _write(root, f"dog/{i}.jpg", 10 + i, 1)
        _write(root, f"cat/{i}.jpg", 20 + i, 0)
    return root


FAST = ["decode.isolation=inline", "transform.enabled=false"]


def test_ids_survive_a_rerun_with_new_classes(folders, tmp_path):
    out = tmp_path / "out"
    run_job(folders, out, sets=FAST)
    assert (out / "classes.txt").read_text().split() == ["cat", "dog"]
    for i in range(3):
        _write(folders, f"ant/{i}.jpg", 30 + i, 2)
    second = run_job(folders, out, sets=FAST)
    assert (out / "classes.txt").read_text().split() == ["cat", "dog", "ant"]  # ant is new: last
    rows = index_rows(second)
    assert {rows[f"dog/{i}.jpg"]["label_id"] for i in range(3)} == {1}
    assert {rows[f"ant/{i}.jpg"]["label_id"] for i in range(3)} == {2}


def test_frozen_mode_rejects_new_classes(folders, tmp_path):
    out = tmp_path / "out"
    run_job(folders, out, sets=FAST)
    _write(folders, "ant/0.jpg", 30, 2)
    second = run_job(folders, out, sets=FAST + ["classes.frozen=true"])
    assert index_rows(second)["ant/0.jpg"]["reason"] == "unknown_class"
    assert (out / "classes.txt").read_text().split() == ["cat", "dog"]


def test_rename_from_the_config_keeps_the_id(folders, tmp_path):
    out = tmp_path / "out"
    run_job(folders, out, sets=FAST)
    second = run_job(folders, out, sets=FAST + ["classes.renames={dog: canine}"])
    assert (out / "classes.txt").read_text().split() == ["cat", "canine"]
    rows = index_rows(second)
    assert {(rows[f"dog/{i}.jpg"]["label"], rows[f"dog/{i}.jpg"]["label_id"])
            for i in range(3)} == {("canine", 1)}


def test_classes_file_that_reorders_existing_ids_is_refused(folders, tmp_path, capsys):
    out = tmp_path / "out"
    run_job(folders, out, sets=FAST)
    reordered = tmp_path / "classes.txt"
    reordered.write_text("dog\ncat\n")
    code = cli.main(["preprocess", "--data_root", str(folders), "--output_dir", str(out),
                     "--classes", str(reordered)])
    assert code == 2
    assert "class ids never change" in capsys.readouterr().err
