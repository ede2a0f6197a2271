"""Minimum-Bayes-risk decoding: draw several answers at once and keep the one most
like the others (majority voting for math, ROUGE-L for text).

Each sample is its own rejection-sampling run; the runs go to the backend together
(``asyncio.gather``), so the local engine batches them. The first sample is the
request as given; the others are drawn at the retry temperature with their own
seeds, so they can differ.
"""

from __future__ import annotations

import abc
import asyncio
import re
from fractions import Fraction

from mellea.core.requirement import Requirement
from mellea.core.sampling import SamplingResult
from mellea.core.thunk import ModelOutputThunk
from mellea.stdlib.sampling.base import Generate, RejectionSamplingStrategy, Retry, Validate


class BaseMBRDSampling(RejectionSamplingStrategy):
    """Draw ``number_of_samples`` answers concurrently; pick the one with the highest
    summed similarity to the rest (:meth:`compare_strings`)."""

    samples_without_requirements = True  # voting needs no requirements to run
    _MATCH_TYPES: tuple[str, ...] = ()  # what compare_strings matches on (upstream's match_types)

    def __init__(
        self,
        *,
        number_of_samples: int = 8,
        weighted: bool = False,
        loop_budget: int = 1,
        requirements: list[Requirement] | None = None,
    ) -> None:
        super().__init__(loop_budget=loop_budget, requirements=requirements)
        if number_of_samples < 1:
            raise ValueError("number_of_samples must be at least 1")
        self.number_of_samples = number_of_samples
        self.weighted = weighted
        self.symmetric = True
        self.match_types = list(self._MATCH_TYPES)

    @abc.abstractmethod
    def compare_strings(self, ref: str, pred: str) -> float:
        """How alike two answers are, from 0 to 1."""

    def maybe_apply_weighted(self, scr: list[float]) -> list[float]:
        """Per-sample weights (all 1, as upstream: weighting is not implemented)."""
        return list(scr)

    async def asample(
        self, generate: Generate, validate: Validate, requirements: list[Requirement]
    ) -> SamplingResult:
        """Run the samples together and vote."""

        def numbered(i: int) -> Generate:
            async def one(attempt: int, retry: Retry | None = None) -> ModelOutputThunk:
                return await generate(i * self.loop_budget + attempt, retry)

            return one  # type: ignore[return-value]

        inner = RejectionSamplingStrategy(
            loop_budget=self.loop_budget, requirements=self.requirements
        )
        runs = await asyncio.gather(
            *(
                inner.asample(numbered(i), validate, requirements)
                for i in range(self.number_of_samples)
            )
        )
        texts = [run.result.value or "" for run in runs]
        n = len(texts)
        scores = [[1.0 if i == j else 0.0 for j in range(n)] for i in range(n)]
        for i in range(n):
            for j in range(n):
                if i == j or (self.symmetric and j < i):
                    continue
                scores[i][j] = float(self.compare_strings(texts[j], texts[i]))
                if self.symmetric:
                    scores[j][i] = scores[i][j]
        totals = self.maybe_apply_weighted([sum(scores[i][j] for i in range(n)) for j in range(n)])
        winner = max(range(n), key=lambda j: (totals[j], -j))
        return SamplingResult(
            winner,
            runs[winner].success,
            [run.result for run in runs],
            [run.sample_validations[run.result_index] for run in runs],
        )


_BOXED = re.compile(r"\\boxed\{")
_NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+)?")


def _boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (braces balanced)."""
    starts = [m.end() for m in _BOXED.finditer(text)]
    if not starts:
        return None
    i, depth = starts[-1], 1
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None


def final_answer(text: str) -> str:
    """The answer a math solution ends with: its last ``\\boxed{}``, else its last number."""
    boxed = _boxed(text)
    if boxed is not None:
        return boxed.strip()
    numbers = _NUMBER.findall(text)
    return numbers[-1] if numbers else text.strip()


def _as_number(answer: str) -> Fraction | None:
    cleaned = answer.replace(",", "").replace("$", "").strip().rstrip(".")
    frac = re.fullmatch(r"\\d?frac\{(-?\d+)\}\{(-?\d+)\}", cleaned)
    if frac:
        cleaned = f"{frac.group(1)}/{frac.group(2)}"
    try:
        return Fraction(cleaned)
    except (ValueError, ZeroDivisionError):
        return None


class MajorityVotingStrategyForMath(BaseMBRDSampling):
    """Majority vote over math answers: two answers agree when their final answers
    are equal (compared by ``math-verify`` when it is installed, else as numbers
    rounded to ``float_rounding`` places, else as text)."""

    _MATCH_TYPES = ("latex", "expr")

    def __init__(
        self,
        *,
        number_of_samples: int = 8,
        float_rounding: int = 6,
        strict: bool = True,
        allow_set_relation_comp: bool = False,
        weighted: bool = False,
        loop_budget: int = 1,
        requirements: list[Requirement] | None = None,
    ) -> None:
        super().__init__(
            number_of_samples=number_of_samples,
            weighted=weighted,
            loop_budget=loop_budget,
            requirements=requirements,
        )
        self.float_rounding = float_rounding
        self.strict = strict
        self.allow_set_relation_comp = allow_set_relation_comp
        try:
            import math_verify
        except ImportError:
            math_verify = None
        self._math_verify = math_verify

    def compare_strings(self, ref: str, pred: str) -> float:
        """1.0 when the two solutions reach the same final answer, else 0.0."""
        if self._math_verify is not None:
            mv = self._math_verify
            targets = [mv.LatexExtractionConfig(), mv.ExprExtractionConfig()]
            gold, guess = mv.parse(ref, targets), mv.parse(pred, targets)
            return float(
                mv.verify(
                    gold,
                    guess,
                    float_rounding=self.float_rounding,
                    strict=self.strict,
                    allow_set_relation_comp=self.allow_set_relation_comp,
                )
            )
        a, b = final_answer(ref), final_answer(pred)
        x, y = _as_number(a), _as_number(b)
        if x is not None and y is not None:
            return float(
                round(float(x), self.float_rounding) == round(float(y), self.float_rounding)
            )
        return float(a.replace(" ", "") == b.replace(" ", ""))


_WORD = re.compile(r"[a-z0-9]+")


def rouge_l(reference: str, candidate: str) -> float:
    """ROUGE-L F1: the longest common subsequence of lower-cased word tokens (ours:
    no stemming, where upstream's rouge-score stems)."""
    ref, cand = _WORD.findall(reference.lower()), _WORD.findall(candidate.lower())
    if not ref or not cand:
        return 0.0
    prev = [0] * (len(cand) + 1)
    for r in ref:
        row = [0]
        for j, c in enumerate(cand):
            row.append(prev[j] + 1 if r == c else max(prev[j + 1], row[j]))
        prev = row
    lcs = prev[-1]
    if lcs == 0:
        return 0.0
    precision, recall = lcs / len(cand), lcs / len(ref)
    return 2 * precision * recall / (precision + recall)


class MBRDRougeLStrategy(BaseMBRDSampling):
    """Minimum-Bayes-risk selection among text answers by ROUGE-L."""

    _MATCH_TYPES = ("rougeL",)

    def compare_strings(self, ref: str, pred: str) -> float:
        """ROUGE-L F1 of the two answers."""
        return rouge_l(ref, pred)


__all__ = ["BaseMBRDSampling", "MBRDRougeLStrategy", "MajorityVotingStrategyForMath"]
