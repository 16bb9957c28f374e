# overlaylab: one image for peers, the controller, Locust and the analysis.
#   make image                                   (BASE_IMAGE=python:3.11-slim-bookworm)
#   make image BASE_IMAGE=overlaylab-base:bookworm   (scripts/debootstrap_base.sh: no registry)
# The base needs python3.11 with venv; Java 17 is installed for Spark when it is missing. Python
# packages come from build/wheels, which `make image` fills with `pip download` on the host
# (pinned by constraints.txt), so the build itself needs no PyPI access or proxy certificates.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

RUN if ! command -v java >/dev/null; then \
      apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
 && (command -v python3.11 || ln -s "$(command -v python3)" /usr/local/bin/python3.11) \
 && python3.11 -m venv /opt/venv

ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1 SPARK_LOCAL_IP=127.0.0.1 PYTHONPATH=/app
WORKDIR /app

# Dependencies first (a layer that survives code changes).
COPY build/requirements.txt constraints.txt ./
COPY build/wheels /tmp/wheels
RUN pip install --no-cache-dir --quiet --no-index --find-links /tmp/wheels -c constraints.txt -r requirements.txt \
 && rm -rf /tmp/wheels

COPY proto proto
COPY node node
COPY controller controller
COPY analysis analysis
COPY loadgen loadgen
COPY experiments experiments
# The code runs from /app (PYTHONPATH); `overlaylab` is the CLI, as on the host.
RUN printf '#!/bin/sh\nexec python -m controller.cli.main "$@"\n' > /opt/venv/bin/overlaylab && chmod +x /opt/venv/bin/overlaylab \
 && useradd --uid 10001 --create-home overlaylab
USER 10001
ENTRYPOINT ["overlaylab"]
CMD ["--help"]
