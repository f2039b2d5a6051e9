"""Writes the benchmark-tool fixtures in crates/cli/tests/fixtures/ with the tools' own code,
so that the readers are checked against what the tools write, not against our reading of
their schemas:

- aiperf-profile-export.jsonl: AIPerf 0.13.0's metric registry converts each record's base
  units to display units, `MetricRecordInfo` holds it, and the line is serialised as its
  JSONL writer serialises (`model_dump(exclude_none=True, mode="json")`, orjson).
- guidellm-benchmarks.json: each request is GuideLLM 0.8.1's `GenerativeRequestStats`,
  dumped as its report's `save_file` dumps (`model_dump(mode="json")`, computed fields
  included); the frame around them (`benchmarks`, `metrics.request_totals`, `requests`)
  carries the keys the reader uses, where GuideLLM 0.8.1 writes them.
- guidellm-0.8.1-whole.json and guidellm-0.8.1-sampled.json (not written by this script):
  GuideLLM 0.8.1 itself, run against `routerlab engine --model-speedup 20` with a
  byte-level BPE tokenizer trained on this repository's Markdown (saved by `transformers`'
  `PreTrainedTokenizerFast`), its JSON written again without whitespace: 6 requests kept
  whole, and 12 of which it keeps a sample of 4 (the second command):

      guidellm run --backend kind=openai_http,target=http://ADDR,model=routerlab-sim \
          --profile kind=constant,rate=5 --constraint kind=max_requests,count=6 \
          --data kind=synthetic_text,prompt_tokens=64,output_tokens=8 \
          --tokenizer kind=hf_auto,model=TOKENIZER_DIR \
          --output kind=json,path=OUT.json
      guidellm run ... --constraint kind=max_requests,count=12 ... \
          --metrics kind=generative,sample_size=4 --output kind=json,path=OUT.json
- inference-perf-per-request.json: inference-perf 0.7.0's `RequestLifecycleMetric`s, each
  made an entry by its report generator's `build_per_request_lifecycle_entry` (default
  fields) and the list written as its local storage writes reports (`json.dumps`, indent
  2), with times on its client's `time.perf_counter()` clock.
- lmbench-summary.csv: a pandas DataFrame per user with the columns of LMBench's
  `multi-round-qa.py` summary, in its order, concatenated, `to_csv(index=False)`.
- fmperf-results.json and fmperf-requests.json: fmperf's load generator itself
  (`fmperf/loadgen/run.py` at 8d85bc3, one user), its clock and HTTP client replaced by
  stand-ins that replay the timings below as a vLLM server streams them (a chunk a token,
  with `usage`); the requests file is laid out in `generate-input.py`'s shape for the
  draws its worker makes. fmperf's own `parse_results` is checked to give the TTFT and
  end-to-end means below.

The same requests in each: three that complete (TTFT 52, 71 and 33 ms; end to end 86, 96
and 43 ms) and one that fails; AIPerf's has a warm-up record too. Not run by the tests (they
read the files); run it by hand after changing the requests:

    python -m venv v && v/bin/pip install aiperf==0.13.0 guidellm==0.8.1
    v/bin/pip install inference-perf==0.7.0   # Python 3.12; on 3.11 its wheel's
                                              # source on PYTHONPATH imports too
    v/bin/pip install durations grpcio protobuf kubernetes==24.2.0 pyyaml requests \
        pandas "pytest==8.3.5" "setuptools<70"    # fmperf's imports; fmperf itself is
                                              # not on PyPI: its source on PYTHONPATH
    v/bin/python crates/cli/tests/python/make_run_fixtures.py crates/cli/tests/fixtures
"""

import json
import os
import sys

BASE = 1764580000.0
# The requests: (start s after BASE, prompt tokens, output tokens, TTFT s, end to end s).
DONE = [
    (5021.250, 200, 4, 0.052, 0.086),
    (5022.466, 280, 3, 0.071, 0.096),
    (5023.812, 60, 2, 0.033, 0.043),
]
FAILED = (5021.731, 130)


def aiperf():
    import orjson
    from aiperf.common.models.error_models import ErrorDetails
    from aiperf.common.models.record_models import MetricRecordInfo, MetricRecordMetadata
    from aiperf.metrics.metric_dicts import MetricRecordDict
    from aiperf.metrics.metric_registry import MetricRegistry

    def ns(t):
        return 1_764_580_000_000_000_000 + int(round(t * 1e9))

    rows = [(5019.0, 100, 8, 0.040, 0.200, "warmup")]
    rows += [(*r, None) for r in DONE[:1]]
    rows.append((FAILED[0], FAILED[1], 0, None, None, "error"))
    rows += [(*r, None) for r in DONE[1:]]
    lines = []
    for i, (t, isl, osl, ttft, e2e, kind) in enumerate(rows):
        end = t + (e2e if e2e is not None else 0.0006)
        metadata = MetricRecordMetadata(
            session_num=i,
            x_request_id=f"7609a2e7-aa53-4ab1-98f4-f35ecafefd2{i}",
            conversation_id=f"77aa5b0e-b305-423f-88d5-c00da189259{i}",
            turn_index=0,
            request_start_ns=ns(t),
            request_ack_ns=None if kind == "error" else ns(t + 0.004),
            request_end_ns=ns(end),
            worker_id="worker_1a2b3c4d",
            record_processor_id="record_processor_5e6f7a8b",
            benchmark_phase="warmup" if kind == "warmup" else "profiling",
        )
        if kind == "error":
            metrics = MetricRecordDict({"error_isl": isl})
            error = ErrorDetails(
                code=500, type="InternalServerError", message="Server encountered an internal error"
            )
        else:
            metrics = MetricRecordDict(
                {
                    "input_sequence_length": isl,
                    "output_sequence_length": osl,
                    "time_to_first_token": int(round(ttft * 1e9)),
                    "request_latency": int(round(e2e * 1e9)),
                }
            )
            error = None
        record = MetricRecordInfo(
            metadata=metadata,
            metrics=metrics.to_display_dict(MetricRegistry, False, False),
            error=error,
        )
        lines.append(orjson.dumps(record.model_dump(exclude_none=True, mode="json")).decode())
    return "\n".join(lines) + "\n"


def guidellm():
    from guidellm.schemas.base.info import RequestInfo, RequestTimings
    from guidellm.schemas.base.request import UsageMetrics
    from guidellm.schemas.base.request_stats import GenerativeRequestStats

    def stats(i, start, isl, osl=0, ttft=None, e2e=None):
        st = BASE + start
        if ttft is not None:
            timings = RequestTimings(
                targeted_start=st, queued=st - 0.001, dequeued=st - 0.0005, scheduled_at=st,
                resolve_start=st, request_start=st, first_request_iteration=st + ttft,
                first_token_iteration=st + ttft, last_token_iteration=st + e2e,
                last_request_iteration=st + e2e, request_iterations=osl,
                token_iterations=osl, request_end=st + e2e + 0.0004,
                resolve_end=st + e2e + 0.0005, finalized=st + e2e + 0.001,
            )
            status, output, out = "completed", " The sky is", UsageMetrics(text_tokens=osl)
        else:
            timings = RequestTimings(request_start=st, resolve_start=st, resolve_end=st + 0.0006)
            status, output, out = "errored", None, UsageMetrics()
        info = RequestInfo(request_id=f"req-{i}", status=status, timings=timings)
        return GenerativeRequestStats(
            request_id=f"req-{i}", info=info, input_metrics=UsageMetrics(text_tokens=isl),
            output_metrics=out, output=output,
        ).model_dump(mode="json")

    def benchmark(rate, successful, errored):
        return {
            "type_": "generative_benchmark",
            "config": {"strategy": {"type_": "constant", "rate": rate}},
            "metrics": {"request_totals": {"successful": len(successful), "incomplete": 0,
                                           "errored": len(errored),
                                           "total": len(successful) + len(errored)}},
            "requests": {"successful": successful, "incomplete": [], "errored": errored},
        }

    first = [stats(i, *r) for i, r in enumerate(DONE)]
    second = [stats(9, 5123.0, 500, 2, 0.120, 0.150)]
    report = {
        "metadata": {"guidellm_version": "0.8.1"},
        "benchmarks": [benchmark(2.0, first, [stats(1, *FAILED)]), benchmark(4.0, second, [])],
    }
    return json.dumps(report, indent=2) + "\n"


def inference_perf():
    from inference_perf.apis.base import (
        ErrorResponseInfo,
        InferenceInfo,
        RequestLifecycleMetric,
        StreamedResponseMetrics,
    )
    from inference_perf.config.reportgen.config import PerRequestFieldsConfig
    from inference_perf.payloads import RequestMetrics
    from inference_perf.payloads.text.metrics import Text
    from inference_perf.reportgen.base import build_per_request_lifecycle_entry

    clock = 812.5 - 5021.0  # the client's perf_counter at BASE + 5021 s was 812.5
    metrics = []
    rows = [(*DONE[0], None), (FAILED[0], FAILED[1], 0, None, None, "error"), DONE[1] + (None,)]
    rows.append(DONE[2] + (None,))
    for start, isl, osl, ttft, e2e, kind in rows:
        t = clock + start
        body = json.dumps({"model": "facebook/opt-125m", "prompt": "...", "max_tokens": 8,
                           "stream": True})
        if kind == "error":
            response = StreamedResponseMetrics(output_tokens=0)
            error = ErrorResponseInfo(error_type="ClientConnectorError",
                                      error_msg="Cannot connect to host")
            end, data = t + 0.0006, None
        else:
            gap = (e2e - ttft) / (osl - 1)
            times = [t + ttft + k * gap for k in range(osl)]
            response = StreamedResponseMetrics(output_tokens=osl, chunk_times=times,
                                               output_token_times=times)
            error, end, data = None, t + e2e + 0.0003, " The sky is"
        metrics.append(RequestLifecycleMetric(
            stage_id=0, scheduled_time=t - 0.0001, start_time=t, end_time=end,
            request_data=body, response_data=data,
            info=InferenceInfo(request_metrics=RequestMetrics(text=Text(input_tokens=isl)),
                               response_metrics=response),
            error=error,
        ))
    fields = PerRequestFieldsConfig()
    entries = [build_per_request_lifecycle_entry(m, fields, None, False) for m in metrics]
    return json.dumps(entries, indent=2)


def lmbench():
    import io

    import pandas as pd

    users = {1: [DONE[1], DONE[2]], 2: [DONE[0], (FAILED[0], FAILED[1], 0, 0.0, 0.0004)]}
    frames = []
    for user, rows in users.items():
        df = pd.DataFrame()
        df["prompt_tokens"] = [r[1] for r in rows]
        df["generation_tokens"] = [r[2] for r in rows]
        df["ttft"] = [r[3] for r in rows]
        # The script's generation time: first token to last.
        df["generation_time"] = [round(r[4] - r[3], 6) if r[2] else r[4] for r in rows]
        df["user_id"] = user
        df["question_id"] = range(1, len(rows) + 1)
        df["launch_time"] = [BASE + r[0] for r in rows]
        df["finish_time"] = [BASE + r[0] + max(r[4], r[3]) + 0.0002 for r in rows]
        frames.append(df)
    text = io.StringIO()
    pd.concat(frames).to_csv(text, index=False)
    return text.getvalue()


def fmperf():
    """fmperf's own `run()` (fmperf/loadgen/run.py) with one user against a stand-in for
    the server: its clock and `requests.post` are replaced, so the records it writes carry
    the timings above. Returns the requests file and the results file."""
    import tempfile

    import numpy as np

    work = tempfile.mkdtemp()
    os.environ.update(
        REQUESTS_DIR=work,
        REQUESTS_FILENAME="fmperf-requests.json",
        RESULTS_FILENAME="fmperf-results.json",
        TARGET="vllm",
        URL="vllm.invalid:8000",
        NUM_USERS="1",
        DURATION="60s",
        BACKOFF="1s",
        GRACE_PERIOD="10s",
    )
    os.environ.pop("PROM_URL", None)
    import requests as http

    import fmperf.loadgen.run as loadgen

    def ns(t):
        return 1_764_580_000_000_000_000 + int(round(t * 1e9))

    def chunk(text, done, finish):
        body = {
            "id": "cmpl-1",
            "object": "text_completion",
            "model": "m",
            "choices": [{"index": 0, "text": text, "logprobs": None,
                         "finish_reason": finish, "stop_reason": None}],
            "usage": {"prompt_tokens": 1, "completion_tokens": done, "total_tokens": 1 + done},
        }
        return b"data: " + json.dumps(body).encode()

    # The requests in the order the one user sends them; which case each draws is the
    # worker's RandomState(0), so the file is laid out for those draws.
    plan = [DONE[0], (FAILED[0], FAILED[1], 0, None, None), DONE[1], DONE[2]]
    size = 4
    while len(set(np.random.RandomState(0).randint(0, size, 8)[: len(plan)])) < len(plan):
        size += 1
    rs = np.random.RandomState(0)
    draws = [rs.randint(low=0, high=size) for _ in plan]
    cases = [None] * size
    clock = [ns(5020.0)]  # the worker's t_start
    streams = []
    for (start, prompt, output, ttft, e2e), draw in zip(plan, draws):
        clock += [ns(start), ns(start)]  # the loop's check of the time, then t0
        if ttft is None:
            clock.append(ns(start + 0.0006))  # the broken stream's error
            streams.append(None)
            expected = []
        else:
            times = [start + ttft + (e2e - ttft) * i / max(output - 1, 1) for i in range(output)]
            clock += [ns(t) for t in times] + [ns(times[-1])]
            lines = [chunk("w%d" % i, i + 1, "length" if i == output - 1 else None)
                     for i in range(output)]
            streams.append(lines)
            expected = [{"index": 0, "text": "w%d" % i, "logprobs": None,
                         "finish_reason": "length" if i == output - 1 else None,
                         "stop_reason": None} for i in range(output)]
        cases[draw] = {
            "config": {"in_tokens": prompt, "out_tokens": max(output, 1), "is_greedy": True},
            "request": {"model": "m", "prompt": list(range(1, prompt + 1)), "ignore_eos": True,
                        "max_tokens": max(output, 1), "stream": True, "temperature": 0.0},
            "expected": expected,
        }
    for i, case in enumerate(cases):
        if case is None:
            cases[i] = {"config": {"in_tokens": 10, "out_tokens": 1, "is_greedy": True},
                        "request": {"model": "m", "prompt": list(range(1, 11)),
                                    "max_tokens": 1, "stream": True}, "expected": []}
    clock.append(ns(5090.0))  # past the duration: the user stops
    with open(os.path.join(work, "fmperf-requests.json"), "w") as f:
        json.dump(cases, f)

    class Clock:
        def time_ns(self):
            return clock.pop(0)

        def sleep(self, seconds):
            pass

    class Response:
        def __init__(self, lines):
            self.lines = lines

        def iter_lines(self, chunk_size, decode_unicode, delimiter):
            if self.lines is None:
                raise http.exceptions.ChunkedEncodingError("Connection broken: IncompleteRead")
            yield from self.lines

    def post(url, headers, json, stream):
        return Response(streams.pop(0))

    loadgen.time = Clock()
    http.post = post
    cwd = os.getcwd()
    os.chdir(work)
    try:
        outputs = loadgen.run()
    finally:
        os.chdir(cwd)
    assert not clock and not streams, (clock, streams)
    from fmperf.utils import parse_results

    summary = parse_results(outputs)
    # fmperf's own summary of what it wrote: the same requests as the other fixtures.
    assert summary["n_requests"].iloc[0] == 4 and summary["n_fail"].iloc[0] == 1, summary
    assert abs(summary["latency_prefill_ms"].iloc[0] - 52.0) < 1e-6, summary
    assert abs(summary["latency_e2e_ms"].iloc[0] - 75.0) < 1e-6, summary
    texts = {}
    for name in ["fmperf-requests.json", "fmperf-results.json"]:
        with open(os.path.join(work, name)) as f:
            texts[name] = f.read()
    return texts


if __name__ == "__main__":
    directory = sys.argv[1]
    for name, make in [
        ("aiperf-profile-export.jsonl", aiperf),
        ("guidellm-benchmarks.json", guidellm),
        ("inference-perf-per-request.json", inference_perf),
        ("lmbench-summary.csv", lmbench),
        (None, fmperf),
    ]:
        made = make()
        files = made if name is None else {name: made}
        for file, text in files.items():
            with open(os.path.join(directory, file), "w") as f:
                f.write(text)
