"""Manifests and folders as columns (issue 18): the C++ parser against Python's json and csv
modules, bad rows named by line or counted, the cache file, the folder scan against
torchvision's ImageFolder."""

import csv
import io
import json
import os
import pickle
import random
import warnings

import pytest

import loadscope as ls


def rows(source):
    """(key, {member: (is_path, value)}) of every row, in order, as str."""
    out = []
    for key, members in source._samples:
        out.append((os.fsdecode(key), {m: (p, os.fsdecode(v) if p else v.decode()) for m, p, v in members}))
    return out


def random_value(rng, depth=0):
    kind = rng.randrange(9 if depth < 2 else 6)
    if kind == 0:
        return rng.randrange(-10**6, 10**6)
    if kind == 1:
        return rng.choice([0, -1, 2**63 - 1, -2**63, 2**63, 10**30, -2**64])  # int64's edges and beyond
    if kind == 2:
        return rng.choice([0.5, -1e-300, 1e300, 3.0, 2.5e-5])
    if kind == 3:
        return rng.choice([True, False, None])
    if kind in (4, 5):
        alphabet = "abc xyz\"\\/\n\t\u00e9\u4e2d\U0001F600\u2028\x01"
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))
    if kind == 6:
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(3))]
    if kind == 7:
        return {f"k{i}": random_value(rng, depth + 1) for i in range(rng.randrange(3))}
    return rng.choice(["007", "12", "-0", "-5", "+3", " 4"])  # strings that look like integers, or nearly


def test_jsonl_rows_are_what_pythons_json_reads(tmp_path):
    """A thousand random rows over four chunk sizes of the parallel parser (escapes, surrogate
    pairs, nested values, int64's edges, missing and repeated keys, blank lines, a BOM): every
    member is the row's value — a string's text, any other value's JSON, which json.loads reads
    back to the same value — and an absent key is an absent member."""
    rng = random.Random(0)
    lines, records = [], []
    for i in range(1000):
        rec = {"path": f"d{i % 7}/img {i}.{rng.choice(['jpg', 'PNG', 'tar.gz'])}"}
        for k in rng.sample(["cls", "txt", "meta", "Score", "n"], rng.randrange(6)):
            rec[k] = random_value(rng)
        text = json.dumps(rec, ensure_ascii=rng.random() < 0.5, separators=rng.choice([(",", ":"), (", ", ": ")]))
        if i % 97 == 0:
            text = text[:-1] + ', "cls": 5}'  # a repeated key: the last one counts, as in json.loads
            rec["cls"] = 5
        lines.append(text)
        records.append(rec)
        if i % 50 == 0:
            lines.append("   ")
    body = "\ufeff" + "\n".join(lines) + "\n"
    (tmp_path / "m.jsonl").write_text(body, encoding="utf-8")
    src = ls.FileList(tmp_path / "m.jsonl", root="/data", cache_dir=None)
    got = rows(src)
    assert len(got) == len(records) == len(src)
    for (key, members), rec in zip(got, records):
        path = os.path.join("/data", rec["path"])
        ext = os.path.splitext(path)[1][1:].lower()
        assert key == path and members.pop(ext) == (True, path)
        want = {k.lower(): v for k, v in rec.items() if k != "path"}
        assert set(members) == set(want), (key, members, want)
        for k, v in want.items():
            is_path, text = members[k]
            assert not is_path
            assert text == v if isinstance(v, str) else json.loads(text) == v, (key, k, text, v)


def test_csv_rows_are_what_pythons_csv_reads(tmp_path):
    """Quoted commas, quotes, newlines and CRLFs inside fields, a BOM, blank lines: the rows of
    csv.DictReader, in order; integers stay text where Python would write them otherwise."""
    rng = random.Random(1)
    buf = io.StringIO(newline="")
    w = csv.writer(buf, lineterminator=rng.choice(["\r\n", "\n"]))
    w.writerow(["path", "cls", "txt", "Note"])
    for i in range(300):
        w.writerow([f"x/{i}.jpg", rng.choice([str(i), "007", "-0", "", "-9223372036854775808"]),
                    rng.choice(["a, b", 'say "hi"', "line\nbreak", "crlf\r\nin", "caf\u00e9", ""]), i * 3])
        if i % 40 == 0:
            buf.write("\n")
    (tmp_path / "m.csv").write_text("\ufeff" + buf.getvalue(), encoding="utf-8", newline="")
    with open(tmp_path / "m.csv", encoding="utf-8-sig", newline="") as f:
        ref = list(csv.DictReader(f))
    got = rows(ls.FileList(tmp_path / "m.csv", cache_dir=None))
    assert len(got) == len(ref) == 300
    for (key, members), r in zip(got, ref):
        assert key == os.path.join(str(tmp_path), r["path"])
        assert members == {"jpg": (True, key), "cls": (False, r["cls"]), "txt": (False, r["txt"]),
                           "note": (False, r["Note"])}


BAD_JSONL = [
    ('{"path": "a.jpg", "cls": }', "not JSON"),
    ('{"path": "a.jpg"} x', "extra data"),
    ('["a.jpg"]', "not a JSON object"),
    ('{"file": "a.jpg"}', "no 'path' field"),
    ('{"path": 3}', "'path' must be a string"),
    ('{"path": "noext"}', "has no extension"),
    ('{"path": "a.jpg", "JPG": "x"}', "has the name of the file's own member"),
    ('{"path": "a.jpg", "t": "\\ud800"}', "lone surrogate"),
    ('{"path": "ftp://h/a.jpg"}', "no storage for ftp:// names \\(there are: http://, https://, s3:// and local"),
    ('{"path": "http://user:pw@h/a.jpg"}', "credentials"),
    ('{"path": "a.jpg", "t": "tab\there"}', "control character"),
    ("[" * 600 + "]" * 600, "nested deeper"),
]


@pytest.mark.parametrize("line,reason", BAD_JSONL, ids=[r for _, r in BAD_JSONL])
def test_a_bad_jsonl_row_is_named_by_its_line_or_skipped(tmp_path, line, reason):
    good = '{"path": "ok.jpg", "cls": 1}'
    (tmp_path / "m.jsonl").write_text("\n".join([good, "", good, line, good]) + "\n")
    with pytest.raises(ls.ConfigError, match=rf"m\.jsonl:4: .*{reason}"):
        ls.FileList(tmp_path / "m.jsonl", cache_dir=None)
    with pytest.warns(UserWarning, match=r"skipped 1 bad row.*m\.jsonl:4: "):
        src = ls.FileList(tmp_path / "m.jsonl", on_error="skip", cache_dir=None)
    assert len(src) == 3 and src.skipped_rows == 1 and reason.split()[0] in src.skip_notes[0]


def test_rows_that_are_not_utf8_or_too_long_are_named(tmp_path):
    """Bytes that are not UTF-8 and a 1 GB line (a hole in a sparse file: nothing is written)
    fail with their line, or are skipped; the rows after them are read."""
    good = b'{"path": "ok.jpg"}\n'
    (tmp_path / "u.jsonl").write_bytes(good + b'{"path": "caf\xe9.jpg"}\n' + good)
    with pytest.raises(ls.ConfigError, match=r"u\.jsonl:2: the row is not UTF-8"):
        ls.FileList(tmp_path / "u.jsonl", cache_dir=None)
    (tmp_path / "u.csv").write_bytes(b"path,t\nok.jpg,a\nok.jpg,\xff\n")
    with pytest.raises(ls.ConfigError, match=r"u\.csv:3: the row is not UTF-8"):
        ls.FileList(tmp_path / "u.csv", cache_dir=None)
    with open(tmp_path / "big.jsonl", "wb") as f:
        f.write(good)
        f.seek(1 << 30, os.SEEK_CUR)
        f.write(b"\n" + good)
    with pytest.raises(ls.ConfigError, match=r"big\.jsonl:2: the row is 1073741824 bytes, over the 16 MiB"):
        ls.FileList(tmp_path / "big.jsonl", cache_dir=None)
    with pytest.warns(UserWarning, match="skipped 1 bad row"):
        assert len(ls.FileList(tmp_path / "big.jsonl", on_error="skip", cache_dir=None)) == 2


@pytest.mark.parametrize("text,reason,line", [
    ("path,cls\na.jpg,1\nb.jpg\n", "the row has 1 fields, the header 2", 3),
    ("path,cls\na.jpg,1\n\"b.jpg\"x,2\nc.jpg,3\n", "followed by more text", 3),
    ("path,cls\na.jpg,1\nb.jpg,\"2\n", "not closed before the end of the file", 3),
    ("path,cls\n\"multi\nline.jpg\",1\nc.jpg,3,4\n", "the row has 3 fields", 4),
])
def test_a_bad_csv_row_is_named_by_the_line_it_starts_on(tmp_path, text, reason, line):
    (tmp_path / "m.csv").write_text(text)
    with pytest.raises(ls.ConfigError, match=rf"m\.csv:{line}: .*{reason}"):
        ls.FileList(tmp_path / "m.csv", cache_dir=None)
    with pytest.warns(UserWarning, match="skipped 1 bad row"):
        assert ls.FileList(tmp_path / "m.csv", on_error="skip", cache_dir=None).skipped_rows == 1


def test_a_csv_header_without_the_path_column_is_refused(tmp_path):
    (tmp_path / "m.csv").write_text("file,cls\na.jpg,1\n")
    with pytest.raises(ls.ConfigError, match=r"m\.csv:1: the header has no 'path' column \(found: 'file', 'cls'\)"):
        ls.FileList(tmp_path / "m.csv", on_error="skip", cache_dir=None)
    with pytest.raises(ls.ConfigError, match="on_error='ignore'.*allowed are 'raise', 'skip'"):
        ls.FileList(tmp_path / "m.csv", on_error="ignore")


def test_the_cache_file_is_used_until_the_manifest_changes(tmp_path):
    """The second open maps the cache file (same rows); appending a row, rewriting with the same
    size, a new root or a damaged cache file each mean a fresh parse."""
    m = tmp_path / "m.jsonl"
    m.write_text("".join(json.dumps({"path": f"{i}.jpg", "cls": i, "t": "x" * (i % 3)}) + "\n" for i in range(100)))
    cache = tmp_path / "cache"
    first = ls.FileList(m, cache_dir=cache)
    assert not first.from_cache and os.path.isfile(first.cache_path)
    again = ls.FileList(m, cache_dir=cache)
    assert again.from_cache and rows(again) == rows(first)
    assert again.bytes_per_sample < 40  # 8 (path end) + 8 (cls) + 8 (t end) + the bytes
    with open(m, "a") as f:
        f.write(json.dumps({"path": "new.jpg", "cls": 100}) + "\n")
    grown = ls.FileList(m, cache_dir=cache)
    assert not grown.from_cache and len(grown) == 101 and rows(grown)[-1][1]["cls"] == (False, "100")
    text = m.read_text()
    m.write_text(text.replace('"cls": 7,', '"cls": 8,'))  # same size, another mtime
    changed = ls.FileList(m, cache_dir=cache)
    assert not changed.from_cache and rows(changed)[7][1]["cls"] == (False, "8")
    assert not ls.FileList(m, root="/elsewhere", cache_dir=cache).from_cache
    with open(changed.cache_path, "r+b") as f:
        f.truncate(os.path.getsize(changed.cache_path) // 2)
    damaged = ls.FileList(m, cache_dir=cache)
    assert not damaged.from_cache and rows(damaged) == rows(changed)
    assert ls.FileList(m, cache_dir=cache).from_cache


def test_a_cache_that_cannot_be_written_is_a_warning(tmp_path):
    """Root may write anywhere, so the failures are made by what lies in the way: a file where
    the cache directory should be, a directory where the cache file should be."""
    m = tmp_path / "m.jsonl"
    m.write_text('{"path": "a.jpg"}\n')
    (tmp_path / "file").write_text("")
    with pytest.warns(UserWarning, match="no manifest cache"):
        assert len(ls.FileList(m, cache_dir=tmp_path / "file")) == 1
    first = ls.FileList(m, cache_dir=tmp_path / "c")
    os.remove(first.cache_path)
    os.mkdir(first.cache_path)
    with pytest.warns(UserWarning, match="could not write the manifest cache"):
        src = ls.FileList(m, cache_dir=tmp_path / "c")
    assert len(src) == 1 and src.cache_path is None and not src.from_cache


def test_a_file_list_travels_by_pickle(tmp_path):
    m = tmp_path / "m.jsonl"
    m.write_text("".join(json.dumps({"path": f"{i}.png", "cls": i}) + "\n" for i in range(10)))
    src = ls.FileList(m, cache_dir=tmp_path / "c")
    back = pickle.loads(pickle.dumps(src))
    assert back.from_cache and rows(back) == rows(src)
    folder = tmp_path / "f"
    (folder / "a").mkdir(parents=True)
    (folder / "a" / "x.jpg").write_bytes(b"")
    assert rows(pickle.loads(pickle.dumps(ls.Folder(folder)))) == rows(ls.Folder(folder))


def test_a_shuffled_epoch_shows_every_row_once_in_an_order_of_its_own(tmp_path):
    """The computed permutation: every row exactly once, for sizes around its power-of-two
    domains; another epoch or seed gives another order; the same seed and epoch the same."""
    for n in (1, 2, 3, 255, 256, 257, 1000):
        m = tmp_path / f"m{n}.jsonl"
        m.write_text("".join(json.dumps({"path": f"{i}.txt", "i": i}) + "\n" for i in range(n)))
        src = ls.FileList(m, cache_dir=None)

        def order(seed, epoch, src=src):
            loader = ls.Loader(src, fields={"i": ls.Int()}, batch_size=64, shuffle=True, seed=seed)
            loader.set_epoch(epoch)
            return [i for b in loader for i in b["i"].tolist()]

        a = order(0, 0)
        assert sorted(a) == list(range(n))
        assert order(0, 0) == a
        if n >= 255:
            assert order(0, 1) != a and order(1, 0) != a and a != list(range(n))


def write_tree(root, files):
    for rel in files:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x")


def test_folder_order_is_imagefolders_in_nested_trees(tmp_path):
    """Directories sort by path as sorted(os.walk(...)) does ("a-b" before "a/..."), files by
    name; symlinked directories are followed; a link back to an ancestor is entered once."""
    from torchvision.datasets import ImageFolder

    rng = random.Random(2)
    names = ["a", "a-b", "a.b", "a b", "B", "_", "z9", "\u00e9"]
    files = []
    for c in ("cat", "cat-2", "dog"):
        for _ in range(60):
            parts = [rng.choice(names) for _ in range(rng.randrange(4))]
            files.append("/".join([c, *parts, rng.choice(names) + rng.choice([".jpg", ".JPEG", ".png", ".txt"])]))
    write_tree(tmp_path / "t", files)
    os.symlink(tmp_path / "t" / "dog" / "a", tmp_path / "t" / "cat" / "linked")
    ref = ImageFolder(str(tmp_path / "t"), loader=lambda p: p)
    src = ls.Folder(tmp_path / "t")
    assert src.classes == ref.classes
    assert [(k, int(m["cls"][1])) for k, m in rows(src)] == ref.samples
    before = [k for k, _ in rows(ls.Folder(tmp_path / "t" / "dog", labels="none"))]
    os.symlink(tmp_path / "t" / "dog", tmp_path / "t" / "dog" / "a" / "loop")
    after = [k for k, _ in rows(ls.Folder(tmp_path / "t" / "dog", labels="none"))]
    assert after == before


def test_folder_sidecars_and_what_it_ignores(tmp_path):
    write_tree(tmp_path, ["a.jpg", "a.txt", "a.seg.png", "a.json", "b.png", "b.txt", "c.md", ".jpg", "d.tar.gz"])
    src = ls.Folder(tmp_path, labels="none")
    got = rows(src)
    assert [os.path.basename(k) for k, _ in got] == [".jpg", "a.jpg", "a.seg.png", "b.png"]
    assert sorted(got[1][1]) == ["jpg", "json", "txt"] and sorted(got[3][1]) == ["png", "txt"]
    assert src.ignored_files == 2  # c.md and d.tar.gz
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ls.Folder(tmp_path, labels="none", extensions=[".md"]).ignored_files == 8


def test_a_remote_manifest_is_parsed_once_per_node(http_server, http_root):
    """Over HTTP the cache file is keyed by the URL and the object's ETag: the second open asks
    for the size and the two 8 KiB ends, not the manifest."""
    from loadscope import _native

    (http_root / "big.jsonl").write_text("".join(json.dumps({"path": f"{i}.jpg"}) + "\n" for i in range(5000)))
    url = f"{http_server['LOADSCOPE_HTTP_URL']}/big.jsonl"
    first = ls.FileList(url)
    _native.reset_network_stats()
    again = ls.FileList(url)
    stats = _native.network_stats()
    assert not first.from_cache and again.from_cache and rows(again) == rows(first)
    assert rows(again)[3][0] == f"{http_server['LOADSCOPE_HTTP_URL']}/3.jpg"
    assert stats["bytes"] <= 2 * 8192, stats


def test_a_large_cache_file_is_written_in_the_background_and_before_exit(tmp_path):
    """Past 64 MB of table the cache file is written behind the caller's back; a process that
    exits right after making the FileList still leaves it for the next one."""
    import subprocess
    import sys

    m = tmp_path / "big.jsonl"
    with open(m, "w") as f:
        for start in range(0, 1_300_000, 100_000):
            f.write("".join(f'{{"path": "train/n{i % 1000:08d}/n{i % 1000:08d}_{i:08d}.JPEG", "cls": {i % 1000}}}\n'
                            for i in range(start, start + 100_000)))
    probe = ("import json, sys, loadscope as ls\n"
             "s = ls.FileList(sys.argv[1], cache_dir=sys.argv[2])\n"
             "print(json.dumps([s.from_cache, s.cache_pending, len(s), s.bytes_per_sample]))\n")
    runs = [json.loads(subprocess.run([sys.executable, "-c", probe, str(m), str(tmp_path / "c")], capture_output=True,
                                      text=True, check=True, timeout=300).stdout) for _ in range(2)]
    assert runs[0][:3] == [False, True, 1_300_000] and runs[0][3] * 1_300_000 > 64 << 20
    assert runs[1][:3] == [True, False, 1_300_000]
    assert not [p for p in os.listdir(tmp_path / "c") if ".tmp." in p]


def test_line_ends_and_blank_lines_as_python_reads_text(tmp_path):
    """A lone \\r ends a line (Python's newline=""), \\r\\n is one end, and a line of Unicode
    spaces is blank; line numbers count the same way."""
    (tmp_path / "m.jsonl").write_bytes(b'{"path": "a.jpg"}\r{"path": "b.jpg"}\r\n\r'
                                       b'\xc2\xa0\xe3\x80\x80\n{"path": "c.jpg"}\n{"path": 1}\n')
    with pytest.raises(ls.ConfigError, match=r"m\.jsonl:6: 'path' must be a string"):
        ls.FileList(tmp_path / "m.jsonl", cache_dir=None)
    with pytest.warns(UserWarning):
        src = ls.FileList(tmp_path / "m.jsonl", on_error="skip", cache_dir=None)
    assert [os.path.basename(k) for k, _ in rows(src)] == ["a.jpg", "b.jpg", "c.jpg"]
    (tmp_path / "q.csv").write_text('path,cls\n\n""\nok.jpg,1\n')  # a quoted empty path is a row, a blank line is not
    with pytest.raises(ls.ConfigError, match=r"q\.csv:3: the row has 1 fields"):
        ls.FileList(tmp_path / "q.csv", cache_dir=None)


def test_a_source_that_changed_since_pickling_is_refused(tmp_path):
    """A spawned worker or another rank unpickles the source and reads the list again: when it
    is not the same list any more, it says so instead of reading other samples."""
    m = tmp_path / "m.jsonl"
    m.write_text("".join(json.dumps({"path": f"{i}.png"}) + "\n" for i in range(5)))
    data = pickle.dumps(ls.FileList(m, cache_dir=None))
    with open(m, "a") as f:
        f.write(json.dumps({"path": "new.png"}) + "\n")
    with pytest.raises(ls.ConfigError, match="changed between pickling and unpickling"):
        pickle.loads(data)
    write_tree(tmp_path / "f", ["a/x.jpg", "a/y.jpg"])
    data = pickle.dumps(ls.Folder(tmp_path / "f"))
    os.rename(tmp_path / "f" / "a" / "y.jpg", tmp_path / "f" / "a" / "z.jpg")  # same count, other names
    with pytest.raises(ls.ConfigError, match="changed between pickling and unpickling"):
        pickle.loads(data)


def test_a_process_forked_after_a_scan_loads_with_threads(tmp_path, real):
    """The scan and the parse run oneTBB tasks in an arena whose workers are joined after, so a
    DataLoader worker forked later can run its own threads (a live worker pool would hang it)."""
    import multiprocessing

    jpg = (real / "imageio/chelsea.jpg").read_bytes()
    for c in ("a", "b"):
        for i in range(8):
            (tmp_path / c).mkdir(exist_ok=True)
            (tmp_path / c / f"{i}.jpg").write_bytes(jpg)
    m = tmp_path / "m.jsonl"
    m.write_text("".join(json.dumps({"path": f"a/{i}.jpg", "cls": i}) + "\n" for i in range(8)) * 20000)
    src = ls.FileList(m, cache_dir=None)  # 160000 rows: several chunks in parallel
    folder = ls.Folder(tmp_path, extensions=[".jpg"])

    def child(q):
        n = 0
        for s in (folder, src):
            it = iter(ls.Loader(s, fields={"jpg": ls.Image(16)}, batch_size=8, threads=2))
            n += len(next(it)["jpg"]) + len(next(it)["jpg"])
        q.put(n)

    q = multiprocessing.get_context("fork").Queue()
    p = multiprocessing.get_context("fork").Process(target=child, args=(q,))
    p.start()
    p.join(120)
    if p.is_alive():
        p.kill()
        pytest.fail("the forked child hung")
    assert p.exitcode == 0 and q.get(timeout=5) == 32
