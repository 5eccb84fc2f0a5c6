# syntax=docker/dockerfile:1
# lakepubsub API: `lakepubsub serve` on port 8085.
# Build from the repository root: docker build -f docker/api.Dockerfile -t lakepubsub-api .

FROM python:3.11.14-slim-bookworm AS build
WORKDIR /src
COPY . .
# The API never starts Spark, and the image carries no JVM, so pyspark and
# delta-spark (~400 MB) are left out; every other runtime dependency comes
# from pyproject.toml unchanged.
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /dist . \
 && python -c 'import re, tomllib; deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]; print(*(d for d in deps if re.split("[^A-Za-z0-9._-]", d)[0] not in ("pyspark", "delta-spark")), sep=chr(10))' \
    > /dist/requirements.txt

FROM python:3.11.14-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    LAKEPUBSUB_ALLOW_ANONYMOUS=false
RUN groupadd --system --gid 10001 lakepubsub \
 && useradd --system --uid 10001 --gid lakepubsub --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin lakepubsub
COPY --from=build /dist /tmp/dist
RUN pip install --no-cache-dir -r /tmp/dist/requirements.txt \
 && pip install --no-cache-dir --no-deps /tmp/dist/*.whl \
 && rm -rf /tmp/dist \
 && lakepubsub serve --help > /dev/null
USER 10001:10001
WORKDIR /tmp
EXPOSE 8085
# Liveness only: /healthz touches no storage, so a slow lake does not get the
# container killed (the load balancer's /readyz check handles that).
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8085/healthz', timeout=2).status == 200 else 1)"]
ENTRYPOINT ["lakepubsub"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8085"]
