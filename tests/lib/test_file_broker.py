"""The embedded broker under several producer and consumer processes at once: every message
is delivered exactly once, and no consumer dies on a message still being written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

PRODUCERS = 3
CONSUMERS = 4
PER_PRODUCER = 300

# A process of its own, as the web server (producer) and workers (consumers) are.
SCRIPT = r'''
import json, sys, time
from pathlib import Path
from kombu import Connection

role, folder, transport, ident = sys.argv[1], Path(sys.argv[2]), sys.argv[3], sys.argv[4]
options = {
    "data_folder_in": str(folder / "queue"), "data_folder_out": str(folder / "queue"),
    "processed_folder": str(folder / "processed"), "store_processed": True,
    "control_folder": str(folder / "control"), "polling_interval": 0,
}
with Connection("filesystem://", transport=transport, transport_options=options) as conn:
    queue = conn.SimpleQueue("jobs")
    if role == "produce":
        for n in range(int(sys.argv[5])):
            # Bodies of several KiB: a write takes long enough to be caught half-done.
            queue.put({"id": f"{ident}-{n}", "pad": "x" * 20000})
        (folder / f"done-{ident}").touch()
    else:
        producers = int(sys.argv[5])
        got = []
        while True:
            try:
                message = queue.get(block=True, timeout=0.5)
            except queue.Empty:
                if len(list(folder.glob("done-*"))) == producers:
                    break
                continue
            got.append(message.payload["id"])
            message.ack()
        print(json.dumps(got))
'''


def _run(transport: str, folder: Path) -> tuple[list[str], list[str]]:
    for sub in ("queue", "processed", "control"):
        (folder / sub).mkdir(parents=True)
    def start(*args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-c", SCRIPT, *args], cwd=ROOT, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )
    consumers = [start("consume", str(folder), transport, f"c{i}", str(PRODUCERS))
                 for i in range(CONSUMERS)]
    producers = [start("produce", str(folder), transport, f"p{i}", str(PER_PRODUCER))
                 for i in range(PRODUCERS)]
    errors = []
    received: list[str] = []
    for proc in producers + consumers:
        out, err = proc.communicate(timeout=240)
        if proc.returncode != 0:
            errors.append(err[-2000:])
        elif proc in consumers:
            received += json.loads(out.strip().splitlines()[-1])
    return received, errors


@pytest.mark.e2e
def test_concurrent_producers_and_consumers_get_each_message_exactly_once(tmp_path):
    received, errors = _run("trustrank.lib.file_broker:Transport", tmp_path)
    assert errors == []
    sent = {f"p{p}-{n}" for p in range(PRODUCERS) for n in range(PER_PRODUCER)}
    assert len(received) == len(sent)  # nothing delivered twice
    assert set(received) == sent  # nothing lost
    # Nothing left behind half-written, and no temporary file.
    assert list((tmp_path / "queue").iterdir()) == []
    assert not list((tmp_path / "processed").glob("*.unreadable"))
