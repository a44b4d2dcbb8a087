"""transforms.offline.labels: good rows with meta, each bad row kind with its exact detail."""
import pytest

from configs.schema import LabelsConfig
from transforms.offline.csv_records import CsvRecord, read_csv_records
from transforms.offline.labels import LabelRow, parse_label_csv
from transforms.offline.rejects import Reject

CONFIG = LabelsConfig()


def parse(text: str, config: LabelsConfig = CONFIG, name: str = "labels.csv") -> list:
    return list(parse_label_csv(name, text.splitlines(keepends=True), config))


def bad_row(line: int, detail: str, name: str = "labels.csv") -> Reject:
    return Reject(path=f"{name}:{line}", reason="bad_csv_row", detail=detail, kind="label_row")


def test_good_rows_carry_meta_sorted_by_column_name():
    text = ("zeta,path,label,alpha,split\n"
            "z1,cats/a.jpg,cat,a1,train\n"
            "z2,dogs/b.jpg,dog, a2 ,\n")
    assert parse(text) == [
        LabelRow(path="cats/a.jpg", label="cat", split="train",
                 meta=(("alpha", "a1"), ("zeta", "z1")), source="labels.csv:2"),
        LabelRow(path="dogs/b.jpg", label="dog", split=None,
                 meta=(("alpha", " a2 "), ("zeta", "z2")), source="labels.csv:3"),
    ]


def test_split_column_is_optional():
    assert parse("path,label\na.jpg,cat\n") == [
        LabelRow(path="a.jpg", label="cat", split=None, meta=(), source="labels.csv:2")]


def test_path_label_and_split_are_stripped_and_path_normalized():
    assert parse("path,label,split\n ./cats//a.jpg ,  cat , Train \n") == [
        LabelRow(path="cats/a.jpg", label="cat", split="train", meta=(),
                 source="labels.csv:2")]


def test_quoted_fields_keep_delimiters():
    assert parse('path,label,note\n"cats/a, b.jpg",cat,"said ""hi"""\n') == [
        LabelRow(path="cats/a, b.jpg", label="cat", split=None,
                 meta=(("note", 'said "hi"'),), source="labels.csv:2")]


def test_configured_columns_and_delimiter():
    config = LabelsConfig(path_column="file", label_column="class", split_column="subset",
                          delimiter=";")
    assert parse("file;class;subset;path\na.jpg;cat;test;x\n", config) == [
        LabelRow(path="a.jpg", label="cat", split="test", meta=(("path", "x"),),
                 source="labels.csv:2")]


@pytest.mark.parametrize("raw, expected", [
    ("train", "train"), ("TRAIN", "train"), ("training", "train"),
    ("validation", "validation"), ("Val", "validation"), ("valid", "validation"),
    ("eval", "validation"), ("dev", "validation"),
    ("test", "test"), ("Testing", "test"),
    ("", None), ("  ", None),
])
def test_split_values_and_aliases(raw, expected):
    [row] = parse(f"path,label,split\na.jpg,cat,{raw}\n")
    assert row.split == expected


def test_unknown_split_is_a_bad_row_naming_the_allowed_values():
    assert parse("path,label,split\na.jpg,cat,holdout\n") == [bad_row(
        2, "labels.csv line 2: unknown split 'holdout'. Expected one of ('train', 'training', "
           "'validation', 'val', 'valid', 'eval', 'dev', 'test', 'testing') (any case) or "
           "empty. Received: split='holdout'")]


def test_too_few_fields_is_a_bad_row_and_the_rest_of_the_file_is_parsed():
    assert parse("path,label,split\na.jpg\nb.jpg,dog,test\n") == [
        bad_row(2, "labels.csv line 2: expected 3 fields, got 1: 'a.jpg'"),
        LabelRow(path="b.jpg", label="dog", split="test", meta=(), source="labels.csv:3"),
    ]


def test_too_many_fields_is_a_bad_row():
    assert parse("path,label\na.jpg,cat,extra\n") == [
        bad_row(2, "labels.csv line 2: expected 2 fields, got 3: 'a.jpg,cat,extra'")]


def test_long_bad_line_is_truncated_to_200_characters():
    line = "a.jpg," + "x" * 300 + ",y"
    [reject] = parse(f"path,label\n{line}\n")
    shown = line[:197] + "..."
    assert reject == bad_row(2, f"labels.csv line 2: expected 2 fields, got 3: '{shown}'")
    assert len(shown) == 200


def test_bad_quoting_is_a_bad_row_and_the_rest_of_the_file_is_parsed():
    assert parse('path,label\n"a.jpg"x,cat\nb.jpg,dog\n') == [
        bad_row(2, "labels.csv line 2: not valid CSV (',' expected after '\"'): "
                   "'\"a.jpg\"x,cat'"),
        LabelRow(path="b.jpg", label="dog", split=None, meta=(), source="labels.csv:3"),
    ]


def test_quote_left_open_at_end_of_file_is_a_bad_row():
    assert parse('path,label\nb.jpg,dog\n"a.jpg,cat\nc.jpg,cow\n') == [
        LabelRow(path="b.jpg", label="dog", split=None, meta=(), source="labels.csv:2"),
        bad_row(3, "labels.csv line 3: not valid CSV (unexpected end of data): "
                   "'\"a.jpg,cat\nc.jpg,cow'"),
    ]


@pytest.mark.parametrize("line, column", [
    (",cat", "path"), ("  ,cat", "path"), ("a.jpg,", "label"), ("a.jpg, ", "label")])
def test_empty_path_or_label_is_a_bad_row(line, column):
    assert parse(f"path,label\n{line}\n") == [
        bad_row(2, f"labels.csv line 2: empty value in column {column!r}")]


@pytest.mark.parametrize("raw, message", [
    ("/etc/passwd", "absolute path: '/etc/passwd'"),
    ("../x.jpg", "path escapes the data root: '../x.jpg'"),
    ("gs://b/x.jpg", "path has a URL scheme 'gs': 'gs://b/x.jpg'"),
])
def test_unsafe_path_is_rejected_with_the_raw_path(raw, message):
    assert parse(f"path,label\n{raw},cat\n") == [Reject(
        path=raw, reason="unsafe_path", detail=f"{message} (labels.csv line 2)",
        kind="label_row")]


def test_line_numbers_follow_a_multi_line_quoted_field():
    text = 'path,label,note\na.jpg,cat,"line one\nline two\nline three"\nb.jpg,dog,x\nc.jpg\n'
    assert parse(text) == [
        LabelRow(path="a.jpg", label="cat", split=None,
                 meta=(("note", "line one\nline two\nline three"),), source="labels.csv:2"),
        LabelRow(path="b.jpg", label="dog", split=None, meta=(("note", "x"),),
                 source="labels.csv:5"),
        bad_row(6, "labels.csv line 6: expected 3 fields, got 1: 'c.jpg'"),
    ]


def test_lines_without_line_endings_keep_multi_line_fields_and_numbers():
    lines = ["path,label,note", 'a.jpg,cat,"one', 'two"', "", "b.jpg"]
    assert list(parse_label_csv("l.csv", lines, CONFIG)) == [
        LabelRow(path="a.jpg", label="cat", split=None, meta=(("note", "one\ntwo"),),
                 source="l.csv:2"),
        bad_row(5, "l.csv line 5: expected 3 fields, got 1: 'b.jpg'", name="l.csv"),
    ]


def test_crlf_line_endings():
    assert parse("path,label\r\na.jpg,cat\r\n") == [
        LabelRow(path="a.jpg", label="cat", split=None, meta=(), source="labels.csv:2")]


def test_blank_lines_are_skipped_but_counted():
    text = "\npath,label\n\n   \na.jpg,cat\n\nb\n"
    assert parse(text) == [
        LabelRow(path="a.jpg", label="cat", split=None, meta=(), source="labels.csv:5"),
        bad_row(7, "labels.csv line 7: expected 2 fields, got 1: 'b'"),
    ]


def test_utf8_bom_on_the_header_is_stripped():
    assert parse("\ufeffpath,label\na.jpg,cat\n") == [
        LabelRow(path="a.jpg", label="cat", split=None, meta=(), source="labels.csv:2")]


def test_header_names_are_stripped():
    assert parse(" path , label ,note \na.jpg,cat,n\n") == [
        LabelRow(path="a.jpg", label="cat", split=None, meta=(("note", "n"),),
                 source="labels.csv:2")]


def test_missing_label_column_stops_with_file_column_and_header():
    with pytest.raises(ValueError) as info:
        parse("path,class\na.jpg,cat\n")
    assert str(info.value) == (
        "labels.csv: the header has no column 'label'. Required columns: ['path', 'label']. "
        "Received header: ['path', 'class']")


def test_missing_path_column_stops_with_file_column_and_header():
    with pytest.raises(ValueError) as info:
        parse("file,label\na.jpg,cat\n", name="more.csv")
    assert str(info.value) == (
        "more.csv: the header has no column 'path'. Required columns: ['path', 'label']. "
        "Received header: ['file', 'label']")


def test_empty_header_name_stops_the_job():
    with pytest.raises(ValueError) as info:
        parse("path,label,\na.jpg,cat,x\n")
    assert str(info.value) == (
        "labels.csv: the header has an empty column name. Received header: ['path', 'label', '']")


def test_repeated_header_name_stops_the_job():
    with pytest.raises(ValueError) as info:
        parse("path,label,label\na.jpg,cat,dog\n")
    assert str(info.value) == (
        "labels.csv: the header repeats column names ['label']. "
        "Received header: ['path', 'label', 'label']")


def test_empty_file_stops_the_job():
    with pytest.raises(ValueError) as info:
        parse("\n\n")
    assert str(info.value) == (
        "labels.csv: the file is empty, expected a header line with columns ('path', 'label')")


def test_header_only_gives_no_rows():
    assert parse("path,label\n") == []


def test_read_csv_records_returns_header_and_records():
    header, records = read_csv_records("b.csv", ["a;b", "1;2", "3"], ";", ("a",))
    assert header == ("a", "b")
    assert list(records) == [
        CsvRecord(line=2, values={"a": "1", "b": "2"}),
        CsvRecord(line=3, values=None, problem="b.csv line 3: expected 2 fields, got 1: '3'"),
    ]
