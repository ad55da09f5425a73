# toolrelay server image. Workspaces are mounted under /workspaces.
FROM python:3.11-slim-bookworm

# git, ripgrep and patch back the built-in tools; bubblewrap sandboxes every process
# the server starts (it needs seccomp/AppArmor relaxed: docker-compose.yml, README).
RUN apt-get update \
    && apt-get install -y --no-install-recommends git ripgrep patch bubblewrap \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /app
COPY pyproject.toml README.md constraints.txt ./
COPY protocol ./protocol
COPY adapters ./adapters
COPY dispatcher ./dispatcher
COPY eventbus ./eventbus
COPY server ./server
COPY clients ./clients
# The versions the tests passed with (constraints.txt); every extra but the
# terminal UI, which is a client: code intelligence, OpenTelemetry, Redis.
RUN pip install --no-cache-dir -c constraints.txt pip \
    && pip install --no-cache-dir -c constraints.txt --build-constraint constraints.txt \
        ".[code,otel,redis]"

# uid/gid 1000: mounted workspaces must be writable by this uid (README, "Run it in Docker").
RUN groupadd --gid 1000 toolrelay \
    && useradd --create-home --uid 1000 --gid 1000 toolrelay && mkdir -p /data /workspaces \
    && chown toolrelay:toolrelay /data /workspaces
USER toolrelay
VOLUME ["/data"]
EXPOSE 8765
# 200 while the server accepts work; 503 (unhealthy) while its storage fails or it stops.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8765/healthz', timeout=3)"]
# Inside a container the server must listen on all interfaces; the published
# port in docker-compose.yml binds it to the host's loopback only.
CMD ["toolrelay", "serve", "--host", "0.0.0.0", "--port", "8765", "--data-dir", "/data"]
