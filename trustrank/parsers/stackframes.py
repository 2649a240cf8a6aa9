"""`exception.stacktrace` text -> the library code its frames name (pure; no Django).

A span `exception` event carries the stack trace as one string in the language's own
format. Only frames that can name a package are kept, as `(kind, code name)` pairs the
aggregation records as library evidence beside `code.namespace`:

- Java (and Kotlin, Scala: any JVM trace) `at org.apache.logging.log4j.core.Logger.log(
  Logger.java:123)` -> `("java_frame", "org.apache.logging.log4j.core.Logger.log")`.
  A module or class-loader prefix (`java.base/`, `app//`) is dropped; JDK frames
  (`java.`, `jdk.`, `sun.`, `com.sun.`) name no package and are skipped here.
- Python `File ".../site-packages/requests/sessions.py", line 589, in request` ->
  `("python_frame", "requests.sessions.request")`: the module path under `site-packages`
  or `dist-packages`, dotted, and the function. Frames outside those folders (the
  application, the standard library) are skipped.
- JavaScript (V8) `at Object.<anonymous> (/app/node_modules/express/lib/router/index.js:284:7)`
  -> `("js_frame", "express/lib/router/index.js")`: the path below the innermost
  `node_modules/` (pnpm's `.pnpm/<pkg>@<ver>/node_modules/<pkg>` included), which starts
  with the npm package name (`@scope/name` for scoped packages).

Anything else (the message line, `Caused by:`, `... 42 more`, source lines and `^^^`
markers of Python 3.11, a trace cut off mid-line) matches no pattern and is ignored. The
work is bounded: at most `max_frames` frames are read from the top of a trace (the frames
nearest the throw), and at most `MAX_SCAN_CHARS` characters of it are looked at.
"""

from __future__ import annotations

import re

JAVA_FRAME = "java_frame"
PYTHON_FRAME = "python_frame"
JS_FRAME = "js_frame"
FRAME_KINDS = (JAVA_FRAME, PYTHON_FRAME, JS_FRAME)

# A stack trace longer than this is read up to here only: its top frames are the ones that
# matter, and the scan must not cost more for a megabyte of junk than for a real trace.
MAX_SCAN_CHARS = 65_536
# Stored in a column of this length (runtime LibraryBucket.name).
NAME_MAX = 200
# No real frame line is this long; longer lines are skipped unread, which also keeps every
# pattern below linear in practice.
LINE_MAX = 2000

# One pattern per frame syntax. A V8 frame with a node_modules path also starts with
# "at ", so it is looked for first, with plain string search (a regex with two lazy parts
# backtracks quadratically on a line of repeated node_modules/).
_NODE_MODULES = re.compile(r"[/\\]node_modules[/\\]")
_JS_POSITION = re.compile(r"(?::\d+){1,2}$")
_JAVA = re.compile(
    r"^\s*at\s+(?:[\w.$@-]*/)*"  # optional module / class-loader prefix: java.base@17/ app//
    r"((?:[A-Za-z_$][\w$]*\.)+[A-Za-z_$<][\w$<>-]*)"  # package.Class.method
    r"\((?:[^()\s]*|Native Method|Unknown Source)\)"
)
_PYTHON = re.compile(r'^\s*File "(.+?)", line \d+(?:, in (\S+))?')
_PACKAGES_DIR = re.compile(r"[/\\](?:site|dist)-packages[/\\]")
_JDK = ("java.", "jdk.", "sun.", "com.sun.")
_IDENTIFIER = re.compile(r"^[A-Za-z_]\w*$")


def _java(code: str) -> str | None:
    if code.startswith(_JDK):
        return None
    return code


def _python(path: str, function: str | None) -> str | None:
    parts = _PACKAGES_DIR.split(path)
    if len(parts) < 2:
        return None
    segments = re.split(r"[/\\]", parts[-1])
    # An egg or wheel folder directly under site-packages holds the package inside it.
    while segments and segments[0].endswith((".egg", ".whl")):
        segments = segments[1:]
    if not segments or not segments[-1].endswith(".py"):
        return None
    segments[-1] = segments[-1][:-3]
    if segments[-1] == "__init__":
        segments.pop()
    if not segments or not all(_IDENTIFIER.match(s) for s in segments):
        return None
    dotted = ".".join(segments)
    if function and _IDENTIFIER.match(function):
        dotted += "." + function
    return dotted


def _js_path(line: str) -> str | None:
    """The path below the innermost node_modules of a V8 frame line, position dropped."""
    parts = _NODE_MODULES.split(line)
    if len(parts) < 2:
        return None
    rest = parts[-1].rstrip()
    if rest.endswith(")"):
        rest = rest[:-1]
    position = _JS_POSITION.search(rest)
    if position is None or position.start() == 0:
        return None
    return rest[: position.start()]


def _js(rest: str) -> str | None:
    path = rest.replace("\\", "/")
    # A package folder, then a file in it: `express/index.js`, `@scope/name/index.js`.
    head = path.split("/", 2)
    if path.startswith("@"):
        if len(head) < 3 or not head[1]:
            return None
    elif len(head) < 2 or not head[0] or head[0].startswith("."):
        return None
    return path


def stack_frames(text: str, *, max_frames: int = 20) -> tuple[tuple[str, str], ...]:
    """The library frames of one stack trace, top first, each `(kind, code name)` once.

    At most `max_frames` frames of any kind (library or not) are read from the top, so a
    deep application stack cannot make one span expensive."""
    if not text or max_frames <= 0:
        return ()
    out: dict[tuple[str, str], None] = {}
    frames = 0
    for line in text[:MAX_SCAN_CHARS].splitlines():
        stripped = line.lstrip()
        if len(stripped) > LINE_MAX:
            continue
        found: tuple[str, str | None] | None = None
        if stripped.startswith("at "):
            js_path = _js_path(stripped)
            if js_path is not None:
                found = (JS_FRAME, _js(js_path))
            else:
                m = _JAVA.match(line)
                if m:
                    found = (JAVA_FRAME, _java(m.group(1)))
        elif stripped.startswith('File "'):
            m = _PYTHON.match(line)
            if m:
                found = (PYTHON_FRAME, _python(m.group(1), m.group(2)))
        else:
            continue
        # Every frame line counts toward the bound, library or not.
        frames += 1
        if found is not None and found[1]:
            out.setdefault((found[0], found[1][:NAME_MAX]), None)
        if frames >= max_frames:
            break
    return tuple(out)
