"""Sources: brace expansion, folder grouping and labels, manifests."""

import csv
import json

import pytest
import torch

import loadscope as ls


def test_brace_expansion_like_the_shell():
    assert ls.expand_braces("s-{000..002}.tar") == ["s-000.tar", "s-001.tar", "s-002.tar"]
    assert ls.expand_braces("s-{8..10}.tar") == ["s-8.tar", "s-9.tar", "s-10.tar"]
    assert ls.expand_braces("{a,b}-{0..1}") == ["a-0", "a-1", "b-0", "b-1"]
    assert ls.expand_braces("plain.tar") == ["plain.tar"]
    with pytest.raises(ls.ConfigError, match="cannot expand"):
        ls.expand_braces("s-{x}.tar")


def test_folder_groups_sidecars_and_labels(tmp_path, demo):
    for cls in ("b_dogs", "a_cats"):
        (tmp_path / cls).mkdir()
    jpg = next((demo / "folder").rglob("*.jpg")).read_bytes()
    (tmp_path / "a_cats" / "one.jpg").write_bytes(jpg)
    (tmp_path / "a_cats" / "one.txt").write_text("a cat")
    (tmp_path / "b_dogs" / "two.JPG").write_bytes(jpg)
    (tmp_path / "b_dogs" / "notes.md").write_text("not a sample")
    src = ls.Folder(tmp_path)
    assert src.classes == ["a_cats", "b_dogs"] and len(src) == 2 and src.ignored_files == 1
    loader = ls.Loader(src, fields={"img": ls.Image(16, keys="jpg"), "cls": ls.Int()}, batch_size=2)
    b = next(iter(loader))
    assert b["cls"].tolist() == [0, 1] and b["img"].shape == (2, 3, 16, 16)
    with pytest.raises(ls.FieldError, match="no member 'txt'"):
        list(ls.Loader(src, fields={"txt": ls.Text()}, batch_size=2))
    flat = ls.Folder(tmp_path / "a_cats")
    assert flat.labels == "none" and flat.classes == []


def test_csv_manifest_with_root(tmp_path, demo):
    files = sorted((demo / "folder").rglob("*.jpg"))[:4]
    with open(tmp_path / "m.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "cls", "txt"])
        for i, p in enumerate(files):
            w.writerow([p.relative_to(demo), i, f"caption {i}"])
    src = ls.FileList(tmp_path / "m.csv", root=demo)
    b = next(iter(ls.Loader(src, fields={"jpg": ls.Image(16), "cls": ls.Int(), "txt": ls.Text()}, batch_size=4)))
    assert b["cls"].tolist() == [0, 1, 2, 3]
    assert b["txt"] == [f"caption {i}" for i in range(4)]


def test_jsonl_values_of_any_type_become_members(tmp_path, demo):
    p = next((demo / "folder").rglob("*.jpg"))
    (tmp_path / "m.jsonl").write_text(json.dumps({"path": str(p), "meta": {"a": [1, 2]}, "raw": "bytes!"}) + "\n")
    src = ls.FileList(tmp_path / "m.jsonl")
    b = next(iter(ls.Loader(src, fields={"meta": ls.Json(), "raw": ls.Bytes()}, batch_size=1)))
    assert b["meta"] == [{"a": [1, 2]}] and b["raw"] == [b"bytes!"]
