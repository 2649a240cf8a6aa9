"""Jira's writes: the team's settings (`config`) and the issues findings open (`delivery`).

`jira_deliver` is the entry point the notification webhooks' worker calls for a webhook of
format "jira"; it is re-exported here as `trustrank.jira.services.jira_deliver`."""

from trustrank.jira.services.delivery import jira_deliver

__all__ = ["jira_deliver"]
