"""WSGI entry point (gunicorn serves `trustrank.wsgi:application`)."""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterable
from typing import Any

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trustrank.settings")

_django = get_wsgi_application()

from trustrank.lib.startup import static_files_check  # noqa: E402 - needs settings loaded

static_files_check()


def _buffer_chunked_body(
    app: Callable[..., Iterable[bytes]],
) -> Callable[..., Iterable[bytes]]:
    """Give Django a Content-Length for chunked request bodies.

    Django reads exactly CONTENT_LENGTH bytes and treats a missing one as an empty body, so a
    `Transfer-Encoding: chunked` upload (the OpenTelemetry JS exporter sends one) would look
    empty. gunicorn de-chunks the stream; we buffer it here, up to the upload limit plus one
    byte so the size check downstream still sees an oversized body and answers 413.
    """
    from django.conf import settings

    limit = settings.TRUSTRANK_MAX_UPLOAD_BYTES

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        chunked = "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()
        if chunked and not environ.get("CONTENT_LENGTH"):
            stream = environ["wsgi.input"]
            buf = io.BytesIO()
            remaining = limit + 1
            while remaining > 0:
                piece = stream.read(min(remaining, 1 << 20))
                if not piece:
                    break
                buf.write(piece)
                remaining -= len(piece)
            size = buf.tell()
            if size > limit:
                environ["trustrank.body_too_large"] = True
            buf.seek(0)
            environ["wsgi.input"] = buf
            environ["CONTENT_LENGTH"] = str(size)
        return app(environ, start_response)

    return wrapped


application = _buffer_chunked_body(_django)
