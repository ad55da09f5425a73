"""Local fakes of outside services for tests (real servers on 127.0.0.1, no network)."""
