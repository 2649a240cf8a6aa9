"""kombu's filesystem broker, made safe for several processes reading and writing at once.

kombu's own transport writes a message in place (create, then write), so a worker polling
the folder could claim a file still empty or half-written and die on a JSONDecodeError;
its exchange tables are rewritten in place too (`open("wb")` truncates before the lock is
taken), so a reader could see an empty table. Here every file appears whole or not at all:

- a message is written to a hidden temporary file in the queue folder and renamed to its
  final name (a rename within one folder is atomic), so its name is only listed once its
  content is complete;
- a consumer claims a message by renaming it into the processed folder: exactly one of
  several consumers racing for it succeeds, the others find it gone and look further;
- exchange tables are rewritten the same way, under a lock file so two binds never lose
  each other's queue.

Message files keep kombu's names and format, so messages queued by the plain transport
are still read.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from queue import Empty
from typing import Any

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.json import dumps, loads

log = logging.getLogger(__name__)

_TEMP_PREFIX = ".tmp-"


def _write_atomically(path: Path, data: bytes) -> None:
    """Write `data` to `path` so that no reader ever sees part of it."""
    temp = path.with_name(f"{_TEMP_PREFIX}{uuid.uuid4().hex}")
    try:
        with temp.open("wb") as handle:
            handle.write(data)
        os.replace(temp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise ChannelError(f"Cannot write {path}") from exc


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock held for a read-modify-write of `path` (readers need none: the
    file is only ever replaced whole)."""
    with path.with_name(path.name + ".lock").open("a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


class Channel(filesystem.Channel):
    # kombu's filesystem Channel (the parent) names the message `payload`, its virtual base
    # `message`: no signature matches both.
    def _put(self, queue: Any, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        # Wall-clock nanoseconds, zero-padded, so names sort in sending order across
        # processes (and across restarts, unlike kombu's monotonic milliseconds).
        name = f"{time.time_ns():020d}_{uuid.uuid4()}.{queue}.msg"
        _write_atomically(Path(self.data_folder_out) / name, dumps(payload).encode())

    def _get(self, queue: Any, timeout: Any = None) -> Any:
        wanted = f"{queue}.msg"
        folder = Path(self.data_folder_in)
        processed = Path(self.processed_folder)
        for name in sorted(os.listdir(folder)):
            if name.partition(".")[2] != wanted:
                continue
            claimed = processed / name
            try:
                os.rename(folder / name, claimed)
            except FileNotFoundError:
                continue  # another consumer claimed it first
            except OSError as exc:
                raise ChannelError(f"Cannot claim {folder / name}") from exc
            try:
                payload = loads(claimed.read_bytes())
            except (OSError, ValueError):
                # Only a file written by something else than _put can be incomplete: keep it
                # for a look, out of the way, and go on with the queue.
                log.exception("broker message %s is unreadable; set aside", claimed)
                with contextlib.suppress(OSError):
                    claimed.rename(claimed.with_name(name + ".unreadable"))
                continue
            if not self.store_processed:
                with contextlib.suppress(OSError):
                    claimed.unlink()
            return payload
        raise Empty()

    def get_table(self, exchange: str) -> list[Any]:
        file = self._exchange_file(exchange)
        try:
            table = loads(file.read_bytes())
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            raise ChannelError(f"Cannot read {file}") from exc
        return [filesystem.exchange_queue_t(*entry) for entry in table]

    def _queue_bind(
        self, exchange: str, routing_key: str, pattern: str, queue: str
    ) -> None:
        file = self._exchange_file(exchange)
        self.control_folder.mkdir(parents=True, exist_ok=True)
        entry = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        with _locked(file):
            table = self.get_table(exchange)
            if entry not in table:
                _write_atomically(file, dumps([entry, *table]).encode())

    def _delete(self, queue: str, exchange: str, routing_key: str, pattern: str,
                *args: Any, **kwargs: Any) -> None:
        # The virtual channel's bookkeeping, then our own table (not kombu's in-place one).
        super(filesystem.Channel, self)._delete(
            queue, exchange, routing_key, pattern, *args, **kwargs
        )
        file = self._exchange_file(exchange)
        self.control_folder.mkdir(parents=True, exist_ok=True)
        entry = filesystem.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        with _locked(file):
            table = self.get_table(exchange)
            if entry in table:
                table.remove(entry)
                _write_atomically(file, dumps(table).encode())


class Transport(filesystem.Transport):
    """Celery's `broker_transport` for the embedded defaults (see trustrank/lib/embedded.py)."""

    Channel = Channel
    driver_name = "trustrank-files"
