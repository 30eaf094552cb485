"""Multi-document question answering for EPIC on a real pretrained LM (generated factual passages).

EPIC's accuracy claims are about retrieval-augmented prompts: several documents, then a question
whose answer is in exactly one of them (the paper's LongBench 2WikiMQA / HotpotQA / MuSiQue
items). Nothing is downloaded here, so the passages are generated: every passage is a short
biography of a fictional person (a name, a home town, a profession, a birth year, a count of
animals, a street number), written in plain English sentences; the people of one item have
distinct names and their numbers differ, so the question ("In which year was Lena Varga born?")
has exactly one answer, found in exactly one passage. ``filler_passages`` cuts real English text
that ships with Python (the standard library's module docstrings) into passages of a given token
length, for the time-to-first-token benchmark, where only length matters.

Examples:
    >>> import numpy as np
    >>> item = make_item(np.random.default_rng(0), n_docs=3)
    >>> len(item.documents), item.answer in item.documents[item.gold]
    (3, True)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["QAItem", "make_item", "score", "filler_passages"]

FIRST = ("Lena", "Marco", "Ines", "Tomas", "Freya", "Oskar", "Nadia", "Victor", "Greta", "Pavel", "Alma", "Henrik",
         "Sofia", "Emil", "Clara", "Jonas", "Mira", "Felix", "Ada", "Rafael", "Helga", "Bruno", "Lucia", "Anton",
         "Elsa", "Dmitri", "Irene", "Kasper", "Nora", "Stefan", "Olga", "Leon")
LAST = ("Varga", "Lindqvist", "Moreau", "Kowalski", "Brandt", "Okafor", "Haddad", "Novak", "Ferreira", "Tanaka",
        "Jensen", "Rossi", "Weber", "Petrov", "Costa", "Nakamura", "Holm", "Duval", "Szabo", "Keller", "Morales",
        "Larsen", "Bianchi", "Fischer", "Ivanova", "Quinn", "Sato", "Berg", "Marin", "Horvat", "Adler", "Reyes")
TOWNS = ("Aldmere", "Brackwell", "Corvath", "Dunmoor", "Eastvale", "Fennick", "Glenhaven", "Harrowgate", "Ivybridge",
         "Jorvik", "Kestrel Bay", "Lowmarsh", "Millbrook", "Northwick", "Oakridge", "Pellham")
JOBS = ("baker", "carpenter", "pharmacist", "ship engineer", "librarian", "beekeeper", "violin maker", "surveyor",
        "glassblower", "pilot", "translator", "astronomer", "chef", "bookbinder", "geologist", "potter")
ANIMALS = ("goats", "sheep", "horses", "cats", "ducks", "rabbits", "chickens", "dogs")
CLOZES = {
    "year": "{name} was born in",
    "animals": "{name} keeps",
    "house": "{name} lives in the house with the number",
}
QUESTIONS = {
    "year": "In which year was {name} born?",
    "animals": "How many {animal} does {name} keep?",
    "house": "What is the number of the house where {name} lives?",
}


@dataclass(frozen=True)
class QAItem:
    """One multi-document question: ``documents`` (passages, in prompt order), the ``question``,
    its ``answer`` (a number, as text), ``gold`` (the index of the passage that holds it) and
    ``cloze``, the start of an answer sentence whose next words are the number."""

    documents: tuple[str, ...]
    question: str
    answer: str
    gold: int
    cloze: str


def _passage(name: str, town: str, job: str, year: int, animal: str, count: int, house: int) -> str:
    first = name.split()[0]
    article = "an" if job[0] in "aeiou" else "a"
    return (f"{name} is {article} {job} from {town}. {first} was born in {year} and has worked as a {job} for many "
            f"years. {first} lives in the house with the number {house} on the main street of {town} and "
            f"keeps {count} {animal} in the garden behind it.")


def make_item(rng: np.random.Generator, n_docs: int) -> QAItem:
    """A question over ``n_docs`` generated passages whose answer is in exactly one (module docstring)."""
    if isinstance(n_docs, bool) or not isinstance(n_docs, (int, np.integer)) or not 1 <= n_docs <= len(FIRST):
        raise ValueError(f"n_docs must be an integer in [1, {len(FIRST)}], got {n_docs!r}")
    n = int(n_docs)
    firsts = rng.choice(len(FIRST), n, replace=False)
    lasts = rng.choice(len(LAST), n, replace=False)
    years = rng.choice(np.arange(1921, 1999), n, replace=False)
    counts = rng.choice(np.arange(3, 60), n, replace=False)
    houses = rng.choice(np.arange(101, 990), n, replace=False)
    people = []
    for i in range(n):
        people.append(dict(name=f"{FIRST[firsts[i]]} {LAST[lasts[i]]}", town=TOWNS[rng.integers(len(TOWNS))],
                           job=JOBS[rng.integers(len(JOBS))], year=int(years[i]),
                           animal=ANIMALS[rng.integers(len(ANIMALS))], count=int(counts[i]), house=int(houses[i])))
    docs = tuple(_passage(**p) for p in people)
    gold = int(rng.integers(n))
    kind = ("year", "animals", "house")[int(rng.integers(3))]
    p = people[gold]
    question = QUESTIONS[kind].format(name=p["name"], animal=p["animal"])
    answer = str({"year": p["year"], "animals": p["count"], "house": p["house"]}[kind])
    return QAItem(docs, question, answer, gold, CLOZES[kind].format(name=p["name"]))


def score(item: QAItem, output: str) -> float:
    """1.0 when the first number in ``output`` is the answer, else 0.0."""
    import re

    m = re.search(r"\d+", output)
    return float(m is not None and m.group(0) == item.answer)


def filler_passages(tokenizer, n: int, lo: int, hi: int, rng: np.random.Generator) -> list[list[int]]:
    """``n`` token-id passages of ``lo .. hi`` tokens cut from the standard library's module docstrings
    (real English text that ships with Python), each from a random offset."""
    import importlib

    if not 1 <= lo <= hi:
        raise ValueError(f"need 1 <= lo <= hi, got {lo}, {hi}")
    texts = []
    for name in sorted(_STDLIB_DOCS):
        try:
            doc = importlib.import_module(name).__doc__
        except Exception:  # noqa: BLE001 (an optional module may fail to import)
            doc = None
        if doc and len(doc) > 400:
            texts.append(doc)
    ids = tokenizer.encode("\n\n".join(texts))
    if len(ids) < hi + 1:
        raise ValueError("not enough standard-library text for passages of that length")
    out = []
    for _ in range(n):
        length = int(rng.integers(lo, hi + 1))
        start = int(rng.integers(0, len(ids) - length))
        out.append([int(t) for t in ids[start:start + length]])
    return out


_STDLIB_DOCS = frozenset({"argparse", "asyncio", "base64", "bisect", "calendar", "collections", "configparser",
                          "contextlib", "csv", "dataclasses", "datetime", "decimal", "difflib", "email", "enum",
                          "fractions", "functools", "heapq", "hmac", "http", "imaplib", "inspect", "ipaddress",
                          "json", "logging", "mailbox", "pickle", "pprint", "random", "re", "shlex", "shutil",
                          "smtplib", "socket", "sqlite3", "statistics", "string", "subprocess", "tarfile",
                          "tempfile", "textwrap", "threading", "timeit", "tokenize", "typing", "unittest",
                          "urllib", "uuid", "warnings", "zipfile"})
