from tests.fakes.fixtures import fake_provider, fake_provider_server  # noqa: F401
