"""Helper commands: demo (the guided tour: the README's main job) and env."""

from __future__ import annotations

import typer

from .common import app, echo_facts, make_encoder
from .options import Model

# the visual guide's SST-2 sentences (a sentence, a tab, 0 or 1; no header): what ../shared/data/sst2 holds
SST2 = "https://github.com/clairett/pytorch-sentiment-classification/tree/master/data/SST2"


@app.command()
def demo(model: Model = None) -> None:
    """Run a short tour on the packaged default model: tokenization table, embeddings and their shapes."""
    from ..display import text_table as format_table
    from ..encoder.coverage import text_coverage
    from ..io.readers import read_labelled, sample_path
    from ..tasks.classify import TextClassifier
    from ..tasks.labels import split_holdout
    from ..tasks.report import classification_metrics
    from ..tasks.vectorizer import BertVectorizer

    echo = typer.echo
    encoder = make_encoder(model)
    facts = encoder.info()
    echo(
        f"model: {facts['model']} ({facts['architecture']}, {facts['layers']} layers, hidden {facts['hidden_size']}, "
        f"max length {facts['max_length']} from {facts['max_length_source']}, vocab {facts['vocab_size']}, "
        f"{'cased' if facts['cased'] else 'uncased'})"
    )

    echo("\n1. Tokenization of 'I love Korea', padded to 7 tokens:")
    batch = encoder.tokenize(["I love Korea"], max_length=7, padding="max_length")
    echo(format_table(batch.table(0), ["position", "token", "id", "mask", "type_id"]))

    echo("\n2. One forward pass:")
    out = encoder.forward(batch)
    echo(
        f"   last_hidden_state {tuple(out.last_hidden_state.shape)}   pooler_output "
        f"{tuple(out.pooler_output.shape) if out.pooler_output is not None else None}   "
        f"hidden_states: {len(out.hidden_states)} tensors (embeddings + {encoder.num_layers} layers)"
    )

    texts = [
        "a visually stunning rumination on love",
        "the plot is a mess and the acting is worse",
        "an enchanting , funny film",
        "I love Korea",
    ]
    echo("\n3. Sentence vectors for 4 texts:")
    choices = [("last", "cls"), ("last", "pooler"), ("last", "mean"), ("last4:sum", "mean"), ("last4:concat", "mean")]
    for layers, pooling in choices:
        vectors = encoder.embed(texts, layers=layers, pooling=pooling)
        echo(f"   layers={layers:<13} pooling={pooling:<7} → {vectors.shape} {vectors.dtype}")
    vectors = encoder.embed(texts, layers="last4:sum", pooling="mean")
    unit = vectors / (vectors**2).sum(axis=1, keepdims=True) ** 0.5
    echo("   cosine similarity (last4:sum, mean):")
    for i, text in enumerate(texts):
        echo(f"     {text[:42]:<42} " + " ".join(f"{unit[i] @ unit[j]:5.2f}" for j in range(len(texts))))

    echo("\n4. Word vectors (a word split into pieces gets its first piece's vector):")
    words = ["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "Pyeongchang"]
    vecs = encoder.embed_words([words], layers="last4:concat", subtoken_pooling="first")[0]
    tokens = encoder.tokenize([words]).tokens[0][1:-1]
    echo(f"   {len(words)} words → {vecs.shape}; {len(tokens)} tokens: {tokens}")

    echo("\n5. Vocabulary coverage check on Korean text:")
    echo(f"   '이 영화 재미없네요' → {encoder.tokenize(['이 영화 재미없네요']).tokens[0]}")
    echo(f"   {text_coverage(encoder.tokenizer, ['이 영화 재미없네요']).message()}")

    echo("\n6. The visual guide's pipeline on bertkit's own sample (80 labelled reviews):")
    sample = read_labelled(sample_path("reviews.tsv"), "text", "label")
    train_x, test_x, train_y, test_y = split_holdout(sample.texts, sample.labels, 0.25, seed=0)
    classifier = TextClassifier(BertVectorizer(model=model)).fit(train_x, train_y)
    metrics = classification_metrics(
        test_y, classifier.predict(test_x), classifier.classes_, classifier.majority_class_
    )
    features = classifier.vectorizer_
    echo(
        f"   features: layers={features.layers} pooling={features.pooling} → {features.n_features_out_} dims, "
        f"{'standardised' if classifier.scale else 'not scaled'}; "
        f"logistic regression with C={classifier.C_:g} chosen by {classifier.cv_folds_}-fold CV"
    )
    echo(
        f"   held-out accuracy {metrics['accuracy']:.3f} on {metrics['n']} reviews "
        f"(majority baseline {metrics['majority_baseline_accuracy']:.3f})"
    )
    for text in ["a visually stunning rumination on love", "an hour and a half of my life i will never get back"]:
        probabilities = classifier.predict_proba([text])[0]
        echo(f"   {text!r} → {classifier.classes_[probabilities.argmax()]} ({probabilities.max():.2f})")
    echo(f"\nOn SST-2, the guide's data ({SST2}: train.tsv, dev.tsv):")
    echo("   bertkit train train.tsv --dev dev.tsv -o runs/sst2")


@app.command()
def env() -> None:
    """Show the machine as bertkit sees it: CPU features (bf16, int8), threads, GPUs, versions (for bug reports)."""
    from ..encoder.devices import machine_facts
    from ..encoder.engines import engine_facts

    echo_facts(machine_facts() | engine_facts())
