"""Schemathesis over the whole served OpenAPI schema against a real gunicorn process (as in
production: its own workers, its own database connections, real HTTP), authenticated with a
key holding every scope: every operation with generated values, then stateful sequences
along the links schemathesis finds between operations (an id one answer gives, the next
request uses). Not one answer may be a server error.

Bounded so the suite stays in its CI budget: EXAMPLES per operation, STATEFUL_RUNS
sequences of at most STATEFUL_STEPS calls, derandomized (the same cases on every run)."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode

from tests.fuzz import stats
from tests.fuzz.test_api_schema import _seed_inventory
from trustrank.accounts.models import FEEDS_WRITE, Scope

EXAMPLES = 30
STATEFUL_RUNS = 30
STATEFUL_STEPS = 6

_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)


def _served_schema(url: str, key: str) -> Any:
    """The schema as the server serves it (`/api/schema/`), not as this process builds it."""
    response = requests.get(f"{url}/api/schema/?format=json", headers={"X-Api-Key": key},
                            timeout=60)
    assert response.status_code == 200, response.text[:500]
    return schemathesis.openapi.from_dict(orjson.loads(response.content))


def _server_errors(response: Any, case: Any) -> str | None:
    try:
        case.validate_response(response, checks=[schemathesis.checks.not_a_server_error])
    except (AssertionError, BaseExceptionGroup) as exc:  # a failure group naming the check
        return f"{case.operation.label}: {response.status_code} {str(exc)[:800]}"
    return None


@pytest.mark.e2e
def test_no_operation_answers_a_server_error_on_the_running_server(
    web_server: Any, team: Any, make_key: Any
) -> None:
    _seed_inventory(team)
    key = str(make_key(team, *Scope.values, FEEDS_WRITE))
    headers = {"X-Api-Key": key}
    schema = _served_schema(web_server.url, key)
    session = requests.Session()
    problems: list[str] = []
    started = time.perf_counter()

    def call(case: Any) -> Any:
        stats.SCHEMATHESIS["requests"] += 1
        stats.SCHEMATHESIS["operations"].add(case.operation.label)
        return case.call(base_url=web_server.url, session=session, headers=headers,
                         timeout=60)

    for result in schema.get_all_operations():
        operation = result.ok()

        # Values that fit the schema, and values that break it (wrong types, out of range,
        # odd characters): both must be answered, never a 500.
        @given(case=operation.as_strategy(GenerationMode.POSITIVE)
               | operation.as_strategy(GenerationMode.NEGATIVE))
        @_SETTINGS
        def run(case: Any) -> None:
            problem = _server_errors(call(case), case)
            if problem:
                problems.append(problem)

        run()

    class Workflow(schema.as_state_machine()):  # type: ignore[misc]
        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"base_url": web_server.url, "session": session, "headers": headers,
                    "timeout": 60}

        def call(self, case: Any, **kwargs: Any) -> Any:
            stats.SCHEMATHESIS["requests"] += 1
            stats.SCHEMATHESIS["operations"].add(case.operation.label)
            return case.call(**kwargs)

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            problem = _server_errors(response, case)
            if problem:
                problems.append(f"(stateful) {problem}")

    Workflow.run(settings=settings(
        max_examples=STATEFUL_RUNS,
        stateful_step_count=STATEFUL_STEPS,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    ))
    stats.SCHEMATHESIS["seconds"] += time.perf_counter() - started
    log = web_server.log_path.read_text(errors="replace")
    assert not problems, "\n\n".join(dict.fromkeys(problems)) + "\n\n" + log[-6000:]
