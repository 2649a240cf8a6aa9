from tests.jira.fake_jira import fake_jira  # noqa: F401 - a fixture
