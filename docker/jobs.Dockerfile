# syntax=docker/dockerfile:1
# lakepubsub Spark maintenance jobs (compact, truncate, gc, batch-consume).
# Two targets, built from the repository root:
#   docker build -f docker/jobs.Dockerfile --target emr-serverless -t lakepubsub-jobs:emr .
#     EMR Serverless custom image for release emr-spark-8.0.0 (Spark 4.0.2).
#   docker build -f docker/jobs.Dockerfile --target standalone -t lakepubsub-jobs .
#     Spark 4.2 (pyspark==4.2.0) in local mode, for Kubernetes or ECS:
#     docker run lakepubsub-jobs compact --lake s3://bucket/lake
# terraform/README.md explains why there are two.

FROM python:3.11.14-slim-bookworm AS build
WORKDIR /src
COPY . .
# requirements-nospark.txt: every runtime dependency except pyspark and
# delta-spark, for the EMR image, whose Spark (and its Python side) is EMR's own.
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /dist . \
 && python -c 'import re, tomllib; deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]; print(*(d for d in deps if re.split("[^A-Za-z0-9._-]", d)[0] not in ("pyspark", "delta-spark")), sep=chr(10))' \
    > /dist/requirements-nospark.txt


# The release label is the version: EMR publishes each label's base image
# under `latest` and patches it in place; CI records the digest it built from.
#checkov:skip=CKV_DOCKER_7:The EMR release label in the repository name is the version; EMR patches each label's image under latest and CI records the digest.
# hadolint ignore=DL3007
FROM public.ecr.aws/emr-serverless/spark/emr-spark-8.0.0:latest AS emr-serverless
# Packages install as root; the stage returns to hadoop below.
USER 0
# Amazon Linux 2023 repositories are locked to the base image's release, which
# fixes these package versions.
# hadolint ignore=DL3041
RUN dnf install -y python3.11 python3.11-pip \
 && dnf clean all \
 && rm -rf /var/cache/dnf
COPY --from=build /dist /tmp/dist
RUN python3.11 -m pip install --no-cache-dir -r /tmp/dist/requirements-nospark.txt \
 && python3.11 -m pip install --no-cache-dir --no-deps /tmp/dist/*.whl \
 && rm -rf /tmp/dist
COPY --from=build /src/jobs/ /opt/lakepubsub/jobs/
ENV PYSPARK_PYTHON=/usr/bin/python3.11
# EMR Serverless requires the image's user to be hadoop:hadoop by name (its
# image validation checks exactly that) and keeps the base image's entrypoint.
# hadolint ignore=DL3066
USER hadoop:hadoop
# Batch job: its exit code is its health.
HEALTHCHECK NONE


FROM python:3.11.14-slim-bookworm AS standalone
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    SPARK_LOCAL_DIRS=/tmp/spark \
    PYSPARK_PYTHON=python
# Debian stable's security updates replace JRE versions; pinning one would
# break the build at the next update.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 lakepubsub \
 && useradd --system --uid 10001 --gid lakepubsub --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin lakepubsub
COPY --from=build /dist /tmp/dist
RUN pip install --no-cache-dir /tmp/dist/*.whl \
 && rm -rf /tmp/dist \
 && lakepubsub jobs run --help > /dev/null
COPY --from=build /src/jobs/ /opt/lakepubsub/jobs/
USER 10001:10001
WORKDIR /tmp
HEALTHCHECK NONE
ENTRYPOINT ["lakepubsub", "jobs", "run"]
CMD ["compact"]
