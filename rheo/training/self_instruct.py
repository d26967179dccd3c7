"""Self-instructed training prompts: the target writes the user requests itself.

The templated prompts of :mod:`rheo.training.prompts` teach a draft head the answers to a
few hundred request shapes. Here the target model writes the requests, so their wording,
topics and lengths follow its own distribution of plausible user messages. The steps
(each one a generation pass of ``scripts/gen_selfinstruct.py``):

1. **Topics.** A few-shot completion prompt ``Area: <area>\\nTopics: a; b; c`` over
   :data:`AREAS`, sampled several times; the model's topic lists are parsed
   (:func:`parse_topics`). Then once more with the first level's topics as areas
   (recursion: narrower topics).
2. **Passages.** For the rewrite / summarise styles the model writes a short article on a
   topic (:func:`passage_prompt`); the request then quotes the model's own text.
3. **Requests.** A few-shot completion prompt of two example messages of one *style*
   (:data:`STYLES`: explain, how-to, compare, list, rewrite, summarise, code, word problem,
   opinion, role-play, creative writing, factual question) on other topics, then the new
   topic; the model writes the message (:func:`request_prompt`, :func:`parse_request`).
4. **Follow-ups.** After the target has answered a request, a few-shot prompt shows the
   question and the answer and the model writes the user's next message
   (:func:`followup_prompt`).

Requests are cleaned, deduplicated exactly (normalised text) and approximately (Jaccard
similarity of word 3-gram sets, :func:`dedupe`), and filtered for benchmark 8-grams
(:func:`rheo.training.contamination.shares_ngram`). Every choice is a function of a hash of its
inputs, so the plan is deterministic given the previous passes' outputs.

Terms: *area* a broad field given by hand; *topic* a model-written subject; *style* the kind
of request; *request* the user message the model wrote (the first user turn of a corpus
conversation).
"""

from __future__ import annotations

import hashlib
import re
import string
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Dict, Iterable, List, Sequence, Set, Tuple

AREAS = (
    "astronomy", "biology", "chemistry", "physics", "geology", "weather", "oceans", "ecology", "medicine",
    "nutrition", "fitness", "mental health", "parenting", "pets", "cooking", "baking", "gardening",
    "home repair", "interior design", "fashion", "personal finance", "investing", "small business",
    "marketing", "careers", "education", "studying", "languages", "linguistics", "literature",
    "poetry", "film", "television", "music", "painting", "photography", "architecture", "history",
    "ancient civilisations", "world religions", "philosophy", "psychology", "sociology", "economics",
    "politics", "law", "geography", "travel", "cars", "aviation", "trains", "sports", "board games",
    "video games", "programming", "web development", "data science", "computer hardware",
    "cybersecurity", "mathematics", "statistics", "engineering", "energy", "agriculture", "wildlife",
    "insects", "dinosaurs", "space travel", "robots", "inventions", "holidays", "etiquette",
    "relationships", "writing", "journalism", "crafts", "woodworking", "fishing", "camping",
)

TOPIC_EXAMPLES = (
    ("astronomy", "black holes; the life cycle of stars; exoplanets; the Big Bang; comets; telescopes"),
    ("cooking", "sourdough bread; knife skills; French sauces; meal prep; Indian spices; fermentation"),
    ("careers", "writing a CV; salary negotiation; changing careers; remote jobs; mentoring; burnout"),
)

# Two to four example messages per style, written for this module (none from a benchmark).
STYLES: Dict[str, Tuple[Tuple[str, str], ...]] = {
    "explain": (
        ("houseplants", "Why do the leaves of my fiddle-leaf fig turn brown at the edges?"),
        ("tides", "Can you explain in simple words why there are two high tides a day?"),
        ("inflation", "What actually causes inflation, and why do central banks raise interest rates to fight it?"),
    ),
    "howto": (
        ("bicycles", "Can you walk me through fixing a flat tyre on a road bike, step by step?"),
        ("houseplants", "How often should I water a snake plant, and how can I tell if I'm overwatering it?"),
        ("spreadsheets", "How do I make a drop-down list in a spreadsheet so people can only pick from a few values?"),
    ),
    "compare": (
        ("coffee", "What's the difference between espresso and filter coffee in terms of caffeine and taste?"),
        ("databases", "Should I use SQLite or PostgreSQL for a small personal project? What are the trade-offs?"),
        ("running", "Is it better to run on a treadmill or outside if I'm training for my first 10k?"),
    ),
    "list": (
        ("birthdays", "Give me ten ideas for a cheap but memorable birthday party for a seven-year-old."),
        ("reading", "Can you list some classic science fiction novels that are good for beginners?"),
        ("productivity", "What are five habits that help people focus when working from home?"),
    ),
    "code": (
        ("text files", "Write a Python function that counts how many times each word appears in a text file."),
        ("dates", "I need a Python function that returns the number of weekdays between two dates."),
        ("lists", "How do I remove duplicates from a list in Python but keep the original order?"),
    ),
    "math": (
        ("a bakery", "A bakery sells muffins for $2 each and cookies for $0.50 each. Maria buys 3 muffins and 8 cookies. How much does she pay?"),
        ("a road trip", "We drove 180 miles in 3 hours and still have 240 miles to go. At the same speed, how long will the rest of the trip take?"),
        ("a garden", "A rectangular garden is 12 metres long and 7 metres wide. How much fencing do I need to go all the way around it?"),
    ),
    "opinion": (
        ("remote work", "Do you think working from home is better for productivity than working in an office?"),
        ("learning", "Is it worth learning to play the piano as an adult, or is it too late to get good?"),
        ("cities", "I'm thinking about moving from a small town to a big city. What should I consider before deciding?"),
    ),
    "roleplay": (
        ("pirates", "Pretend you are an old pirate captain and tell me about the worst storm you ever sailed through."),
        ("museums", "Act as a museum guide and describe the most famous painting in your gallery to a group of children."),
        ("space", "You are an astronaut on the International Space Station. Describe your morning routine to me."),
    ),
    "creative": (
        ("autumn", "Write a short poem about the first cold morning of autumn."),
        ("a job offer", "Help me write a polite email declining a job offer because I accepted another one."),
        ("dragons", "Write a very short bedtime story about a dragon who is afraid of the dark."),
    ),
    "factual": (
        ("geography", "What is the longest river in Africa, and which countries does it flow through?"),
        ("chemistry", "What is the boiling point of water at the top of a high mountain, and why is it lower?"),
        ("history", "When was the first photograph taken, and who took it?"),
    ),
}
PASSAGE_STYLES = {
    "rewrite": ("Rewrite this paragraph so that a ten-year-old could understand it:",
                "Can you make this text sound more formal?",
                "Please rewrite the following in fewer words, keeping the main points:",
                "Turn this paragraph into a bulleted list of the key facts:"),
    "summarise": ("Summarise this in two sentences:",
                  "What is the main idea of the following text?",
                  "Give me a one-line summary of this paragraph:",
                  "Read this and tell me the three most important points:"),
}
STYLE_NAMES = tuple(STYLES) + tuple(PASSAGE_STYLES)
FOLLOWUP_EXAMPLES = (
    ("How do I boil an egg?", "Put the egg in boiling water for about nine minutes, then cool it in cold water.",
     "What if I want the yolk to stay a bit runny?"),
    ("What is photosynthesis?", "Photosynthesis is how plants turn light, water and carbon dioxide into sugar and oxygen.",
     "Does it still happen on cloudy days?"),
)


def stable_hash(*parts: str) -> int:
    """A 32-bit hash of the parts, independent of Python's hash seed."""
    return int(hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:8], 16)


# ----------------------------------------------------------------------------- prompts
def topic_prompt(area: str) -> str:
    """Few-shot completion prompt whose continuation is a ``;``-separated topic list."""
    shots = "".join(f"Area: {a}\nTopics: {t}\n\n" for a, t in TOPIC_EXAMPLES if a != area)
    return f"Below are lists of specific topics within broader areas.\n\n{shots}Area: {area}\nTopics:"


def passage_prompt(topic: str) -> str:
    return f"Here is a short, informative paragraph about {topic}.\n\n"


def request_prompt(style: str, topic: str) -> str:
    """Few-shot completion prompt (two examples of ``style`` on other topics) for ``topic``."""
    pool = [e for e in STYLES[style] if e[0] != topic]
    first = stable_hash(style, topic) % len(pool)
    shots = [pool[first], pool[(first + 1) % len(pool)]]
    body = "".join(f"Topic: {t}\nMessage: {m}\n\n" for t, m in shots)
    return f"Below are messages that users sent to an AI assistant.\n\n{body}Topic: {topic}\nMessage:"


def passage_request(style: str, topic: str, passage: str) -> str:
    """A rewrite / summarise request quoting the model's own paragraph."""
    asks = PASSAGE_STYLES[style]
    return f"{asks[stable_hash(style, topic) % len(asks)]}\n\n{passage}"


def followup_prompt(question: str, answer: str, max_answer_chars: int = 600) -> str:
    """Few-shot completion prompt whose continuation is the user's next message."""
    shots = "".join(f"User: {q}\nAssistant: {a}\nUser: {f}\n\n" for q, a, f in FOLLOWUP_EXAMPLES)
    short = " ".join(answer.split())[:max_answer_chars]
    return (f"Below are conversations in which a user asks a follow-up question.\n\n{shots}"
            f"User: {question}\nAssistant: {short}\nUser:")


# ----------------------------------------------------------------------------- parsing
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s*")
_BAD_REQUEST = ("topic:", "message:", "area:", "user:", "assistant:", "http", "i'm ready to assist")


def parse_topics(text: str, max_words: int = 6) -> List[str]:
    """Topics from a completion: the first line, split on ``;`` or ``,``; short items only."""
    line = text.strip().split("\n")[0]
    out = []
    for item in re.split(r"[;,]", line):
        item = _BULLET.sub("", item).strip().strip(string.punctuation + " ")
        words = item.split()
        if 1 <= len(words) <= max_words and len(item) >= 3 and not any(c.isdigit() for c in item):
            out.append(item)
    return out


def parse_request(text: str, min_words: int = 4, max_words: int = 90) -> str | None:
    """The first line of a completion, cleaned; None when it does not look like a message."""
    line = text.strip().split("\n")[0].strip().strip('"').strip()
    words = line.split()
    if not (min_words <= len(words) <= max_words):
        return None
    low = line.lower()
    if any(b in low for b in _BAD_REQUEST) or not any(c.isalpha() for c in line):
        return None
    return line


def parse_passage(text: str, min_words: int = 40) -> str | None:
    """The model's paragraph, cut at its last full sentence; None when too short."""
    body = " ".join(text.strip().split("\n\n")[0].split())
    cut = max(body.rfind(". "), body.rfind(".")) if not body.endswith(".") else len(body) - 1
    body = body[: cut + 1] if cut > 0 else body
    return body if len(body.split()) >= min_words else None


# ----------------------------------------------------------------------------- dedup
def normalise(text: str) -> str:
    return " ".join(text.lower().translate(str.maketrans("", "", string.punctuation)).split())


def shingles(text: str, n: int = 3) -> Set[Tuple[str, ...]]:
    toks = normalise(text).split()
    return {tuple(toks[i : i + n]) for i in range(max(len(toks) - n + 1, 1))}


def dedupe(texts: Iterable[str], threshold: float = 0.6) -> List[str]:
    """Drop exact (normalised) duplicates and near duplicates: a text whose word-3-gram set has
    Jaccard similarity >= ``threshold`` with an earlier kept text. First occurrence wins."""
    seen: Set[str] = set()
    index: Dict[Tuple[str, ...], List[int]] = defaultdict(list)  # shingle -> kept texts holding it
    kept: List[str] = []
    kept_sets: List[Set[Tuple[str, ...]]] = []
    for t in texts:
        key = normalise(t)
        if not key or key in seen:
            continue
        sh = shingles(t)
        overlap = Counter(j for s in sh for j in index.get(s, ()))
        if any(c / len(sh | kept_sets[j]) >= threshold for j, c in overlap.items()):
            continue
        seen.add(key)
        for s in sh:
            index[s].append(len(kept))
        kept.append(t)
        kept_sets.append(sh)
    return kept


# ----------------------------------------------------------------------------- plan
@dataclass(frozen=True)
class RequestJob:
    """One request to write: ``style`` on ``topic`` (``passage`` for passage styles)."""

    style: str
    topic: str
    passage: str | None = None


def plan_requests(topics: Sequence[str], passages: Dict[str, str], styles_per_topic: int = 3) -> List[RequestJob]:
    """``styles_per_topic`` styles per topic, chosen by hash; passage styles only where the
    model wrote a usable passage for the topic."""
    jobs = []
    for topic in topics:
        start = stable_hash("styles", topic)
        for i in range(styles_per_topic):
            style = STYLE_NAMES[(start + 5 * i) % len(STYLE_NAMES)]
            if style in PASSAGE_STYLES:
                if topic in passages:
                    jobs.append(RequestJob(style, topic, passages[topic]))
                continue
            jobs.append(RequestJob(style, topic))
    return jobs


# ----------------------------------------------------------------------------- diversity
def diversity(texts: Sequence[str]) -> Dict[str, float]:
    """Distinct word 3-grams / all 3-grams, the number of distinct 3-grams, and word-length
    percentiles of a set of user turns (the corpus diversity report)."""
    grams: Counter = Counter()
    lengths = sorted(len(t.split()) for t in texts)
    for t in texts:
        toks = t.lower().split()
        grams.update(tuple(toks[i : i + 3]) for i in range(len(toks) - 2))
    total = sum(grams.values())

    def pct(q: float) -> float:
        return float(lengths[min(int(q * len(lengths)), len(lengths) - 1)]) if lengths else float("nan")

    return dict(turns=len(texts), distinct_3grams=len(grams),
                distinct_3gram_ratio=round(len(grams) / total, 4) if total else float("nan"),
                words_p10=pct(0.1), words_p50=pct(0.5), words_p90=pct(0.9))
