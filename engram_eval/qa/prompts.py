"""Every prompt of the answer and judge steps, as plain templates with ``{name}`` fields.

The templates are written for this package from the description of LongMemEval's reading
and judging protocol (read the sessions in date order as JSON, take notes per session first,
then answer; one yes/no judge prompt per question type). Their sha256 are recorded in the
sidecars (:func:`template_hashes`), so a changed word is a different run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

#: Version of the context layout (the JSON shape of the sessions and the reading prompt).
#: It joins the context export's fingerprint.
LAYOUT = "sessions-json-notes-v1"

READER_SYSTEM = (
    "You are a careful assistant with access to the history of your past chat sessions "
    "with this user. Answer from that history only."
)

READER_USER = """Here are past chat sessions between the user and you, the assistant, oldest first. They are given as JSON: each session has its date and its turns (role and content).

{sessions_json}

Current date: {question_date}
Question: {question}

How to answer:
1. Go through the sessions one at a time. For each session, write a short note of the facts in it that bear on the question, with the session's date, or write "nothing relevant".
2. Then answer the question from your notes. Use the session dates and the current date for anything about time (how long ago, which came first, how many days between). When the user's information changed over time, the latest session counts.
3. If the sessions do not hold the information the question asks for, say plainly that the question cannot be answered from the chat history, and do not guess.

Finish with one line that starts with "Answer:"."""

_JUDGE_HEAD = """You are grading an answer given by a chat assistant that has a memory of earlier conversations.

Question: {question}
Correct answer: {answer}
Assistant's response: {hypothesis}

"""

_JUDGE_TAIL = "\n\nReply with one word: yes or no."

JUDGE_DEFAULT = _JUDGE_HEAD + (
    "Is the response correct? Say yes if the response contains the correct answer, or says "
    "something equivalent to it. Say no if the response gives a different answer, or gives "
    "only part of the information the correct answer needs (for example some of the items of "
    "a count or a list)."
) + _JUDGE_TAIL

JUDGE_TEMPORAL = _JUDGE_HEAD + (
    "Is the response correct? Say yes if the response contains the correct answer, or says "
    "something equivalent to it. Say no if it gives a different answer, or only part of the "
    "information needed. A count of days, weeks or months that is off by one from the "
    "correct answer still counts as correct (say yes)."
) + _JUDGE_TAIL

JUDGE_KNOWLEDGE_UPDATE = _JUDGE_HEAD + (
    "The user's information changed over time, and the correct answer is the latest value. "
    "Is the response correct? Say yes if the response gives the latest (updated) value as "
    "its answer, even when it also mentions an earlier value beside it. Say no if its answer "
    "is the earlier value, a different value, or missing."
) + _JUDGE_TAIL

JUDGE_PREFERENCE = """You are grading a reply given by a chat assistant that has a memory of earlier conversations with the user.

Question: {question}
Rubric (what a good personalised reply does): {answer}
Assistant's response: {hypothesis}

Is the response correct? Say yes if it remembers the user's personal information and uses it correctly in the way the rubric describes; it does not need to cover every point of the rubric. Say no if it ignores or misremembers that information.""" + _JUDGE_TAIL

JUDGE_ABSTENTION = """You are grading an answer given by a chat assistant that has a memory of earlier conversations. This question cannot be answered from those conversations: it asks about something the user never said.

Question: {question}
Why it cannot be answered: {answer}
Assistant's response: {hypothesis}

Is the response correct? Say yes if the response says that the question cannot be answered, or that the information is not there or is incomplete (for example it points out that something related was mentioned, but not what was asked). Say no if it gives a specific answer to the question as asked.""" + _JUDGE_TAIL

#: Judge template name -> text.
JUDGE_TEMPLATES: dict[str, str] = {
    "default": JUDGE_DEFAULT,
    "temporal-reasoning": JUDGE_TEMPORAL,
    "knowledge-update": JUDGE_KNOWLEDGE_UPDATE,
    "single-session-preference": JUDGE_PREFERENCE,
    "abstention": JUDGE_ABSTENTION,
}

#: Question types judged with the default prompt.
DEFAULT_TYPES = frozenset({"single-session-user", "single-session-assistant", "multi-session"})


def is_abstention(question_id: str) -> bool:
    """LongMemEval's abstention overlay: the question id ends in ``_abs``."""
    return question_id.endswith("_abs")


def judge_template_name(question_type: str, question_id: str) -> str:
    """Which judge prompt a question gets: ``abstention`` for ``_abs`` ids whatever the type,
    else the type's own prompt (the three single-fact types share ``default``). An unknown
    type is a ValueError (never judged silently with a prompt written for another)."""
    if is_abstention(question_id):
        return "abstention"
    if question_type in DEFAULT_TYPES:
        return "default"
    if question_type in JUDGE_TEMPLATES:
        return question_type
    raise ValueError(f"question {question_id!r}: no judge prompt for question type "
                     f"{question_type!r} (known: {sorted(DEFAULT_TYPES | set(JUDGE_TEMPLATES) - {'default', 'abstention'})})")


def render_judge(name: str, *, question: str, answer: str, hypothesis: str) -> str:
    return JUDGE_TEMPLATES[name].format(question=question, answer=answer, hypothesis=hypothesis)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def reader_template_hashes() -> dict[str, str]:
    return {"reader_system": sha256_text(READER_SYSTEM), "reader_user": sha256_text(READER_USER)}


def judge_template_hashes(templates: Mapping[str, str] | None = None) -> dict[str, str]:
    return {name: sha256_text(text) for name, text in (templates or JUDGE_TEMPLATES).items()}
