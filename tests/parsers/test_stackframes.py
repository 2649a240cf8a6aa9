"""Library frames out of real-looking `exception.stacktrace` texts (Java, Python, Node)."""

from __future__ import annotations

from trustrank.parsers.stackframes import (
    JAVA_FRAME,
    JS_FRAME,
    MAX_SCAN_CHARS,
    PYTHON_FRAME,
    stack_frames,
)

# What log4j's own exception printing and the Java agent's record_exception produce, with
# a chained cause, "... n more", logback's packaging data and a line cut off at the end.
JAVA = """\
org.apache.logging.log4j.core.appender.AppenderLoggingException: Unable to write to stream
\tat org.apache.logging.log4j.core.Logger.log(Logger.java:123) ~[log4j-core-2.14.1.jar:2.14.1]
\tat org.apache.logging.log4j.spi.AbstractLogger.logMessage(AbstractLogger.java:2017)
\tat org.apache.logging.log4j.spi.AbstractLogger.logMessage(AbstractLogger.java:2017)
\tat com.shop.payment.PaymentController.lambda$pay$0(PaymentController.java:88)
\tat com.shop.payment.PaymentController$Inner.<init>(PaymentController.java:12)
\tat jdk.internal.reflect.NativeMethodAccessorImpl.invoke0(Native Method)
\tat java.base/java.lang.reflect.Method.invoke(Method.java:568)
\tat app//org.springframework.web.servlet.DispatcherServlet.doDispatch(DispatcherServlet.java:1067)
\tat sun.reflect.GeneratedMethodAccessor12.invoke(Unknown Source)
Caused by: java.io.IOException: Broken pipe
\tat com.fasterxml.jackson.databind.ObjectMapper.writeValue(ObjectMapper.java:3306)
\t... 42 more
\tSuppressed: java.lang.IllegalStateException: at the same time
\t\tat org.apache.catalina.core.StandardWrapperValve.invoke(StandardWrapperValve.java:197)
\tat org.apache.catalina.connector.CoyoteAdapter.serv"""

# CPython 3.11+ (source lines and ^^^ markers), a chained exception, a venv, Debian's
# dist-packages, an egg, the standard library and the application.
PYTHON = """\
Traceback (most recent call last):
  File "/usr/local/lib/python3.11/site-packages/urllib3/connectionpool.py", line 703, in urlopen
    httplib_response = self._make_request(
                       ^^^^^^^^^^^^^^^^^^^
  File "/usr/local/lib/python3.11/http/client.py", line 1286, in request
    self._send_request(method, url, body, headers, encode_chunked)
ConnectionResetError: [Errno 104] Connection reset by peer

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/app/shop/views.py", line 41, in checkout
    resp = session.post(url, json=payload)
  File "/app/.venv/lib/python3.12/site-packages/requests/sessions.py", line 589, in request
    resp = self.send(prep, **send_kwargs)
  File "/usr/lib/python3/dist-packages/yaml/__init__.py", line 81, in load
  File "/opt/lib/site-packages/simplejson-3.19-py3.11.egg/simplejson/decoder.py", line 3, in f
  File "/app/.venv/lib/python3.12/site-packages/six.py", line 9, in <module>
  File "<frozen importlib._bootstrap>", line 1176, in _find_and_load
requests.exceptions.ConnectionError: ('Connection aborted.', ConnectionResetError(104))
  File "/app/.venv/lib/python3.12/site-packages/urllib3/util/ret"""

# V8 (Node.js): plain and scoped packages, pnpm's layout, a nested node_modules, Node's
# internals, the application, an anonymous frame without parentheses and Windows paths.
NODE = """\
TypeError: Cannot read properties of undefined (reading 'id')
    at Object.<anonymous> (/app/node_modules/express/lib/router/index.js:284:7)
    at Layer.handle [as handle_request] (/app/node_modules/express/lib/router/layer.js:95:5)
    at /app/node_modules/.pnpm/body-parser@1.20.2/node_modules/body-parser/lib/read.js:130:5
    at RouterProxy.next (/app/node_modules/@nestjs/core/router/router-proxy.js:9:19)
    at f (/app/node_modules/a/node_modules/debug/src/node.js:1:2)
    at processTicksAndRejections (node:internal/process/task_queues:95:5)
    at handler (/app/src/server.js:10:3)
    at async Promise.all (index 0)
    at C:\\app\\node_modules\\lodash\\lodash.js:10:1
    at Module._compile (node:internal/modules/cjs/loader:1256:14)
    at foo (/app/node_modules/express/lib/rou"""


def _names(frames, kind):
    return [name for k, name in frames if k == kind]


def test_java_frames_name_classes_and_methods_once_and_skip_the_jdk():
    frames = stack_frames(JAVA, max_frames=50)
    assert set(k for k, _ in frames) == {JAVA_FRAME}
    assert _names(frames, JAVA_FRAME) == [
        "org.apache.logging.log4j.core.Logger.log",
        "org.apache.logging.log4j.spi.AbstractLogger.logMessage",
        "com.shop.payment.PaymentController.lambda$pay$0",
        "com.shop.payment.PaymentController$Inner.<init>",
        "org.springframework.web.servlet.DispatcherServlet.doDispatch",
        "com.fasterxml.jackson.databind.ObjectMapper.writeValue",
        "org.apache.catalina.core.StandardWrapperValve.invoke",
    ]


def test_python_frames_are_the_modules_under_site_or_dist_packages():
    frames = stack_frames(PYTHON, max_frames=50)
    assert set(k for k, _ in frames) == {PYTHON_FRAME}
    assert _names(frames, PYTHON_FRAME) == [
        "urllib3.connectionpool.urlopen",
        "requests.sessions.request",
        "yaml.load",
        "simplejson.decoder.f",
        "six",
    ]


def test_node_frames_are_paths_below_the_innermost_node_modules():
    frames = stack_frames(NODE, max_frames=50)
    assert set(k for k, _ in frames) == {JS_FRAME}
    assert _names(frames, JS_FRAME) == [
        "express/lib/router/index.js",
        "express/lib/router/layer.js",
        "body-parser/lib/read.js",
        "@nestjs/core/router/router-proxy.js",
        "debug/src/node.js",
        "lodash/lodash.js",
    ]


def test_at_most_max_frames_are_read_from_the_top():
    assert _names(stack_frames(JAVA, max_frames=2), JAVA_FRAME) == [
        "org.apache.logging.log4j.core.Logger.log",
        "org.apache.logging.log4j.spi.AbstractLogger.logMessage",
    ]
    # Application and JDK frames count toward the bound too.
    assert _names(stack_frames(JAVA, max_frames=6), JAVA_FRAME)[-1] == (
        "com.shop.payment.PaymentController$Inner.<init>")
    assert _names(stack_frames(PYTHON, max_frames=2), PYTHON_FRAME) == [
        "urllib3.connectionpool.urlopen"]
    assert stack_frames(JAVA, max_frames=0) == ()


def test_junk_and_empty_texts_give_no_frames():
    assert stack_frames("") == ()
    assert stack_frames("NullPointerException\n\tat \n\t... 3 more\n") == ()
    assert stack_frames("at some point (it broke)\nFile not found: x.py") == ()
    assert stack_frames("\x00\xff" * 1000) == ()


def test_a_huge_trace_is_read_only_up_to_the_scan_limit():
    filler = "x" * MAX_SCAN_CHARS
    text = filler + "\n\tat org.apache.logging.log4j.core.Logger.log(Logger.java:1)\n"
    assert stack_frames(text) == ()
    long_name = "\tat org." + "a" * 300 + ".B.c(B.java:1)"
    (frame,) = stack_frames(long_name)
    assert len(frame[1]) == 200


def test_pathological_lines_stay_cheap():
    import time

    texts = [
        "    at " + "/node_modules/" * 4000 + "x",
        "    at (" + "/node_modules/a:1" * 3000,
        "\tat " + "a." * 30000 + "(",
        '  File "' + "/site-packages/" * 4000 + '", line 1, in x',
        ("    at f (/app/node_modules/" + "a/" * 700 + "b.js:1:2)\n") * 200,
    ]
    started = time.process_time()
    for text in texts:
        stack_frames(text, max_frames=10_000)
    assert time.process_time() - started < 0.5
    # A file directly in node_modules names no package.
    assert stack_frames("    at f (/app/node_modules/a.js:1:2)") == ()
