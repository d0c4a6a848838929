"""llama-server's ``n_cmpl`` (alias ``n``): several completions of one request, on as many slots;
and a completion request with several prompts (``tokenize_input_prompts``: one task per prompt).

Each completion is its own engine request with the same parameters (so the same
``seed`` gives the same text, as llama-server's child tasks copy their parent's),
run side by side: the engine decodes them in one batch and, once the first has
evaluated the prompt, the others find it in a slot's cache (prefix reuse).
Several prompts run the same way, each child with its own prompt.
Answers as llama-server merges them: OpenAI shapes get one choice per
completion (``index`` 0..n-1), the native ``/completion`` an array of answers;
a stream interleaves every completion's chunks, each with its ``index``.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from workers.inference.engine import Job

_DONE = object()


def _child(job: Job, prompt: Mapping[str, Any] | None = None) -> Job:
    """One completion of ``job`` (``prompt``: its own ``prompt`` and ``media_files``, for several prompts)."""
    options = {k: v for k, v in job.options.items() if k != "prompts"}
    child = Job(job.kind, {**job.kwargs, **(prompt or {})}, stream=job.stream, options={**options, "n_cmpl": 1})
    child.client_gone = job.client_gone
    return child


def _indexed(chunk: Any, i: int, native: bool) -> Any:
    if not isinstance(chunk, dict):
        return chunk
    if native:
        return {**chunk, "index": i}
    choices = [{**c, "index": i} for c in chunk.get("choices") or []]
    return {**chunk, "choices": choices} if "choices" in chunk else chunk


def _merge_whole(results: list[Any], native: bool, one_prompt: bool) -> Any:
    if native:
        return [_indexed(r, i, True) for i, r in enumerate(results)]
    first = dict(results[0])
    first["choices"] = [{**r["choices"][0], "index": i} for i, r in enumerate(results)]
    if isinstance(first.get("usage"), dict):  # OpenAI counts every choice's tokens, one prompt once
        done = sum(int(r.get("usage", {}).get("completion_tokens", 0)) for r in results)
        prompts = results[:1] if one_prompt else results
        prompt = sum(int(r.get("usage", {}).get("prompt_tokens", 0)) for r in prompts)
        first["usage"] = {**first["usage"], "prompt_tokens": prompt, "completion_tokens": done}
        first["usage"]["total_tokens"] = prompt + done
    return first


def run_many(front: Any, job: Job, n: int) -> None:
    """Run ``n`` completions of ``job`` and attach their merged answer (or stream) to it."""
    _run_children(front, job, [_child(job) for _ in range(n)], one_prompt=True)


def run_prompts(front: Any, job: Job, prompts: list[Mapping[str, Any]]) -> None:
    """Run one completion of ``job`` per prompt (each ``{"prompt", "media_files"?}``) and attach their
    merged answer (or stream) to it, as for ``n_cmpl``."""
    _run_children(front, job, [_child(job, p) for p in prompts], one_prompt=False)


def _run_children(front: Any, job: Job, children: list[Job], *, one_prompt: bool) -> None:
    n = len(children)
    native = bool(job.options.get("native"))
    if job.stream:
        for child in children:
            front.run_job(child)  # each is queued now; its chunks are read by _interleave
        job.attach(_interleave(children, native))
        return
    results: list[Any] = [None] * n
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            front.run_job(children[i])
            results[i] = list(children[i].results())[-1]
        except BaseException as exc:  # re-raised on the request's thread below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,), name=f"n_cmpl-{i}", daemon=True) for i in range(1, n)]
    for t in threads:
        t.start()
    run(0)
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    job.attach(iter([_merge_whole(results, native, one_prompt)]))


def _interleave(children: list[Job], native: bool) -> Iterator[Any]:
    """Every child's chunks in the order they come, each marked with its child's index."""
    out: queue.SimpleQueue[tuple[int, Any]] = queue.SimpleQueue()
    stop = threading.Event()

    def pump(i: int) -> None:
        results = children[i].results()
        try:
            for chunk in results:
                out.put((i, chunk))
                if stop.is_set():
                    break
        except BaseException as exc:  # delivered to the reader, which raises it
            out.put((i, exc))
        finally:
            close = getattr(results, "close", None)
            if close is not None:
                close()  # cancels the engine request if it did not finish
            out.put((i, _DONE))

    for i in range(len(children)):
        threading.Thread(target=pump, args=(i,), name=f"n_cmpl-{i}", daemon=True).start()
    running = len(children)
    try:
        while running:
            i, item = out.get()
            if item is _DONE:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield _indexed(item, i, native)
    finally:
        stop.set()
