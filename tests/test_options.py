"""`EmbedOptions`: one value for every embedding option, the model's sentence-transformers defaults, checks that run
nothing, one record, and the old names kept for a release."""

import dataclasses

import numpy as np
import pytest
from tiny_models import tiny_bert

from bertkit import BertVectorizer, EmbedOptions, Encoder, InputError
from bertkit.encoder.encode import calibration_ranges
from bertkit.encoder.models import default_model_dir
from bertkit.encoder.options import FIELDS
from bertkit.io.stream import embed_file

TEXTS = ["I love Korea", "the movie was great", "EU rejects German call to boycott British lamb ."]


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"batch_size": 2, "normalize_embeddings": True, "show_progress_bar": False},
        {"convert_to_tensor": True},
        {"convert_to_numpy": False},
        {"truncate_dim": 128},
        {"truncate_dim": 128, "normalize_embeddings": True},
        {"truncate_dim": 64, "precision": "ubinary"},
        {"precision": "binary"},
        {"precision": "ubinary"},
        {"prompt": "query: "},
    ],
    ids=repr,
)
def test_encode_is_called_and_answers_as_sentence_transformers_encode(encoder, kwargs):
    """Code written for sentence-transformers calls `model.encode(...)` as its docs do: the same types and shapes,
    and the same numbers, for a list and for one string."""
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(default_model_dir()), device="cpu")
    for sentences in (TEXTS, TEXTS[0]):
        ours, theirs = encoder.encode(sentences, **kwargs), model.encode(sentences, **kwargs)
        assert type(ours) is type(theirs)
        if isinstance(theirs, list):
            assert len(ours) == len(theirs) and all(isinstance(row, torch.Tensor) for row in ours)
            ours, theirs = torch.stack(ours), torch.stack(theirs)
        assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, (ours.shape, theirs.shape)
        np.testing.assert_allclose(np.asarray(ours, np.float32), np.asarray(theirs, np.float32), atol=2e-6)


def test_encode_refuses_what_it_cannot_give_in_one_line(encoder):
    with pytest.raises(InputError, match="token vectors come from Encoder.embed_tokens"):
        encoder.encode(TEXTS, output_value="token_embeddings")
    assert encoder.encode(TEXTS, device=str(encoder.device)).shape == (3, 384)
    if encoder.device.type == "cpu":
        with pytest.raises(InputError):  # a device this machine lacks, or another one than the encoder's
            encoder.encode(TEXTS, device="cuda")


def test_the_packaged_model_embeds_as_sentence_transformers_encodes(encoder):
    """modules.json says mean pooling then Normalize: no option given, the same unit vectors, nothing by hand."""
    from sentence_transformers import SentenceTransformer

    theirs = SentenceTransformer(str(default_model_dir()), device="cpu").encode(TEXTS)
    ours = encoder.embed(TEXTS)
    np.testing.assert_allclose(ours, theirs, atol=2e-6)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-6)
    raw = encoder.embed(TEXTS, normalize_embeddings=False)  # an explicit option overrides the model's
    assert np.linalg.norm(raw, axis=1).min() > 2


@pytest.fixture(scope="module")
def st_dense(tmp_path_factory):
    """A sentence-transformers folder of a tiny BERT: CLS pooling, a Dense module with tanh, no Normalize."""
    from sentence_transformers import SentenceTransformer

    try:
        from sentence_transformers.sentence_transformer.modules import Dense, Pooling, Transformer
    except ImportError:  # sentence-transformers < 6
        from sentence_transformers.models import Dense, Pooling, Transformer
    import torch

    root = tmp_path_factory.mktemp("st")
    bert = tiny_bert(root / "bert")
    torch.manual_seed(0)
    transformer = Transformer(str(bert))
    pooling = Pooling(32, pooling_mode="cls")
    dense = Dense(32, 16, activation_function=torch.nn.Tanh())
    model = SentenceTransformer(modules=[transformer, pooling, dense], device="cpu")
    model.save(str(root / "st"))
    return root / "st", SentenceTransformer(str(root / "st"), device="cpu")


def test_pooling_and_dense_come_from_modules_json(st_dense):
    folder, reference = st_dense
    encoder = Encoder.from_pretrained(str(folder))
    assert encoder.info()["pooling"] == "cls" and encoder.info()["dense"] == ["32→16 tanh"]
    texts = ["I love Korea", "the movie was great"]
    np.testing.assert_allclose(encoder.embed(texts), reference.encode(texts), atol=1e-5)
    assert encoder.output_dim(EmbedOptions()) == 16
    # other layers or pooling are raw features: no Dense, the hidden size
    assert encoder.embed(texts, pooling="mean").shape == (2, 32)
    assert encoder.embed(texts, layers="-2").shape == (2, 32)
    with pytest.raises(InputError, match="Dense module takes 32 numbers"):
        encoder.embed(texts, layers="-1,-2", dense=True)


def test_options_are_checked_against_the_model_without_running_it(encoder, monkeypatch):
    def no_forward(*_):
        raise AssertionError("the model ran")

    monkeypatch.setattr(encoder.network, "forward_inputs", no_forward)
    for bad, message in [
        ({"layers": "9"}, "layer 9 does not exist"),
        ({"pooling": "pooler", "layers": "last4:sum"}, "layers='last'"),
        ({"truncate_dim": 500}, "truncate_dim=500: these vectors have 384 numbers"),
        ({"prompt_name": "query"}, "prompt_name='query'"),
        ({"max_length": 9999}, "max_length=9999"),
    ]:
        with pytest.raises(InputError, match=message):
            EmbedOptions(**bad).resolve(encoder)
    with pytest.raises(InputError, match="long_text='chop'"):
        EmbedOptions(long_text="chop")  # what needs no model is refused when the value is made
    upper = EmbedOptions(pooling="MEAN", long_text="Window", truncation_direction="Left", output_type="FLOAT16")
    assert upper == EmbedOptions(pooling="mean", long_text="window", truncation_direction="left", output_type="float16")
    with pytest.raises(InputError, match="truncate_dim applies to sentence vectors"):
        EmbedOptions(pooling="none", truncate_dim=8)


def test_a_misspelled_option_is_refused_not_dropped(encoder, tmp_path):
    def no_forward(*_):
        raise AssertionError("the model ran")

    texts = tmp_path / "texts.txt"
    texts.write_text("I love Korea\n")
    faces = {
        "embed": lambda **kw: encoder.embed(TEXTS, **kw),
        "embed_tokens": lambda **kw: encoder.embed_tokens(TEXTS, **kw),
        "embed_with_report": lambda **kw: encoder.embed_with_report(TEXTS, **kw),
        "calibration_ranges": lambda **kw: calibration_ranges(encoder, **kw),
        "embed_file": lambda **kw: embed_file(encoder, texts, tmp_path / "out.npy", **kw),
    }
    for face, call in faces.items():
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(encoder.network, "forward_inputs", no_forward)
            with pytest.raises(InputError, match="unknown embedding option 'poolng'; the options are layers, pooling"):
                call(poolng="cls")
        assert not (tmp_path / "out.npy").exists(), face


def test_a_stride_and_a_name_given_twice_are_refused_whatever_the_texts(encoder, tmp_path):
    """Short texts need no window, but a stride that no window could take is refused before the model runs."""
    texts = tmp_path / "texts.txt"
    texts.write_text("I love Korea\n")
    faces = {
        "embed": lambda **kw: encoder.embed(TEXTS, **kw),
        "embed_tokens": lambda **kw: encoder.embed_tokens(TEXTS, **kw),
        "embed_file": lambda **kw: embed_file(encoder, texts, tmp_path / "out.npy", **kw),
        "BertVectorizer": lambda **kw: BertVectorizer(cache=None, **kw).fit(TEXTS),
    }
    for bad, message in [
        ({"long_text": "window", "stride": 500}, "stride=500: give a number of overlapping tokens from 0 to 253"),
        ({"long_text": "window", "max_length": 10, "stride": 8}, "stride=8: give .* from 0 to 7"),
        ({"stride": 8}, "stride=8 is the overlap of long_text='window'; with long_text='truncate' no text is cut"),
    ]:
        for face, call in faces.items():
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(
                    encoder.network, "forward_inputs", lambda *_, face=face: pytest.fail(f"{face} ran the model")
                )
                with pytest.raises(InputError, match=message):
                    call(**bad)
            assert not (tmp_path / "out.npy").exists(), face
    assert encoder.embed(TEXTS, long_text="window", max_length=10, stride=7).shape == (3, 384)  # the largest
    with pytest.raises(InputError, match="give an EmbedOptions, or the options as keywords"):
        encoder.embed(TEXTS, "last4:sum")


def test_resolved_options_record_themselves_one_way(encoder):
    resolved = EmbedOptions(layers="last4:sum", prompt="query: ", truncate_dim=64).resolve(encoder)
    record = resolved.record()
    assert record["pooling"] == "mean" and record["normalize_embeddings"] is False  # not the model's own vector
    assert record["max_length"] == 256 and record["prompt"] == "query: " and "prompt_name" not in record
    assert EmbedOptions.from_record(record) == resolved
    assert resolved.resolve(encoder) == resolved  # resolving twice changes nothing
    assert EmbedOptions.from_record({**record, "rows": 3}) == resolved  # what is not an option is not read


def test_the_old_names_are_refused_as_unknown_options(encoder):
    """bertkit 0.2's names are gone (no shims before 1.0): each is refused in one line naming today's options."""
    for old in ("dimensions", "normalize", "output"):
        with pytest.raises(InputError, match=f"unknown embedding option '{old}'; the options are .*truncate_dim"):
            encoder.embed(TEXTS, **{old: 1})


def test_embed_returns_sentence_vectors_only(encoder):
    with pytest.raises(InputError, match="use embed_tokens"):
        encoder.embed(TEXTS, pooling="none")
    with pytest.raises(InputError, match="unknown embedding option .return_report."):
        encoder.embed(TEXTS, return_report=True)


def test_the_vectorizer_takes_every_option_and_resolves_them_once():
    params = set(BertVectorizer().get_params())
    assert set(FIELDS) <= params, set(FIELDS) - params
    vectorizer = BertVectorizer(
        layers="last", pooling="cls", long_text="window", stride=8, include_prompt=False, output_type="float16"
    )
    vectorizer.fit([])
    assert vectorizer.options_ == vectorizer.embed_options().resolve(vectorizer.encoder_)
    assert vectorizer.transform(TEXTS).dtype == np.float16
    assert dataclasses.asdict(vectorizer.options_)["stride"] == 8
