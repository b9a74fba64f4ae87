"""From retrieval to answers: ``export-context`` (a run's top-k sessions as reader-ready
context), ``answer`` (any OpenAI-compatible chat endpoint writes LongMemEval hypotheses) and
``judge`` (LongMemEval's judge protocol, with accuracy split by retrieval evidence). The API
key comes from the environment only (``--api-key-env``, default OPENAI_API_KEY)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from engram_eval.cli._common import finite_float, output_file, positive_float, seed_int


def add_export_context(sub: Any) -> None:
    c = sub.add_parser("export-context", help="a finished run's top-k sessions per question "
                       "as reader-ready context (JSON layout, date order, reading prompt, "
                       "token counts)")
    c.add_argument("run", help="finished result file (.jsonl or .jsonl.gz) with its sidecar")
    c.add_argument("--dataset", required=True, help="the dataset the run was made over")
    c.add_argument("--top-k", type=int, required=True, help="sessions per question")
    c.add_argument("--output", required=True, type=output_file, help="context JSONL (.gz: gzip, deterministic); "
                   "must not exist")
    c.add_argument("--no-progress", action="store_true")


def cmd_export_context(args: argparse.Namespace) -> int:
    from engram_eval.qa.context import ContextConfig, export_context

    out = export_context(args.run, args.dataset, args.output, ContextConfig(args.top_k),
                         echo=lambda m: print(m, file=sys.stderr),
                         progress=not args.no_progress)
    print(f"wrote {out.n_questions} question(s) to {out.output}")
    print(f"fingerprint {out.fingerprint}")
    for name, st in out.tokens.items():
        if st.get("n"):
            print(f"tokens {name:<14} n={st['n']} median={st['median']} mean={st['mean']} "
                  f"p90={st['p90']} max={st['max']}")
    return 0


def base_url(text: str) -> str:
    """``argparse`` type of ``--base-url``: a URL :func:`engram_eval.net.secrets.
    check_base_url` accepts (no credential in it); else one usage error that does not quote
    it."""
    from engram_eval.net.secrets import base_url_problem

    why = base_url_problem(text)
    if why is not None:
        raise argparse.ArgumentTypeError(
            f"{why} (the URL is not printed: it may hold a credential)")
    return text


base_url.__name__ = "URL"


def key_env(text: str) -> str:
    """``argparse`` type of ``--api-key-env``: the name of an environment variable; a key
    given there by mistake is one usage error that does not quote it."""
    from engram_eval.net.secrets import key_env_problem

    why = key_env_problem(text)
    if why is not None:
        raise argparse.ArgumentTypeError(why)
    return text


key_env.__name__ = "variable name"


def _endpoint_args(p: Any) -> None:
    p.add_argument("--base-url", required=True, type=base_url,
                   help="OpenAI-compatible API root, e.g. http://127.0.0.1:8000/v1 (no "
                   "credential in it: user info or a query is refused)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="VAR", type=key_env,
                   help="environment variable holding the API key (default OPENAI_API_KEY; "
                   "the key is never taken from a flag or written anywhere)")
    p.add_argument("--concurrency", type=int, default=4, help="requests in flight (default 4)")
    p.add_argument("--attempts", type=int, default=6,
                   help="tries per request on rate limits, server errors, timeouts and "
                   "malformed replies (default 6)")
    p.add_argument("--backoff", type=finite_float, default=1.0,
                   help="seconds before the first retry, doubled each time (default 1)")
    p.add_argument("--timeout", type=positive_float, default=300.0,
                   help="seconds per request, in all: a reply not complete by then is a "
                   "timeout (retried as a connection failure; default 300)")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted run after verifying its sidecar and rows")
    p.add_argument("--no-progress", action="store_true")


def _retry(args: argparse.Namespace) -> Any:
    from engram_eval.qa.client import RetryPolicy

    return RetryPolicy(attempts=args.attempts, base_delay=args.backoff)


def add_answer(sub: Any) -> None:
    a = sub.add_parser("answer", help="answer every question of a context export through an "
                       "OpenAI-compatible chat endpoint (writes {question_id, hypothesis} "
                       "lines)")
    a.add_argument("context", help="context export (export-context)")
    a.add_argument("--model", required=True, help="model name the endpoint serves")
    a.add_argument("--output", required=True, type=output_file, help="hypotheses JSONL (must not exist unless "
                   "--resume)")
    a.add_argument("--temperature", type=finite_float, default=0.0)
    a.add_argument("--max-tokens", type=int, default=None)
    a.add_argument("--seed", type=seed_int, default=None)
    a.add_argument("--limit", type=int, default=None, help="only the first N questions")
    _endpoint_args(a)


def cmd_answer(args: argparse.Namespace) -> int:
    from engram_eval.net.secrets import public_argv
    from engram_eval.qa.answer import AnswerConfig, answer

    config = AnswerConfig(base_url=args.base_url, model=args.model,
                          temperature=args.temperature, max_tokens=args.max_tokens,
                          seed=args.seed, concurrency=args.concurrency,
                          key_env=args.api_key_env, retry=_retry(args), timeout=args.timeout,
                          limit=args.limit, progress=not args.no_progress)
    out = answer(args.context, args.output, config, resume=args.resume,
                 echo=lambda m: print(m, file=sys.stderr), command=public_argv(sys.argv))
    print(f"wrote {out.n_written} hypothesis row(s); {out.n_total} in {out.output}")
    print(f"fingerprint {out.fingerprint}")
    return 0


def add_judge(sub: Any) -> None:
    j = sub.add_parser("judge", help="LongMemEval's judge protocol over a hypotheses file "
                       "(one yes/no prompt per question type, temperature 0)")
    j.add_argument("hypotheses", help="hypotheses JSONL ({question_id, hypothesis} lines)")
    j.add_argument("--dataset", required=True, help="the LongMemEval file (answers, types)")
    j.add_argument("--judge-model", required=True, help="the judge model's name")
    j.add_argument("--output", type=output_file, help="judgements JSONL (default: HYP.judged.<model>.jsonl); "
                   "the report goes to <output>.report.json")
    j.add_argument("--context", help="the context export the hypotheses were answered from "
                   "(default: the one their sidecar names) for the split by retrieval evidence")
    j.add_argument("--max-tokens", type=int, default=10, help="judge reply limit (default 10)")
    _endpoint_args(j)


def cmd_judge(args: argparse.Namespace) -> int:
    from engram_eval.net.secrets import public_argv
    from engram_eval.qa.judge import JudgeConfig, judge

    config = JudgeConfig(base_url=args.base_url, judge_model=args.judge_model,
                         max_tokens=args.max_tokens, concurrency=args.concurrency,
                         key_env=args.api_key_env, retry=_retry(args), timeout=args.timeout,
                         progress=not args.no_progress)
    out = judge(args.hypotheses, args.dataset, args.output, config, context=args.context,
                resume=args.resume, echo=print, command=public_argv(sys.argv))
    print(f"wrote {out.n_written} judgement(s) to {out.output}; report "
          f"{out.output}.report.json")
    print(f"fingerprint {out.fingerprint}")
    return 0


COMMANDS = {"export-context": (add_export_context, cmd_export_context),
            "answer": (add_answer, cmd_answer), "judge": (add_judge, cmd_judge)}
