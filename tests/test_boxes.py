"""transforms.offline.boxes: box CSV rows and per-image box resolution, each rule its own case."""
import pytest

from configs.schema import BoxesConfig
from transforms.offline.boxes import BadBox, BoxRow, parse_box_csv, resolve_boxes
from transforms.offline.rejects import Reject

HEADER = "path,xmin,ymin,xmax,ymax,label\n"
PIXEL_REJECT = BoxesConfig(coordinates="pixel", on_bad_box="reject")
PIXEL_CLIP = BoxesConfig(coordinates="pixel", on_bad_box="clip")
NORMALIZED_REJECT = BoxesConfig(coordinates="normalized", on_bad_box="reject")
NORMALIZED_CLIP = BoxesConfig(coordinates="normalized", on_bad_box="clip")


def parse(text: str) -> list:
    return list(parse_box_csv("boxes.csv", text.splitlines(keepends=True)))


def bad_row(line: int, detail: str) -> Reject:
    return Reject(path=f"boxes.csv:{line}", reason="bad_csv_row", detail=detail, kind="box_row")


def box(xmin, ymin, xmax, ymax, label="cat", line=2) -> BoxRow:
    return BoxRow(path="a.jpg", xmin=xmin, ymin=ymin, xmax=xmax, ymax=ymax, label=label,
                  source=f"boxes.csv:{line}")


def test_parse_good_rows():
    text = HEADER + "cats/a.jpg,10,20,110,220.5,cat\n ./dogs//b.jpg , 0.1 ,0.2,0.3,0.4, dog \n"
    assert parse(text) == [
        BoxRow(path="cats/a.jpg", xmin=10.0, ymin=20.0, xmax=110.0, ymax=220.5, label="cat",
               source="boxes.csv:2"),
        BoxRow(path="dogs/b.jpg", xmin=0.1, ymin=0.2, xmax=0.3, ymax=0.4, label="dog",
               source="boxes.csv:3"),
    ]


def test_parse_ignores_extra_columns_in_any_order():
    text = "label,note,ymax,xmax,ymin,xmin,path\ncat,hi,4,3,2,1,a.jpg\n"
    assert parse(text) == [box(1.0, 2.0, 3.0, 4.0)]


@pytest.mark.parametrize("value", ["abc", "", "nan", "inf", "-inf"])
def test_parse_non_numeric_coordinate_is_a_bad_row(value):
    assert parse(HEADER + f"a.jpg,1,{value},3,4,cat\nb.jpg,1,2,3,4,dog\n") == [
        bad_row(2, f"boxes.csv line 2: ymin is not a finite number. Received: ymin={value!r}"),
        BoxRow(path="b.jpg", xmin=1.0, ymin=2.0, xmax=3.0, ymax=4.0, label="dog",
               source="boxes.csv:3"),
    ]


def test_parse_wrong_field_count_is_a_bad_row():
    assert parse(HEADER + "a.jpg,1,2,3,cat\n") == [
        bad_row(2, "boxes.csv line 2: expected 6 fields, got 5: 'a.jpg,1,2,3,cat'")]


@pytest.mark.parametrize("line, column", [(",1,2,3,4,cat", "path"), ("a.jpg,1,2,3,4,", "label")])
def test_parse_empty_path_or_label_is_a_bad_row(line, column):
    assert parse(HEADER + line + "\n") == [
        bad_row(2, f"boxes.csv line 2: empty value in column {column!r}")]


def test_parse_unsafe_path_is_rejected_with_the_raw_path():
    assert parse(HEADER + "../x.jpg,1,2,3,4,cat\n") == [Reject(
        path="../x.jpg", reason="unsafe_path",
        detail="path escapes the data root: '../x.jpg' (boxes.csv line 2)", kind="box_row")]


def test_parse_line_numbers_follow_a_multi_line_quoted_label():
    text = HEADER + 'a.jpg,1,2,3,4,"big\ncat"\nb.jpg,1,2,3,4,dog\n'
    bad, good = parse(text)  # a label that spans lines is no class name (issue 9, case 3)
    assert (bad.reason, bad.path) == ("bad_label", "a.jpg")
    assert bad.detail.startswith("boxes.csv line 2: the label contains U+000A")
    assert good.source == "boxes.csv:4"


def test_parse_missing_column_stops_the_job():
    with pytest.raises(ValueError) as info:
        parse("path,xmin,ymin,xmax,label\n")
    assert str(info.value) == (
        "boxes.csv: the header has no column 'ymax'. Required columns: "
        "['path', 'xmin', 'ymin', 'xmax', 'ymax', 'label']. "
        "Received header: ['path', 'xmin', 'ymin', 'xmax', 'label']")


def test_resolve_pixel_coordinates_are_divided_by_the_image_size():
    assert resolve_boxes([box(10, 20, 110, 220)], 200, 400, PIXEL_REJECT) == [
        (0.05, 0.05, 0.55, 0.55, "cat")]


def test_resolve_normalized_coordinates_are_kept():
    assert resolve_boxes([box(0.1, 0.2, 0.3, 0.4)], 200, 400, NORMALIZED_REJECT) == [
        (0.1, 0.2, 0.3, 0.4, "cat")]


def test_resolve_whole_image_box_is_kept():
    assert resolve_boxes([box(0, 0, 200, 400)], 200, 400, PIXEL_REJECT) == [
        (0.0, 0.0, 1.0, 1.0, "cat")]


def test_resolve_no_rows_gives_no_boxes():
    assert resolve_boxes([], 200, 400, PIXEL_REJECT) == []


def test_resolve_sorts_by_coordinates_then_label():
    rows = [box(0.5, 0.1, 0.9, 0.9, "dog", 2), box(0.1, 0.5, 0.4, 0.9, "cat", 3),
            box(0.1, 0.2, 0.4, 0.9, "zebra", 4), box(0.1, 0.2, 0.4, 0.9, "ant", 5)]
    assert resolve_boxes(rows, 10, 10, NORMALIZED_REJECT) == [
        (0.1, 0.2, 0.4, 0.9, "ant"), (0.1, 0.2, 0.4, 0.9, "zebra"),
        (0.1, 0.5, 0.4, 0.9, "cat"), (0.5, 0.1, 0.9, 0.9, "dog")]


@pytest.mark.parametrize("config", [PIXEL_REJECT, PIXEL_CLIP])
@pytest.mark.parametrize("coordinates", [(110, 20, 10, 220), (10, 20, 10, 220),
                                         (10, 220, 110, 20)])
def test_resolve_inverted_box_is_bad_even_when_clipping(config, coordinates):
    with pytest.raises(BadBox) as info:
        resolve_boxes([box(*coordinates)], 200, 400, config)
    xmin, ymin, xmax, ymax = coordinates
    assert str(info.value) == (
        f"inverted or empty box at boxes.csv:2 (pixel xmin={xmin}, ymin={ymin}, xmax={xmax}, "
        f"ymax={ymax}, label='cat'; image 200x400): xmax must exceed xmin and ymax must "
        f"exceed ymin")


def test_resolve_outside_box_is_bad_when_rejecting():
    with pytest.raises(BadBox) as info:
        resolve_boxes([box(-5, 20, 110, 220)], 200, 400, PIXEL_REJECT)
    assert str(info.value) == (
        "box at boxes.csv:2 (pixel xmin=-5, ymin=20, xmax=110, ymax=220, label='cat'; "
        "image 200x400) reaches outside the image")


def test_resolve_outside_box_is_clipped_when_clipping():
    assert resolve_boxes([box(-5, 20, 300, 500)], 200, 400, PIXEL_CLIP) == [
        (0.0, 0.05, 1.0, 1.0, "cat")]


def test_resolve_normalized_box_past_one_is_bad_when_rejecting():
    with pytest.raises(BadBox) as info:
        resolve_boxes([box(0.5, 0.5, 1.01, 0.9)], 200, 400, NORMALIZED_REJECT)
    assert str(info.value) == (
        "box at boxes.csv:2 (normalized xmin=0.5, ymin=0.5, xmax=1.01, ymax=0.9, "
        "label='cat'; image 200x400) reaches outside the image")


def test_resolve_overshoot_within_tolerance_is_clipped_even_when_rejecting():
    assert resolve_boxes([box(-1e-7, 0.5, 1 + 1e-7, 0.9)], 200, 400, NORMALIZED_REJECT) == [
        (0.0, 0.5, 1.0, 0.9, "cat")]


def test_resolve_box_entirely_outside_has_no_area_after_clipping():
    with pytest.raises(BadBox) as info:
        resolve_boxes([box(210, 20, 300, 220)], 200, 400, PIXEL_CLIP)
    assert str(info.value) == (
        "box at boxes.csv:2 (pixel xmin=210, ymin=20, xmax=300, ymax=220, label='cat'; "
        "image 200x400) has no area inside the image after clipping")


def test_resolve_names_the_first_bad_box_of_several():
    rows = [box(10, 20, 110, 220, line=2), box(10, 20, 110, 500, line=3)]
    with pytest.raises(BadBox) as info:
        resolve_boxes(rows, 200, 400, PIXEL_REJECT)
    assert str(info.value).startswith("box at boxes.csv:3 ")


def test_bad_box_is_a_value_error():
    assert issubclass(BadBox, ValueError)


@pytest.mark.parametrize("width, height, detail", [
    (0, 400, "image width must be a positive int. Received: width=0"),
    (200, -1, "image height must be a positive int. Received: height=-1"),
    (200.0, 400, "image width must be a positive int. Received: width=200.0"),
])
def test_resolve_refuses_a_bad_image_size(width, height, detail):
    with pytest.raises(ValueError) as info:
        resolve_boxes([box(1, 2, 3, 4)], width, height, PIXEL_REJECT)
    assert str(info.value) == detail
