"""The one runner: rows cut into forward passes at least overhead + padding, within the token and row budgets,
split on out-of-memory, results in input order; the service's batcher plans with it."""

from __future__ import annotations

import itertools
import random

import pytest

from bertkit.encoder.runner import PASS_OVERHEAD_TOKENS, Row, Runner, padded_width
from bertkit.encoder.runner import plan_batches as plan


def plan_batches(lengths, max_batch_tokens, max_rows=None):
    """The service's plan: widths in multiples of 8."""
    return plan(lengths, max_batch_tokens, max_rows, multiple=8)


def cost(lengths, groups, overhead=PASS_OVERHEAD_TOKENS) -> int:
    return sum(overhead + len(g) * padded_width(max(lengths[i] for i in g), multiple=8) for g in groups)


def test_widths_round_up_to_eight_but_never_past_the_model_limit():
    assert [padded_width(n, multiple=8) for n in (1, 8, 9, 23, 24, 25)] == [8, 8, 16, 24, 24, 32]
    assert padded_width(297, limit=300, multiple=8) == 300 and padded_width(300, limit=300, multiple=8) == 300
    assert padded_width(12, limit=300, multiple=8) == 16
    assert padded_width(13) == 13  # the encoder's own passes: no rounding


def test_one_long_row_gets_a_pass_of_its_own_instead_of_padding_the_short_ones():
    # one pass: 32 + 4 x 40 = 192 padded-token units; [5, 6, 7] and [40] apart: (32 + 3 x 8) + (32 + 40) = 128
    assert plan_batches([5, 6, 40, 7], max_batch_tokens=2048) == [[2], [0, 1, 3]]


def test_similar_rows_share_one_pass():
    assert plan_batches([20, 21, 22, 23], max_batch_tokens=2048) == [[0, 1, 2, 3]]


def test_no_pass_is_wider_than_the_budget_unless_one_row_alone_is():
    groups = plan_batches([30] * 5 + [100], max_batch_tokens=64)
    assert sorted(map(len, groups)) == [1, 1, 2, 2]  # 30 pads to 32: two rows fill 64; 100 alone
    assert all(
        len(g) * padded_width(max(([30] * 5 + [100])[i] for i in g), multiple=8) <= 64 for g in groups if len(g) > 1
    )


def test_no_pass_holds_more_rows_than_the_batch_size():
    groups = plan_batches([10] * 9, max_batch_tokens=2048, max_rows=4)
    assert sorted(map(len, groups)) == [1, 4, 4] and sorted(i for g in groups for i in g) == list(range(9))


def every_split(lengths):
    """Every split of the rows, sorted by length, into contiguous groups (the brute force a plan is checked by)."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    for cuts in itertools.product([False, True], repeat=len(order) - 1):
        split, current = [], [order[0]]
        for index, cut in zip(order[1:], cuts):
            if cut:
                split.append(current)
                current = []
            current.append(index)
        yield [*split, current]


def test_the_plan_is_the_cheapest_split_of_the_sorted_rows():
    rng = random.Random(0)
    for _ in range(60):
        lengths = [rng.randint(3, 70) for _ in range(rng.randint(1, 8))]
        budget = rng.choice([64, 128, 2048])
        groups = plan_batches(lengths, max_batch_tokens=budget)
        assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
        best = None
        for split in every_split(lengths):
            if all(len(g) == 1 or len(g) * padded_width(max(lengths[i] for i in g), 8) <= budget for g in split):
                best = min(best if best is not None else 10**9, cost(lengths, split))
        assert cost(lengths, groups) == best


def test_one_width_plans_are_the_cheapest_split_whose_passes_each_hold_one_padded_width():
    """bf16 and int8 on a CPU: a row padded alike whatever shares its pass. The plan is the cheapest among the splits
    of the sorted rows that mix no widths (brute force, as above)."""
    rng = random.Random(1)
    for _ in range(60):
        lengths = [rng.randint(3, 30) for _ in range(rng.randint(1, 8))]
        budget, multiple = rng.choice([64, 2048]), rng.choice([1, 4])
        groups = plan(lengths, budget, None, multiple=multiple, one_width=True)
        assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
        assert all(len({padded_width(lengths[i], multiple=multiple) for i in g}) == 1 for g in groups)
        best = None
        for split in every_split(lengths):
            widths = [{padded_width(lengths[i], multiple=multiple) for i in g} for g in split]
            if all(len(w) == 1 and (len(g) == 1 or len(g) * min(w) <= budget) for g, w in zip(split, widths)):
                total = sum(PASS_OVERHEAD_TOKENS + len(g) * min(w) for g, w in zip(split, widths))
                best = min(best if best is not None else 10**9, total)
        found = sum(PASS_OVERHEAD_TOKENS + len(g) * padded_width(lengths[g[0]], multiple=multiple) for g in groups)
        assert found == best


def test_results_come_back_in_input_order_and_a_pass_out_of_memory_is_split(monkeypatch):
    """On a GPU a pass that runs out of memory is tried again in halves, down to one row; here the forward raises
    torch's own out-of-memory error for passes wider than two rows."""
    import torch

    seen: list[int] = []

    def forward(inputs):
        rows = inputs["input_ids"].shape[0]
        seen.append(rows)
        if rows > 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")
        return inputs["attention_mask"].sum(1)

    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    runner = Runner(forward, 0, torch.device("cuda"), max_batch_tokens=10_000, batch_size=None)
    rows = [Row([1] * n, [0] * n) for n in (5, 3, 9, 4, 7, 8, 6)]
    lengths = runner.run(rows, lambda group, inputs, out: out.tolist())
    assert lengths == [5, 3, 9, 4, 7, 8, 6]  # each row's own result, in input order
    assert seen[0] == 7 and sum(n for n in seen if n <= 2) == 7  # the one pass, too wide, ran in halves

    from bertkit.encoder.devices import OutOfDeviceMemory

    alone = Runner(lambda inputs: (_ for _ in ()).throw(torch.cuda.OutOfMemoryError()), 0, torch.device("cuda"), 10_000)
    with pytest.raises(OutOfDeviceMemory, match=r"text \d: \d tokens do not fit in the memory of cuda even alone"):
        alone.run([Row([1] * 3, [0] * 3), Row([1] * 9, [0] * 9)], lambda *_: [])
