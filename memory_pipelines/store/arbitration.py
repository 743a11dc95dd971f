"""Summaries, tags and conflict arbitration for agent-mem: by an LLM when one is configured, else by rules.

Every LLM answer is validated and cleaned before it is stored: control characters (NUL included) and lone
surrogates are dropped, whitespace collapsed, the summary clipped to 200 characters, tags to 8 of at most
40 characters each; the memory's own content may carry a prompt injection, so nothing the model says is
trusted. A failed, malformed or (once cleaned) empty answer is asked for once more, then the deterministic
fallback decides (an extractive summary and keyword tags; rules for arbitration). The fallback never loses
data: it SKIPs only near-identical content (the same terms and the same numbers, told apart by case, punctuation,
spacing or word order at most) and otherwise keeps both memories; it never REPLACEs.
"""

from __future__ import annotations

import logging
import re
import time
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..infra.llm import ChatLLM
from ..infra.openai_client import ON_REQUEST, Budget
from ..text.keywords import jaccard
from ..text.summary import extractive_summary
from ..text.summary import tags as extract_tags
from ..text.tokens import truncate_to_tokens

log = logging.getLogger(__name__)

ACTIONS = ("REPLACE", "KEEP_BOTH", "SKIP")
RULES_MODEL = "rules"
EXTRACTIVE = "extractive"
EXTRACTIVE_PENDING = "extractive, the LLM's to come"  # stored without waiting: the background pass asks the LLM
SUMMARY_MAX_CHARS = 200
MAX_TAGS = 8
MAX_TAG_CHARS = 40
LLM_ATTEMPTS = 2  # the first answer and one retry, then the fallback
EXCERPT_CHARS = 600  # content shown to the arbiter per memory
SUMMARY_INPUT_TOKENS = 6000  # content sent to the summariser
NEAR_DUPLICATE_SIMILARITY = 0.98
NEAR_DUPLICATE_JACCARD = 1.0  # every term shared: a term only one text has is a fact a SKIP would lose
_NUMBER = re.compile(r"\d+")

T = TypeVar("T")


class InvalidAnswer(ValueError):
    """The model answered with JSON that breaks the expected shape."""


@dataclass(frozen=True)
class Neighbour:
    """An existing memory close to the new one."""

    id: str
    summary: str
    content: str
    content_type: str
    similarity: float


@dataclass(frozen=True)
class Decision:
    """The arbiter's verdict; `candidate` is the memory it applies to (None when there was none)."""

    action: str  # REPLACE | KEEP_BOTH | SKIP | CREATE
    candidate: Neighbour | None
    model: str
    reason: str


def _ask(
    llm: ChatLLM, system: str, user: str, parse: Callable[[dict[str, Any]], T], what: str, budget: Budget | None = None
) -> T | str:
    """Parsed answer, or the last error message after LLM_ATTEMPTS failures (never raises). Within `budget`,
    the question is asked again only while less than one attempt's timeout has passed (an answer that could not
    be read): a model that timed out is not given a second budget."""
    error = ""
    start = time.monotonic()
    for attempt in range(1, LLM_ATTEMPTS + 1):
        if attempt > 1 and budget is not None and time.monotonic() - start >= llm.attempt_timeout(budget):
            break
        try:
            return parse(llm.complete_json(system, user, budget))
        except Exception as exc:  # LLMError, InvalidAnswer, or a client bug: never lose the write
            error = f"{type(exc).__name__}: {exc}"
            log.warning("%s by %s failed (attempt %s/%s): %s", what, llm.model, attempt, LLM_ATTEMPTS, error)
    return error


# --- summary and tags ------------------------------------------------------------------------------------

_SUMMARY_SYSTEM = (
    "You write index entries for an AI agent's long-term memory. Read the memory and return a JSON object "
    '{"summary": "<one or two sentences, at most 200 characters, in the language of the memory>", '
    '"tags": ["<up to 8 short keywords: names, components, technologies, decisions>"]}.'
)


MAX_RAW_TAGS = 64  # tags of an answer looked at; the first MAX_TAGS usable ones are kept


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def clean_text(text: str) -> str:
    """`text` as storable, one-line text: control characters (NUL included) become spaces, lone surrogates
    are dropped, whitespace runs collapse to one space."""
    out = [
        " " if cat == "Cc" else ch
        for ch in text
        if (cat := unicodedata.category(ch)) != "Cs"
    ]
    return " ".join("".join(out).split())


def parse_summary(answer: dict[str, Any]) -> tuple[str, list[str]]:
    """Validate and clean `{"summary": str, "tags": [str]}`: the summary clipped to 200 characters, up to 8
    distinct tags of at most 40; InvalidAnswer when the summary is empty once cleaned."""
    summary = answer.get("summary")
    if not isinstance(summary, str):
        raise InvalidAnswer("summary must be a non-empty string")
    summary = _clip(clean_text(summary[: SUMMARY_MAX_CHARS * 8]), SUMMARY_MAX_CHARS)
    if not summary:
        raise InvalidAnswer("summary must be a non-empty string of printable text")
    raw_tags = answer.get("tags")
    if not isinstance(raw_tags, list) or not all(isinstance(t, str) for t in raw_tags):
        raise InvalidAnswer("tags must be a list of strings")
    tags: list[str] = []
    for tag in raw_tags[:MAX_RAW_TAGS]:
        tag = _clip(clean_text(tag[: MAX_TAG_CHARS * 8]), MAX_TAG_CHARS)
        if tag and tag.lower() not in {t.lower() for t in tags}:
            tags.append(tag)
    return summary, tags[:MAX_TAGS]


def summarise(llm: ChatLLM | None, content: str, budget: Budget | None = None) -> tuple[str, list[str], str]:
    """(summary, tags, made_by): by the LLM when configured and it answers well (within `budget` for a write that
    waits), else extractive."""
    if llm is not None:
        answer = _ask(
            llm, _SUMMARY_SYSTEM, truncate_to_tokens(content, SUMMARY_INPUT_TOKENS), parse_summary, "summary",
            budget,
        )
        if not isinstance(answer, str):
            summary, tags = answer
            return summary, tags, llm.model
    return extractive_summary(content, SUMMARY_MAX_CHARS), extract_tags(content), EXTRACTIVE


# --- arbitration -----------------------------------------------------------------------------------------

_ARBITER_SYSTEM = (
    "You keep an AI agent's long-term memory free of stale and duplicate entries. A NEW memory is about "
    "to be stored; EXISTING memories of the same project are similar to it. Decide one action:\n"
    "REPLACE: the new memory is an updated version of one existing memory on the same subject and "
    "supersedes it (the old text is kept in the history).\n"
    "KEEP_BOTH: they cover different facts, or both stay useful.\n"
    "SKIP: the new memory adds nothing to one existing memory (a duplicate).\n"
    'Return a JSON object: {"action": "REPLACE" | "KEEP_BOTH" | "SKIP", '
    '"target_id": "<id of the existing memory for REPLACE or SKIP>", "reason": "<one short sentence>"}.'
)


def _excerpt(text: str) -> str:
    return _clip(" ".join(text.split()), EXCERPT_CHARS)


def arbiter_prompt(new_summary: str, new_content: str, new_type: str, candidates: Sequence[Neighbour]) -> str:
    """The user message: the new memory, then each candidate with its similarity."""
    lines = [
        f"NEW ({new_type})",
        f"summary: {new_summary}",
        f"excerpt: {_excerpt(new_content)}",
        "",
        "EXISTING",
    ]
    for c in candidates:
        lines += [
            f"- id: {c.id} ({c.content_type}, similarity {c.similarity:.3f})",
            f"  summary: {c.summary}",
            f"  excerpt: {_excerpt(c.content)}",
        ]
    return "\n".join(lines)


def parse_decision(answer: dict[str, Any], candidates: Sequence[Neighbour]) -> tuple[str, Neighbour, str]:
    """Validate `{"action", "target_id"?, "reason"}` against the candidates shown."""
    action = answer.get("action")
    if not isinstance(action, str) or action.strip().upper() not in ACTIONS:
        raise InvalidAnswer(f"action must be one of {list(ACTIONS)}, got {action!r}")
    reason = answer.get("reason", "")
    if not isinstance(reason, str):
        raise InvalidAnswer("reason must be a string")
    target_id = answer.get("target_id")
    target = candidates[0]
    if target_id not in (None, ""):
        matches = [c for c in candidates if c.id == target_id]
        if not matches:
            raise InvalidAnswer(f"target_id {target_id!r} is not one of the candidates")
        target = matches[0]
    return action.strip().upper(), target, _clip(clean_text(reason[:4000]), 500)


def normalised_text(text: str) -> str:
    """NFKC, lower case, whitespace collapsed: equal for texts that differ only in those."""
    return " ".join(unicodedata.normalize("NFKC", text).lower().split())


def numbers(text: str) -> list[str]:
    """The runs of digits of `text` (NFKC, so full-width digits count), in order."""
    return _NUMBER.findall(unicodedata.normalize("NFKC", text))


def rules_decision(new_content: str, candidates: Sequence[Neighbour], note: str = "") -> Decision:
    """The fallback: SKIP a near-identical candidate (similarity at least NEAR_DUPLICATE_SIMILARITY, the same
    terms and the same numbers in the same order), else KEEP_BOTH; never REPLACE."""
    note = clean_text(note)
    prefix = f"{note}; " if note else ""
    norm = normalised_text(new_content)
    for c in candidates:
        if normalised_text(c.content) == norm:
            return Decision("SKIP", c, RULES_MODEL, prefix + "same text as an existing memory")
        if c.similarity >= NEAR_DUPLICATE_SIMILARITY and numbers(c.content) == numbers(new_content):
            overlap = jaccard(new_content, c.content)  # the terms skip one-digit numbers: hence numbers() too
            if overlap >= NEAR_DUPLICATE_JACCARD:
                return Decision(
                    "SKIP",
                    c,
                    RULES_MODEL,
                    prefix + f"near-identical (similarity {c.similarity:.3f}, term Jaccard {overlap:.2f})",
                )
    return Decision(
        "KEEP_BOTH",
        candidates[0],
        RULES_MODEL,
        prefix + "similar but not near-identical; kept both (rules never replace)",
    )


def arbitrate(
    llm: ChatLLM | None, new_summary: str, new_content: str, new_type: str, candidates: Sequence[Neighbour]
) -> Decision:
    """Decide what to do with a new memory given its nearest candidates (best first). It runs under the project
    lock every other write of the project waits for, so the model is asked within `ON_REQUEST`'s budget."""
    if not candidates:
        return Decision("CREATE", None, RULES_MODEL, "no similar memory in this project")
    if llm is None:
        return rules_decision(new_content, candidates)
    answer = _ask(
        llm,
        _ARBITER_SYSTEM,
        arbiter_prompt(new_summary, new_content, new_type, candidates),
        lambda a: parse_decision(a, candidates),
        "arbitration",
        ON_REQUEST,
    )
    if isinstance(answer, str):
        return rules_decision(new_content, candidates, note=f"LLM arbitration failed ({_clip(answer, 200)})")
    action, target, reason = answer
    return Decision(action, target, llm.model, reason)
