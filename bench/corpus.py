"""A deterministic, realistic Cortex protocol stream for benchmarks.

The benchmark needs megabytes of text that look like what a model writes over a
long agent session, because parser costs depend on the mix: long prose runs
(cheap if the parser scans for ``<`` in bulk), ``<`` that is *not* a tag (the
slow path a naive scanner takes on every one), JSON bodies with strings that
contain escaped quotes, backslashes, emoji and even ``"</action>"`` (the cases
that break string-unaware scanners), and markdown responses with code fences
and tables. Random noise would exercise none of this.

Everything is drawn from one ``random.Random(seed)``, so the same
``(target_chars, seed)`` always gives the same text, on any machine, and a
larger target with the same seed shares the same opening segments.

Shape of the stream: a sequence of *segments*, each one turn of the agent::

    <thought> prose (sometimes with an action inside) </thought>
    1-3 <action ...>{json}</action>
    sometimes <response final="false"> interim markdown </response>

and one closing segment with the final ``<response>``. The final response comes
last because actions after it are an error (``action_after_final``); the stream
must stay valid from the first character to the last.
"""

from __future__ import annotations

import json
import random
import re

__all__ = ["MIB", "action_ids", "count_actions", "generate"]

MIB = 1024 * 1024

# ``<action`` followed by whitespace or ``>`` only ever starts a real action in
# this corpus: prose never says it and JSON strings only ever carry the
# *closing* tag ``"</action>"``, which this pattern does not match.
_ACTION_OPEN = re.compile(r"<action[\s>]")
_ACTION_ID = re.compile(r"""<action\b[^>]*?\bid=(["'])(.*?)\1""")


def count_actions(text: str) -> int:
    """Number of actions planted in a stream made by :func:`generate`.

    Relies on the generator's guarantee that ``<action`` followed by a space or
    ``>`` appears only as a real opening tag (never in prose, JSON strings or
    responses); not a general-purpose protocol counter.
    """
    return len(_ACTION_OPEN.findall(text))


def action_ids(text: str) -> list[str]:
    """The ids of the planted actions, in stream order (same caveat as above)."""
    return [m.group(2) for m in _ACTION_ID.finditer(text)]


# --------------------------------------------------------------------------
# Vocabulary. Kept small but varied enough that sentences do not visibly
# repeat within a screen, which is all "realistic" needs to mean here.
# --------------------------------------------------------------------------

_SUBJECTS = (
    "the dataset",
    "the user's request",
    "the previous result",
    "this query",
    "the billing table",
    "the CSV export",
    "the API response",
    "the config file",
    "the test suite",
    "the migration",
    "the cache layer",
    "the search index",
    "the quarterly report",
    "the log output",
    "the dependency graph",
    "the notebook variable",
    "the retry policy",
    "the schema",
    "the summary",
    "the error message",
    "the benchmark",
    "the staging cluster",
    "the rollout plan",
)
_VERBS = (
    "check",
    "verify",
    "summarise",
    "compare",
    "fetch",
    "re-read",
    "validate",
    "aggregate",
    "filter",
    "cross-reference",
    "inspect",
    "normalise",
    "rank",
    "deduplicate",
    "join",
    "plot",
    "estimate",
    "reconcile",
    "profile",
    "test",
)
_ADJECTIVES = (
    "stale",
    "incomplete",
    "consistent",
    "ambiguous",
    "large",
    "sorted",
    "truncated",
    "up to date",
    "cached",
    "missing a column",
    "well formed",
    "noisy",
    "sparse",
    "skewed",
    "correct",
    "slow",
    "partitioned",
    "empty",
)
_REASONS = (
    "the numbers have to add up before I report them",
    "the user asked for a breakdown by region",
    "a wrong join here would double-count revenue",
    "the last run timed out after 30 seconds",
    "the docs and the code disagree on the default",
    "the answer depends on which version is deployed",
    "I do not want to guess at the schema",
    "the request mentions both the old and the new endpoint",
    "the previous tool call returned fewer rows than expected",
    "it is cheaper than re-running the whole pipeline",
    "the user prefers a short answer with sources",
)
_TOPICS = (
    "latency",
    "error rates",
    "churn",
    "p95 response time",
    "disk usage",
    "conversion",
    "memory growth",
    "token usage",
    "queue depth",
    "cold starts",
    "retries",
    "cache hit ratio",
    "throughput",
    "test flakiness",
)
_CONNECTIVES = (
    "First,",
    "Then",
    "After that,",
    "Meanwhile,",
    "On the other hand,",
    "If that fails,",
    "Once that is done,",
    "Before anything else,",
    "Also,",
    "In parallel,",
    "Finally,",
    "Otherwise",
    "To be safe,",
)
_CODE_WORDS = (
    "`df.groupby('region')`",
    "`SELECT count(*)`",
    "`asyncio.gather`",
    "`Vec<u8>`",
    "`Optional[int]`",
    "`np.percentile(x, 95)`",
    "`git bisect`",
    "`json.loads`",
    "`Path.glob('*.csv')`",
    "`retry=3`",
    "`O(n log n)`",
)

_SENTENCE_TEMPLATES = (
    "{conn} I should {verb} {subj} because {reason}.",
    "{Subj} looks {adj}, so I will {verb} it before going further.",
    "I need to {verb} {subj} and {verb2} {subj2}; {reason}.",
    "The user wants to know about {topic}, which means {subj} matters more than {subj2}.",
    "{conn} I can {verb} {subj} in parallel with {subj2}, since neither depends on the other.",
    "It is possible that {subj} is {adj}; if so, the {topic} numbers will be off.",
    "My plan: {verb} {subj}, then {verb2} {subj2}, then write the answer.",
    "Using {code} should be enough to {verb} {subj}.",
    "There are {n} rows where {topic} is above {m}, so x < {k} does not hold for all of them.",
    "If the count is <= {k} I will keep it in memory; otherwise I will stream it.",
    "{Subj} reports {topic} at {f}% (n = {n}), which seems {adj}.",
    "I am not sure whether {subj} is {adj}, so I will ask a sub-agent to {verb} it.",
    "**Note:** {subj} was {adj} last time, and {reason}.",
    "The threshold is i < {k} for the warm-up window and {m} afterwards.",
    "That gives a ratio of {f}, roughly what I expected for {topic}.",
)

_LANGS = ("fr", "de", "ja", "es", "pt-BR")
_UNICODE_BITS = (
    "café crème",
    "naïve Bayes",
    "Zürich office",
    "東京の売上",
    "résumé.pdf",
    "✅ passed",
    "🚀 launch notes",
    "数据质量",
    "Ελληνικά",
    "mañana",
    "🙂",
    "→ next step",
    "€1,250.00",
    "Привет",
)
_QUOTED_BITS = (
    'the "fast" path',
    'error: "connection reset by peer"',
    'title: "Q3 \\"final\\" numbers"',
    'he said "ship it"',
    'regex "\\d+\\.\\d+"',
    'the literal "</action>" in a template',
    'html "<div class=\\"note\\">hi</div>"',
    'a "<div>" wrapper',
    'path "C:\\\\Users\\\\ana\\\\report.xlsx"',
    "tab\tseparated",
    "multi\nline",
    'braces {"a": [1, 2]}',
)

_NAMES: dict[str, tuple[str, ...]] = {
    "tool": (
        "web_search",
        "read_file",
        "run_python",
        "sql_query",
        "http_get",
        "list_directory",
        "write_file",
        "grep_repo",
        "fetch_metrics",
    ),
    "agent": ("researcher", "code_reviewer", "planner", "summarizer", "data_analyst"),
    "relic": ("vector_memory", "kv_store", "notebook_state", "doc_index"),
    "workflow": ("etl_pipeline", "deploy_preview", "report_builder", "backfill"),
    "llm": ("summarize", "translate", "classify", "extract_entities"),
}
_TYPE_WEIGHTS = (("tool", 50), ("agent", 15), ("relic", 12), ("workflow", 8), ("llm", 15))
_MODE_WEIGHTS = (("async", 55), ("sync", 35), ("fire_and_forget", 10))


class _Gen:
    """Generator state that must persist across segments (rng, id counter, recent ids)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.next_id = 1
        self.recent_ids: list[str] = []
        self.recent_keys: list[str] = []

    # -- prose ---------------------------------------------------------------

    def sentence(self) -> str:
        r = self.rng
        subj, subj2 = r.sample(_SUBJECTS, 2)
        verb, verb2 = r.sample(_VERBS, 2)
        return r.choice(_SENTENCE_TEMPLATES).format(
            conn=r.choice(_CONNECTIVES),
            subj=subj,
            Subj=subj[0].upper() + subj[1:],
            subj2=subj2,
            verb=verb,
            verb2=verb2,
            adj=r.choice(_ADJECTIVES),
            reason=r.choice(_REASONS),
            topic=r.choice(_TOPICS),
            code=r.choice(_CODE_WORDS),
            n=r.randint(3, 48000),
            m=r.randint(10, 900),
            k=r.randint(2, 64),
            f=round(r.uniform(0.1, 99.9), 1),
        )

    def paragraph(self) -> str:
        return " ".join(self.sentence() for _ in range(self.rng.randint(2, 6)))

    def thought_prose(self) -> list[str]:
        r = self.rng
        paras: list[str] = []
        for _ in range(r.randint(3, 7)):
            if r.random() < 0.15:  # Models plan in short markdown lists, too.
                paras.append(
                    "\n".join(
                        f"- {r.choice(_VERBS)} {r.choice(_SUBJECTS)}"
                        for _ in range(r.randint(2, 4))
                    )
                )
            else:
                paras.append(self.paragraph())
        return paras

    # -- actions ---------------------------------------------------------------

    def string_value(self) -> str:
        """A parameter string; some carry the characters that trip naive scanners."""
        r = self.rng
        x = r.random()
        if x < 0.12:
            return r.choice(_QUOTED_BITS)
        if x < 0.22:
            return r.choice(_UNICODE_BITS) + " " + r.choice(_TOPICS)
        return self.sentence()

    def parameters(self, name: str) -> dict[str, object]:
        r = self.rng
        params: dict[str, object] = {}
        if name in ("web_search", "researcher", "doc_index", "vector_memory"):
            params["query"] = self.string_value()
            params["top_k"] = r.randint(3, 20)
        elif name in ("sql_query",):
            params["sql"] = (
                f"SELECT region, avg({r.choice(('latency_ms', 'revenue', 'errors'))}) "
                f"FROM events WHERE day >= '2024-0{r.randint(1, 9)}-01' AND x < {r.randint(2, 99)} "
                "GROUP BY region ORDER BY 2 DESC"
            )
            params["database"] = r.choice(("analytics", "billing", "warehouse"))
        elif name in ("run_python",):
            params["code"] = (
                "import pandas as pd\n"
                f'df = pd.read_csv("data/{r.choice(_TOPICS).replace(" ", "_")}.csv")\n'
                f"print(df[df.value < {r.randint(1, 500)}].describe())"
            )
        elif name in ("read_file", "write_file", "list_directory", "grep_repo"):
            folder = r.choice(("core", "api", "jobs", "ui"))
            params["path"] = f"src/{folder}/{r.choice(_VERBS)}_{r.randint(1, 99)}.py"
            if name == "write_file":
                params["content"] = self.paragraph()
            if name == "grep_repo":
                params["pattern"] = r.choice(("def \\w+\\(", '"</action>"', "TODO|FIXME", "<div>"))
        elif name in ("http_get", "fetch_metrics"):
            topic = r.choice(_TOPICS).replace(" ", "-")
            params["url"] = f"https://api.example.com/v2/{topic}?limit={r.randint(10, 500)}"
            params["headers"] = {
                "Accept": "application/json",
                "X-Trace": f"t-{r.randint(1000, 9999)}",
            }
        elif name == "translate":
            params["text"] = self.string_value()
            params["target"] = r.choice(_LANGS)
        else:
            params["instructions"] = self.string_value()
            params["context"] = {
                "topic": r.choice(_TOPICS),
                "notes": [self.string_value() for _ in range(r.randint(1, 3))],
                "limits": {"max_items": r.randint(5, 100), "strict": r.random() < 0.5},
            }
        if self.recent_keys and r.random() < 0.2:
            # A ``$name`` reference to an earlier output, as models write them.
            params["input"] = "$" + r.choice(self.recent_keys)
        return params

    def action(self) -> str:
        r = self.rng
        atype = r.choices([t for t, _ in _TYPE_WEIGHTS], [w for _, w in _TYPE_WEIGHTS])[0]
        mode = r.choices([m for m, _ in _MODE_WEIGHTS], [w for _, w in _MODE_WEIGHTS])[0]
        name = r.choice(_NAMES[atype])
        aid = f"{name.split('_')[0]}_{self.next_id}"
        self.next_id += 1

        body: dict[str, object] = {"name": name, "parameters": self.parameters(name)}
        if r.random() < 0.6:
            key = f"{name}_out_{self.next_id - 1}"
            body["output_key"] = key
            self.recent_keys = [*self.recent_keys, key][-6:]
        if self.recent_ids and r.random() < 0.35:
            body["depends_on"] = r.sample(
                self.recent_ids, min(len(self.recent_ids), r.randint(1, 2))
            )
        if r.random() < 0.3:
            body["timeout"] = r.choice((10, 30, 60, 120, 2.5))
        if r.random() < 0.2:
            body["retry"] = r.randint(1, 3)
        self.recent_ids = [*self.recent_ids, aid][-5:]

        indent = 2 if r.random() < 0.5 else None
        text = json.dumps(body, ensure_ascii=False, indent=indent)

        attrs = [f'type="{atype}"', f'mode="{mode}"', f'id="{aid}"']
        x = r.random()
        if x < 0.08:  # Attributes may come in any order...
            r.shuffle(attrs)
        elif x < 0.16:  # ...and with single quotes.
            attrs = [a.replace('"', "'") for a in attrs]
        sep = "\n" if indent else ""
        return f"<action {' '.join(attrs)}>{sep}{text}{sep}</action>"

    # -- responses ---------------------------------------------------------------

    def table_row(self) -> str:
        r = self.rng
        region = r.choice(("eu-west", "us-east", "ap-south", "sa-east"))
        return f"| {region} | {r.randint(10, 999)} | {round(r.uniform(0, 100), 2)}% |"

    def markdown(self, blocks: int) -> str:
        r = self.rng
        heading = r.choice(("Findings", "Summary", "Progress", "Next steps", "Results"))
        out: list[str] = [f"## {heading}: {r.choice(_TOPICS)}"]
        for _ in range(blocks):
            x = r.random()
            if x < 0.35:
                out.append(self.paragraph())
            elif x < 0.55:
                out.append("\n".join(f"- {self.sentence()}" for _ in range(r.randint(2, 5))))
            elif x < 0.65:
                out.append("\n".join(f"{i}. {self.sentence()}" for i in range(1, r.randint(3, 5))))
            elif x < 0.80:
                rows = "\n".join(self.table_row() for _ in range(r.randint(2, 6)))
                out.append(f"| region | count | share |\n|---|---:|---:|\n{rows}")
            elif x < 0.92:
                out.append(
                    "```python\n"
                    "for row in rows:\n"
                    f"    if row.{r.choice(_VERBS).replace('-', '_')} < {r.randint(1, 99)}:\n"
                    '        print(f"{row.id}: <skipped>")\n```'
                )
            else:
                out.append(
                    f"<details><summary>Raw numbers</summary>\n\n{self.paragraph()}\n\n</details>"
                )
        if self.recent_keys and r.random() < 0.3:
            out.append(f"The full table is in `${r.choice(self.recent_keys)}`.")
        return "\n\n".join(out)

    # -- segments ---------------------------------------------------------------

    def segment(self) -> str:
        r = self.rng
        paras = self.thought_prose()
        parts: list[str] = ["<thought>\n"]
        inline_at = r.randrange(len(paras) + 1) if r.random() < 0.25 else -1
        for i, p in enumerate(paras):
            if i == inline_at:
                parts.append(self.action() + "\n")
            parts.append(p + "\n")
        if inline_at == len(paras):
            parts.append(self.action() + "\n")
        parts.append("</thought>\n")
        for _ in range(r.choice((1, 1, 1, 1, 2, 2, 3))):
            parts.append(self.action() + "\n")
        if r.random() < 0.55:
            parts.append(
                f'<response final="false">\n{self.markdown(r.randint(1, 4))}\n</response>\n'
            )
        return "".join(parts)

    def final_segment(self) -> str:
        return f"<response>\n{self.markdown(4)}\n</response>\n"


def generate(target_chars: int, seed: int = 0) -> str:
    """A valid Cortex stream of at most ``target_chars`` characters.

    It is cut at a segment boundary, so it is usually a little shorter than the
    target (by less than one segment, a few KB); check ``len()`` for the actual
    size. About 700 actions per MiB. Raises ``ValueError`` when the target is
    too small to hold even the final response.
    """
    gen = _Gen(seed)
    # The final segment is drawn from its own rng so that the body a given seed
    # produces does not depend on the target size.
    final = _Gen(seed ^ 0x5EED).final_segment()
    if target_chars < len(final):
        raise ValueError(
            f"target_chars={target_chars} is smaller than the final response ({len(final)} chars)"
        )
    budget = target_chars - len(final)
    parts: list[str] = []
    size = 0
    while True:
        seg = gen.segment()
        if size + len(seg) > budget:
            break
        parts.append(seg)
        size += len(seg)
    parts.append(final)
    return "".join(parts)


if __name__ == "__main__":  # A quick look at the corpus: python bench/corpus.py [chars] [seed]
    import sys

    target = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    text = generate(target, int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    print(text)
    print(f"--- {len(text)} chars, {count_actions(text)} actions", file=sys.stderr)
