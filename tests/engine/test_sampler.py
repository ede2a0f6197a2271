"""Sampling: greedy, temperature, top-k/top-p/min-p, penalties, bias, seeds, logprobs."""

from __future__ import annotations

import pytest
import torch

from mellea.engine.sampler import build_sampling_batch, sample
from mellea.engine.sequence import Sequence
from mellea.engine.types import SamplingParams

VOCAB = 10


def seqs(*params: SamplingParams, outputs: list[int] = ()) -> list[Sequence]:
    out = []
    for i, p in enumerate(params):
        s = Sequence(f"r{i}", [0, 1], p, max_tokens=10)
        s.token_ids += list(outputs)
        if p.seed is not None:
            s.generator = torch.Generator().manual_seed(p.seed)
        out.append(s)
    return out


def run(logits: torch.Tensor, batch_seqs: list[Sequence]) -> list[int]:
    return sample(logits.clone(), build_sampling_batch(batch_seqs, VOCAB))[0].tolist()


def logits_row(values: list[float]) -> torch.Tensor:
    return torch.tensor([values], dtype=torch.float32)


def test_all_greedy_is_argmax():
    logits = torch.randn(3, VOCAB)
    batch = build_sampling_batch(seqs(SamplingParams(), SamplingParams(), SamplingParams()), VOCAB)
    assert batch.all_greedy
    tokens, logprobs = sample(logits, batch)
    assert tokens.tolist() == logits.argmax(-1).tolist()
    assert logprobs is None


def test_mixed_greedy_and_random_rows():
    logits = torch.randn(2, VOCAB)
    out = run(logits, seqs(SamplingParams(), SamplingParams(temperature=1.0)))
    assert out[0] == int(logits[0].argmax())


def test_top_k_one_and_tiny_top_p_are_greedy():
    logits = torch.randn(4, VOCAB)
    params = [
        SamplingParams(temperature=1.5, top_k=1),
        SamplingParams(temperature=1.5, top_p=1e-6),
        SamplingParams(temperature=1.5, min_p=0.999),
        SamplingParams(temperature=1.5, top_k=1, top_p=0.5, min_p=0.1),
    ]
    for _ in range(20):
        assert run(logits, seqs(*params)) == logits.argmax(-1).tolist()


def test_top_k_restricts_support():
    logits = logits_row([5.0, 4.0, 3.0, 0, 0, 0, 0, 0, 0, 0])
    drawn = {run(logits, seqs(SamplingParams(temperature=5.0, top_k=2)))[0] for _ in range(200)}
    assert drawn == {0, 1}


def test_top_p_keeps_smallest_head_reaching_p():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05] + [0.0] * 6)
    logits = probs.clamp(min=1e-12).log().unsqueeze(0)
    drawn = {run(logits, seqs(SamplingParams(temperature=1.0, top_p=0.7)))[0] for _ in range(300)}
    assert drawn == {0, 1}


def test_min_p_drops_unlikely_tokens():
    probs = torch.tensor([0.6, 0.3, 0.05, 0.05] + [0.0] * 6)
    logits = probs.clamp(min=1e-12).log().unsqueeze(0)
    drawn = {run(logits, seqs(SamplingParams(temperature=1.0, min_p=0.2)))[0] for _ in range(300)}
    assert drawn == {0, 1}


def test_temperature_sharpens():
    logits = logits_row([1.0, 0.9] + [0.0] * 8)
    cold = [run(logits, seqs(SamplingParams(temperature=0.01)))[0] for _ in range(50)]
    assert set(cold) == {0}


def test_logit_bias():
    logits = logits_row([5.0] + [0.0] * 9)
    assert run(logits, seqs(SamplingParams(logit_bias={7: 100.0}))) == [7]
    assert run(logits, seqs(SamplingParams(logit_bias={0: -100.0}))) == [1]


def test_repetition_penalty_hf_semantics():
    # Prompt is [0, 1]; token 0 has a positive logit (divided), token 1 negative (multiplied).
    logits = logits_row([3.0, -1.0, 2.0] + [-5.0] * 7)
    batch = build_sampling_batch(seqs(SamplingParams(repetition_penalty=2.0)), VOCAB)
    from mellea.engine.sampler import apply_penalties

    out = apply_penalties(logits.clone(), batch)[0]
    assert out[:3].tolist() == [1.5, -2.0, 2.0]
    assert run(logits, seqs(SamplingParams(repetition_penalty=2.0))) == [2]


def test_presence_and_frequency_penalties_count_output_only():
    from mellea.engine.sampler import apply_penalties

    logits = torch.zeros(1, VOCAB)
    params = SamplingParams(presence_penalty=0.5, frequency_penalty=0.25)
    batch = build_sampling_batch(seqs(params, outputs=[4, 4, 5]), VOCAB)
    out = apply_penalties(logits, batch)[0]
    assert out[4].item() == -1.0  # 0.5 + 2 * 0.25
    assert out[5].item() == -0.75
    assert out[0].item() == 0.0  # prompt tokens are not penalized


def test_seeded_rows_reproducible_regardless_of_batch():
    torch.manual_seed(0)
    logits = torch.randn(3, VOCAB)
    seeded = SamplingParams(temperature=1.0, seed=42)
    alone = seqs(seeded)[0]
    draws_alone = [
        sample(logits[1:2].clone(), build_sampling_batch([alone], VOCAB))[0].item()
        for _ in range(10)
    ]
    # A fresh sequence with the same seed, batched between rows that consume random
    # numbers of their own, draws the same tokens.
    batched = seqs(seeded)[0]
    others = seqs(SamplingParams(temperature=1.0), SamplingParams(temperature=2.0, seed=7))
    draws_batched = [
        sample(logits.clone(), build_sampling_batch([others[0], batched, others[1]], VOCAB))[0][
            1
        ].item()
        for _ in range(10)
    ]
    assert draws_alone == draws_batched
    assert len(set(draws_alone)) > 1


def test_logprobs_only_for_rows_that_ask():
    torch.manual_seed(0)
    logits = torch.randn(4, VOCAB) * 3
    reference = torch.log_softmax(logits, dim=-1)
    params = [
        SamplingParams(logprobs=3),
        SamplingParams(temperature=1.0),
        SamplingParams(logprobs=0),
        SamplingParams(temperature=0.7, top_k=3, logprobs=20),  # more than the vocab
    ]
    batch = build_sampling_batch(seqs(*params), VOCAB)
    assert batch.logprobs_k == [3, None, 0, 20]
    tokens, logprobs = sample(logits.clone(), batch)
    assert logprobs is not None and len(logprobs) == 4
    assert logprobs[1] is None
    assert logprobs[2].top == [] and logprobs[2].token_id == int(logits[2].argmax())
    assert [len(logprobs[i].top) for i in (0, 3)] == [3, VOCAB]
    for i in (0, 2, 3):
        entry = logprobs[i]
        assert entry.token_id == tokens[i].item()
        assert entry.logprob == pytest.approx(reference[i, entry.token_id].item(), abs=1e-6)
        ids = [t for t, _ in entry.top]
        assert ids == reference[i].argsort(descending=True)[: len(ids)].tolist()
        assert [v for _, v in entry.top] == pytest.approx(reference[i, ids].tolist(), abs=1e-6)
    assert logprobs[0].top[0] == (logprobs[0].token_id, logprobs[0].logprob)  # greedy


def test_logprobs_ignore_bias_penalties_and_temperature():
    logits = logits_row([2.0, 1.0, 0.5] + [0.0] * 7)
    reference = torch.log_softmax(logits[0], dim=-1)
    plain = sample(logits.clone(), build_sampling_batch(seqs(SamplingParams(logprobs=2)), VOCAB))
    processed = SamplingParams(
        logprobs=2, logit_bias={5: 100.0}, temperature=0.3, repetition_penalty=2.0
    )
    tokens, logprobs = sample(logits.clone(), build_sampling_batch(seqs(processed), VOCAB))
    (entry,) = logprobs
    assert tokens.tolist() == [5]  # the bias picked the token...
    assert entry.token_id == 5  # the bias picked the token, but not its logprob:
    assert entry.logprob == pytest.approx(reference[5].item(), abs=1e-6)
    assert entry.top == plain[1][0].top
    assert [t for t, _ in entry.top] == [0, 1]
    assert [v for _, v in entry.top] == pytest.approx(reference[:2].tolist(), abs=1e-6)


def test_no_logprobs_keeps_the_plain_batch():
    batch = build_sampling_batch(seqs(SamplingParams(), SamplingParams(temperature=1.0)), VOCAB)
    assert batch.logprobs_k is None
    assert sample(torch.randn(2, VOCAB), batch)[1] is None
