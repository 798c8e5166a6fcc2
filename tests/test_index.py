"""Approximate search (`bertkit index`, `VectorIndex`): HNSW over float, int8 and binary vectors finds what exact
search finds, keeps the vectors' record, is written atomically, never replaces a file that is not an index without
--overwrite, resumes and extends, and refuses in one line what would not compare."""

import doctest
import json
import sys
import zipfile

import httpx
import numpy as np
import pytest
import warm
from conftest import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("faiss", reason="the index extra (pip install 'bertkit[index]') is not installed")

from bertkit.encoder.compact import compact, int8_ranges  # noqa: E402
from bertkit.errors import InputError  # noqa: E402
from bertkit.tasks import index as index_module  # noqa: E402
from bertkit.tasks import index_build  # noqa: E402
from bertkit.tasks.index import VectorIndex, load_index  # noqa: E402
from bertkit.tasks.index_build import build_index  # noqa: E402
from bertkit.tasks.search import semantic_search  # noqa: E402

OUTPUTS = ("float32", "float16", "int8", "binary")


@pytest.fixture(scope="module")
def texts():
    from bertkit.io.readers import read_labelled, sample_path

    return read_labelled(sample_path("reviews.tsv"), "text", "label").texts


@pytest.fixture(scope="module")
def vector_files(tmp_path_factory, encoder, texts):
    """The sample reviews embedded by `embed_file` in each output type: {output: path}."""
    from bertkit.io.stream import embed_file

    folder = tmp_path_factory.mktemp("vectors")
    source = folder / "reviews.txt"
    source.write_text("\n".join(texts) + "\n")
    files = {}
    for output in OUTPUTS:
        files[output] = folder / f"{output}.npz"
        embed_file(encoder, source, files[output], output_type=output, normalize_embeddings=True, truncate_dim=256)
    return files


def recall(found, exact) -> float:
    return float(
        np.mean([len({h["corpus_id"] for h in f} & {h["corpus_id"] for h in e}) / len(e) for f, e in zip(found, exact)])
    )


@pytest.mark.parametrize("output", OUTPUTS)
def test_an_index_finds_what_exact_search_finds_and_keeps_the_record(vector_files, encoder, texts, tmp_path, output):
    from bertkit.io.vectors import read_vectors

    report = build_index(vector_files[output], tmp_path / "corpus.index")
    assert report.rows == report.added == len(texts) and report.resumed_from == 0
    index = load_index(tmp_path / "corpus.index")
    vectors, ids, meta = read_vectors(vector_files[output])
    for key in ("model", "fingerprint", "layers", "pooling", "prompt", "truncate_dim", "dim", "output", "ranges"):
        assert index.meta[key] == meta[key], key
    assert index.meta["metric"] == "cosine" and index.meta["hnsw"]["m"] == index_module.HNSW_M
    np.testing.assert_array_equal(index.ids, ids)
    queries = index.embed_queries(encoder, texts[:12])
    floats = encoder.embed(texts, normalize_embeddings=True, truncate_dim=256)
    exact = semantic_search(queries, floats, top_k=5)
    found = index.search(queries, top_k=5)
    assert [hits[0]["corpus_id"] for hits in found] == list(range(12))  # each review finds itself first
    assert recall(found, exact) >= {"binary": 0.7}.get(output, 0.95)
    if output in ("float32", "float16"):  # scores are the exact cosines of the stored vectors
        for hits, query in zip(found, queries):
            expected = floats[[h["corpus_id"] for h in hits]] @ query
            np.testing.assert_allclose([h["score"] for h in hits], expected, atol=2e-3)
    assert semantic_search(queries, index=index, top_k=5) == found


def test_int8_indexes_keep_bertkits_buckets_and_rescore_with_the_float_query(caplog):
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(300, 32)).astype(np.float32)
    ranges = int8_ranges(vectors)
    index = VectorIndex.create({"dim": 32, "output": "int8", "ranges": ranges.tolist()}, metric="dot")
    index.add(compact(vectors, "int8", ranges), np.arange(300))
    import faiss

    codes = faiss.vector_to_array(faiss.downcast_index(index.engine.graph.storage).codes).reshape(300, 32)
    np.testing.assert_array_equal(codes, compact(vectors, "uint8", ranges))  # faiss's codes are bertkit's buckets
    queries = rng.normal(size=(5, 32)).astype(np.float32)
    steps = (ranges[1] - ranges[0]) / 255
    midpoints = (compact(vectors, "uint8", ranges) + 0.5) * steps + ranges[0]
    for hits, query in zip(index.search(queries, top_k=3), queries):
        np.testing.assert_allclose(
            [h["score"] for h in hits], midpoints[[h["corpus_id"] for h in hits]] @ query, rtol=1e-4
        )
    cosine = VectorIndex.create({"dim": 32, "output": "int8", "ranges": ranges.tolist()}, metric="cosine")
    assert "not unit length" not in caplog.text  # by dot product: lengths count
    cosine.add(compact(vectors, "int8", ranges), np.arange(300))  # vectors of length about 5.6, not 1
    assert "these int8 vectors are not unit length" in caplog.text and "normalize_embeddings=True" in caplog.text
    for multiplier in (0, 4):
        for hits, query in zip(cosine.search(queries, top_k=3, rescore_multiplier=multiplier), queries):
            rows = midpoints[[h["corpus_id"] for h in hits]]
            want = rows @ query / np.linalg.norm(rows, axis=1) / np.linalg.norm(query)
            np.testing.assert_allclose([h["score"] for h in hits], want, rtol=1e-4)


def test_bertkit_index_and_search_on_the_command_line(vector_files, monkeypatch, capsys, tmp_path):
    target = tmp_path / "reviews.index"
    code, _, err = run_cli(monkeypatch, capsys, "index", vector_files["binary"], "-o", target)
    assert code == 0 and "vectors" in err, err
    code, out, err = run_cli(monkeypatch, capsys, "search", target, "a dull, lifeless film", "-k", "3")
    assert code == 0, err
    assert "approximate search (HNSW, cosine)" in err and "rescore multiplier 4" in err
    assert len(out.splitlines()) == 4 and out.startswith("query\trank\tid\tscore")
    code, quiet, err = run_cli(monkeypatch, capsys, "-q", "search", target, "a dull, lifeless film", "-k", "3")
    assert code == 0 and quiet == out and err == ""  # -q: warnings and errors only
    code, _, err = run_cli(monkeypatch, capsys, "-q", "index", vector_files["binary"], "-o", target)
    assert code == 0 and err == ""
    code, out, err = run_cli(monkeypatch, capsys, "-q", "search", target, "a dull film", "--metric", "dot")
    assert code == 2 and err.count("error:") == 1 and "built for cosine" in err


def test_an_index_is_written_atomically_and_replaces_only_what_it_may(vector_files, monkeypatch, capsys, tmp_path):
    mine = tmp_path / "notes.txt"
    mine.write_text("my notes")
    code, _, err = run_cli(monkeypatch, capsys, "index", vector_files["float32"], "-o", mine)
    assert code == 2 and "notes.txt already exists; nothing was touched" in err and mine.read_text() == "my notes"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]  # no temporary left behind
    code, _, err = run_cli(monkeypatch, capsys, "index", vector_files["float32"], "-o", tmp_path)
    assert code == 2 and "is a directory" in err
    code, _, err = run_cli(monkeypatch, capsys, "index", vector_files["float32"], "-o", mine, "--overwrite")
    assert code == 0, err
    assert load_index(mine).rows > 0 and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    code, _, err = run_cli(monkeypatch, capsys, "index", vector_files["int8"], "-o", mine)
    assert code == 2 and "indexes other vectors (output, ranges differ)" in err and "--overwrite" in err
    index, theirs = load_index(mine), tmp_path / "theirs.txt"
    theirs.write_text("their notes")
    for taken in (theirs, mine):  # a file of the user's or an index: any file there is refused without overwrite
        with pytest.raises(InputError, match=f"{taken.name} already exists; nothing was touched"):
            index.save(taken)
    assert theirs.read_text() == "their notes"
    assert load_index(index.save(mine, overwrite=True)).rows == load_index(index.save(theirs, overwrite=True)).rows
    assert load_index(mine).rows == index.rows
    (tmp_path / "notes.tsv").write_text("my\tnotes\n")
    code, _, err = run_cli(monkeypatch, capsys, "search", tmp_path / "notes.tsv", "a film")
    assert (
        code == 2 and "nor an index of `bertkit index`" in err and "--overwrite" not in err
    )  # a user's file in the index's place: no advice to replace it
    with pytest.raises(InputError, match=r"not a bertkit index; build one beside it: .* -o \S*notes\.index`"):
        load_index(tmp_path / "notes.tsv")  # as `serve --index` loads it: advice that bertkit would follow
    code, _, err = run_cli(monkeypatch, capsys, "index", vector_files["float32"], "-o", tmp_path / "notes.index")
    assert code == 0, err


def test_a_build_resumes_after_an_interruption_and_extends_with_new_rows(vector_files, monkeypatch, tmp_path):
    from bertkit.io.vectors import read_vectors

    monkeypatch.setattr(index_build, "ADD_ROWS", 16)
    target = tmp_path / "corpus.index"

    def interrupt(done, total):
        if done >= 32:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_index(vector_files["float32"], target, checkpoint_seconds=0, on_progress=interrupt)
    assert load_index(target).rows == 32  # the last checkpoint, written whole
    report = build_index(vector_files["float32"], target)
    vectors, ids, _ = read_vectors(vector_files["float32"])
    assert report.resumed_from == 32 and report.rows == len(vectors) and report.added == len(vectors) - 32
    np.testing.assert_array_equal(load_index(target).ids, ids)
    unchanged = target.stat().st_mtime_ns
    assert build_index(vector_files["float32"], target).added == 0  # nothing new: nothing written
    assert target.stat().st_mtime_ns == unchanged
    with pytest.raises(InputError, match="a graph built with --m 32 --ef-construction 100; give the same to extend"):
        build_index(vector_files["float32"], target, m=8)  # not ignored: the graph cannot change without a rebuild
    assert build_index(vector_files["float32"], target, ef_search=200).added == 0  # a search setting: retuned
    assert load_index(target).meta["hnsw"] == {"m": 32, "ef_construction": 100, "ef_search": 200}
    retuned = target.stat().st_mtime_ns
    assert build_index(vector_files["float32"], target).added == 0  # the same command without it: kept as it is
    assert load_index(target).meta["hnsw"]["ef_search"] == 200 and target.stat().st_mtime_ns == retuned
    index = load_index(target)
    index.add(vectors[:3], ["new-1", "new-2", "new-3"])  # a grown corpus: saved over its old self
    index.save(target, overwrite=True)
    assert load_index(target).rows == len(vectors) + 3 and load_index(target).ids[-1] == "new-3"
    with pytest.raises(InputError, match="holds rows that the vectors file does not have"):
        build_index(vector_files["float32"], target)


def test_an_index_refuses_what_would_not_compare_in_one_line(vector_files, encoder, tmp_path):
    build_index(vector_files["float32"], tmp_path / "corpus.index")
    index = load_index(tmp_path / "corpus.index")
    with pytest.raises(InputError, match="queries of shape \\(1, 384\\) against an index of 256-number vectors"):
        index.search(np.zeros((1, 384), np.float32))
    with pytest.raises(InputError, match="fingerprint"):
        index.check_encoder(type("Other", (), {"fingerprint": "0" * 32})())
    with pytest.raises(InputError, match="metric='manhattan'"):
        VectorIndex.create(index.meta, metric="manhattan")
    exact = load_index(vector_files["float32"])  # a vectors file opens as an exact index: the one engine's other kind
    queries = exact.embed_queries(encoder, ["a dull film", "a warm film"])
    assert exact.exact and not index.exact and exact.metric == "cosine"
    found = [
        [{"corpus_id": h["corpus_id"], "score": h["score"]} for h in row] for row in exact.search(queries, top_k=4)
    ]
    assert found == semantic_search(queries, exact.engine.vectors, top_k=4)
    with pytest.raises(InputError, match="an exact index is its vectors file"):
        exact.save(tmp_path / "exact.index")


@pytest.mark.parametrize("damage", ["cut", "flip", "record"])
def test_a_damaged_index_is_one_line(vector_files, monkeypatch, capsys, tmp_path, damage):
    target = tmp_path / "corpus.index"
    build_index(vector_files["binary"], target)
    data = bytearray(target.read_bytes())
    if damage == "cut":
        data = data[: len(data) // 2]
    elif damage == "flip":
        data[len(data) // 3] ^= 0x10
    else:
        with zipfile.ZipFile(target) as archive:
            members = {name: archive.read(name) for name in archive.namelist()}
        members[index_module.META_MEMBER] = json.dumps({"format": "something else"}).encode()
        with zipfile.ZipFile(target, "w") as archive:
            for name, content in members.items():
                archive.writestr(name, content)
        data = bytearray(target.read_bytes())
    target.write_bytes(bytes(data))
    code, _, err = run_cli(monkeypatch, capsys, "search", target, "a film")
    assert code == 2 and err.count("error:") == 1 and "Traceback" not in err, err
    assert str(target) in err or target.name in err


@pytest.mark.parametrize("output", ["float32", "binary"])
def test_an_index_whose_graph_and_record_disagree_is_refused_at_load(vector_files, tmp_path, output):
    target = tmp_path / "corpus.index"
    build_index(vector_files[output], target)
    with zipfile.ZipFile(target) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    record = json.loads(members[index_module.META_MEMBER])
    assert record["bertkit"]["kind"] == "index" and "format" not in record  # the one bertkit record
    members[index_module.META_MEMBER] = json.dumps({**record, "dim": 128}).encode()
    with zipfile.ZipFile(target, "w") as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    width = 256
    with pytest.raises(InputError, match=f"graph holds vectors of {width} numbers, its record says 128") as refused:
        load_index(target)
    assert "\n" not in str(refused.value) and "--overwrite" in str(refused.value)


def test_without_faiss_the_library_says_how_to_install_it(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "faiss", None)
    with pytest.raises(InputError, match=r"pip install 'bertkit\[index\]'"):
        VectorIndex.create({"dim": 4, "output": "float32"})


def test_the_docstring_example_runs():
    assert doctest.testmod(index_module, optionflags=doctest.ELLIPSIS).failed == 0


@pytest.mark.slow
def test_the_service_answers_search_from_a_loaded_index(vector_files, encoder, texts, tmp_path):
    """`bertkit serve --index` answers POST /search as the library does, documents it, and refuses in one line."""
    from servers import Server

    build_index(vector_files["int8"], tmp_path / "reviews.index")
    build_index(vector_files["float32"], tmp_path / "floats.index")
    index = load_index(tmp_path / "reviews.index")
    queries = ["a warm and funny film", "the plot made no sense"]
    expected = index.search(index.embed_queries(encoder, queries), top_k=5)

    server = Server("--index", str(tmp_path / "reviews.index"), "--index", f"f={tmp_path / 'floats.index'}")
    try:
        answer = server.post("/search", {"query": queries, "top_k": 5, "index": "reviews"})
        assert answer.status_code == 200, answer.text
        found = answer.json()
        assert [[h["corpus_id"] for h in row] for row in found] == [[h["corpus_id"] for h in row] for row in expected]
        for row, wanted in zip(found, expected):
            assert [h["score"] for h in row] == pytest.approx([h["score"] for h in wanted], abs=1e-4)
            assert [h["id"] for h in row] == [h["id"] for h in wanted]  # as Python gives them: numbers stay numbers
            assert all(type(h["id"]) is int for h in row), row
        one = server.post("/search", {"query": queries[0], "top_k": 5, "index": "reviews"}).json()
        assert [h["corpus_id"] for h in one] == [h["corpus_id"] for h in expected[0]]

        info = httpx.get(server.url + "/info").json()
        assert {i["name"]: (i["rows"], i["precision"]) for i in info["indexes"]} == {
            "reviews": (len(texts), "int8"),
            "f": (len(texts), "float32"),
        }
        schema = httpx.get(server.url + "/openapi.json").json()
        body = schema["components"]["schemas"]["SearchRequest"]["properties"]
        assert "/search" in schema["paths"] and body["top_k"]["maximum"] == 1000
        assert server.post("/search", {"query": "hi"}).status_code == 422  # two loaded: say which
        assert server.post("/search", {"query": "hi", "index": "nope"}).status_code == 422  # not in the schema's enum
        assert server.post("/search", {"query": "hi", "index": "f", "top_k": 1001}).status_code == 422
        assert httpx.get(server.url + "/health").json()["status"] == "ok"
    finally:
        assert server.stop() == 0


def test_serve_refuses_an_index_of_another_models_vectors_before_it_starts(vector_files, tmp_path):
    target = tmp_path / "reviews.index"
    build_index(vector_files["float32"], target)
    index = load_index(target)
    index.meta["fingerprint"] = "another model"
    other = index.save(tmp_path / "other.index")
    from bertkit.tasks.runs import parse_run_specs

    assert parse_run_specs([str(other)], "--index") == {"other": other}
    from servers import free_port

    done = warm.run(
        [sys.executable, "-m", "bertkit.cli", "serve", "--index", str(other), "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "fingerprint" in lines[0] and "would not compare" in lines[0], done.stderr


def write_npz(path, vectors, ids):
    """A vectors file as `bertkit embed` writes one: vectors, ids and the bertkit record."""
    from bertkit.records import new_record

    meta = new_record("vectors", model="default", dim=vectors.shape[1], output="float32", pooling="mean")
    np.savez(path, vectors=vectors, ids=np.asarray(ids), meta=np.array(json.dumps(meta)))
    return path


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rows=st.integers(2, 12),
    extra=st.integers(0, 5),
    changed=st.one_of(st.none(), st.integers(0, 11)),
    seed=st.integers(0, 2**16),
)
def test_an_index_is_extended_only_when_its_rows_are_the_files_rows(tmp_path, rows, extra, changed, seed):
    """Property (issue 45): extending an index keeps its rows only when the file's first rows are the same vectors
    (not only the same ids); re-embedded rows under old ids are refused, so search never scores a stale vector."""
    rng = np.random.default_rng(seed)
    first = rng.standard_normal((rows, 8)).astype(np.float32)
    ids = [f"d{i}" for i in range(rows + extra)]
    target = tmp_path / f"{seed}-{rows}-{extra}-{changed}.index"
    build_index(write_npz(tmp_path / "old.npz", first, ids[:rows]), target)
    later = np.concatenate((first, rng.standard_normal((extra, 8)).astype(np.float32)))
    stale = changed is not None and changed < rows
    if stale:
        later[changed] += 1.0  # that text embedded again, under its old id
    extended = write_npz(tmp_path / "new.npz", later, ids)
    if stale:
        with pytest.raises(InputError, match="holds other vectors under the file's first .* --overwrite"):
            build_index(extended, target)
        report = build_index(extended, target, overwrite=True)
        assert (report.rows, report.resumed_from) == (rows + extra, 0)
    else:
        report = build_index(extended, target)
        assert (report.rows, report.added, report.resumed_from) == (rows + extra, extra, rows)
    index = load_index(target)
    for row in range(rows + extra):  # every row finds itself: none of the index's vectors is stale
        assert index.search(later[row], top_k=1)[0][0]["corpus_id"] == row


def test_an_index_is_never_written_onto_its_vectors_and_token_vectors_are_named(
    vector_files, tmp_path, monkeypatch, capsys
):
    import shutil

    from bertkit.io.vectors import write_token_vectors

    source = shutil.copy(vector_files["float32"], tmp_path / "reviews.npz")
    before = (tmp_path / "reviews.npz").read_bytes()
    code, _, err = run_cli(monkeypatch, capsys, "index", source, "-o", source, "--overwrite")
    assert code == 2 and "is also an input" in err and (tmp_path / "reviews.npz").read_bytes() == before, err
    tokens = write_token_vectors(tmp_path / "tokens.npz", [["a", "film"]], [np.ones((2, 4), np.float32)], [0])
    code, _, err = run_cli(monkeypatch, capsys, "index", tokens, "-o", tmp_path / "t.index")
    assert code == 2 and "holds token vectors (--pooling none)" in err and "damaged" not in err, err
    assert not (tmp_path / "t.index").exists()


def test_search_shows_the_matching_texts_while_their_file_is_unchanged(tmp_path, encoder, monkeypatch, capsys):
    """Issue 45: `bertkit search` printed row ids and the Python example `[(np.int64(41), 0.704), ...]`."""
    from bertkit.io.stream import embed_file

    source = tmp_path / "films.txt"
    source.write_text("a warm and funny film\nthe plot made no sense\nI loved the music\n")
    vectors = tmp_path / "films.npz"
    embed_file(encoder, source, vectors, normalize_embeddings=True)
    build_index(vectors, tmp_path / "films.index")
    for searched in (vectors, tmp_path / "films.index"):
        index = load_index(searched)
        (hits,) = index.search(index.embed_queries(encoder, ["a boring plot"]), top_k=3)
        assert [type(h["id"]) for h in hits] == [int] * 3 and all(type(h["score"]) is float for h in hits)
        assert [h["text"] for h in hits] == [source.read_text().splitlines()[h["corpus_id"]] for h in hits]
        assert hits[0]["text"] == "the plot made no sense"
        code, out, err = run_cli(monkeypatch, capsys, "search", searched, "a boring plot", "--top-k", "1")
        assert code == 0 and out.splitlines() == ["query\trank\tid\tscore\ttext", out.splitlines()[1]], err
        assert out.splitlines()[1].startswith("a boring plot\t1\t1\t") and out.endswith("\tthe plot made no sense\n")
    source.write_text("other texts now\n")
    code, out, err = run_cli(monkeypatch, capsys, "search", vectors, "a boring plot", "--top-k", "1")
    assert code == 0 and out.splitlines()[0] == "query\trank\tid\tscore" and "is gone or has changed since" in err
    assert "text" not in load_index(vectors).search(load_index(vectors).embed_queries(encoder, ["x"]), top_k=1)[0][0]
