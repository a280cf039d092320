"""The query routes: the front router, the route table and its escalation policies."""
