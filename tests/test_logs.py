"""The log format names the stream whose micro-batch logged a line (a writer group's streams interleave)."""

from __future__ import annotations

import io
import logging
import threading

from laketide.logs import FORMAT, for_stream, name_streams


def test_lines_logged_in_a_batch_name_their_stream_and_others_do_not() -> None:
    out = io.StringIO()
    handler = name_streams(logging.StreamHandler(out))
    handler.setFormatter(logging.Formatter(FORMAT))
    log = logging.getLogger("laketide.test_logs")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    try:
        def batch(name: str) -> None:  # as the py4j callback threads of two streams run their batches
            with for_stream(name):
                log.info("batch 3 committed")
            log.info("between batches")

        threads = [threading.Thread(target=batch, args=(n,)) for n in ("clicks", "orders")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        log.info("the group's own line")
    finally:
        log.removeHandler(handler)
    lines = out.getvalue().splitlines()
    assert sorted(line.split(": ", 1)[1] for line in lines) == [
        "[clicks] batch 3 committed", "[orders] batch 3 committed", "between batches", "between batches",
        "the group's own line"], lines
