from tests.harness import server_factory  # noqa: F401
