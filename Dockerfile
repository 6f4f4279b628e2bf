# syntax=docker/dockerfile:1
# Two images from one build (docs/architecture.md#components):
#   docker build --target operator -t ghcr.io/pi-dispatch/operator:<version> .
#   docker build --target job      -t ghcr.io/pi-dispatch/job:<version> .
# Both run as uid/gid 65532 (the chart's securityContext.runAsUser), never as root.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
# pi 0.73.1 runs on Node 20; same Debian release as the Python base, so the copied binary finds its libraries.
ARG NODE_IMAGE=node:20-bookworm-slim

# -- build: the pidispatch package into a self-contained virtualenv ------------------------------------------
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
# A C compiler for the one C module (the compaction search, setup.py); only in this stage. The official image
# carries Python's headers; a base with Debian's python3 adds python3-dev here (e2e/images/build.sh does).
ARG BUILD_PACKAGES="gcc libc6-dev"
RUN apt-get update \
 && apt-get install -y --no-install-recommends ${BUILD_PACKAGES} \
 && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/pidispatch
WORKDIR /src
# Only what `pip install .` reads: pyproject.toml (which names README.md), setup.py and the package.
COPY pyproject.toml setup.py README.md ./
COPY operator/ operator/
RUN /opt/pidispatch/bin/pip install . \
 && /opt/pidispatch/bin/pidispatch --help >/dev/null \
 && /opt/pidispatch/bin/python -c "from pidispatch.transcript import compaction; assert compaction.NATIVE_SEARCH"

# -- common runtime: the virtualenv (same path as in `build`) and the non-root user -------------------------
FROM ${PYTHON_IMAGE} AS runtime
RUN groupadd --gid 65532 pidispatch \
 && useradd --uid 65532 --gid 65532 --home-dir /home/pidispatch --create-home --shell /usr/sbin/nologin pidispatch
COPY --from=build /opt/pidispatch /opt/pidispatch
ENV PATH=/opt/pidispatch/bin:$PATH \
    HOME=/home/pidispatch \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

# -- operator: kopf; the chart runs it with a read-only root filesystem and an emptyDir at /tmp -------------
FROM runtime AS operator
USER 65532:65532
WORKDIR /home/pidispatch
EXPOSE 8080 9090
ENTRYPOINT ["pidispatch"]
CMD ["operator"]

# -- job: the runner and pi --------------------------------------------------------------------------------
FROM ${NODE_IMAGE} AS node

FROM runtime AS job
# git for the workspace (the runner's clone, the agent's commits and pushes) and the GitHub CLI, pinned:
# Debian bookworm's gh, the version the e2e tests run against the local forge.
ARG GH_VERSION=2.23.0+dfsg1-1
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates git "gh=${GH_VERSION}" \
 && rm -rf /var/lib/apt/lists/* \
 && gh --version
COPY --from=node /usr/local/bin/node /usr/local/bin/node
COPY --from=node /usr/local/lib/node_modules/npm /usr/local/lib/node_modules/npm
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
 && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \
 && node --version && npm --version
# The pi the Triggers declare (run.piVersion), installed exactly as CI installs it (`make pi`): `npm ci` of
# e2e/pi's package.json and package-lock.json, so the image runs the very dependency tree the tests ran.
# The runner checks the version it actually runs.
ARG PI_VERSION=0.73.1
COPY e2e/pi/package.json e2e/pi/package-lock.json /opt/pi/
RUN npm ci --prefix /opt/pi --omit=dev --no-audit --no-fund \
 && npm cache clean --force \
 && ln -s /opt/pi/node_modules/.bin/pi /usr/local/bin/pi \
 && installed="$(node -p "require('/opt/pi/node_modules/@mariozechner/pi-coding-agent/package.json').version")" \
 && test "$installed" = "$PI_VERSION" \
 && command -v pi
LABEL dev.pi-dispatch.pi-version="${PI_VERSION}"
# pi refuses a session whose header cwd does not exist: the working directory is always /workspace.
RUN install -d -o 65532 -g 65532 -m 0755 /workspace
# The commands capability (a Trigger's run.command): the trusted pi extensions the runner loads with -e, never
# the repository's. Empty here, owned by root and read-only to the job: an image FROM this one COPYs its
# extensions in. A command no extension here registers is refused before pi runs the job.
RUN install -d -m 0755 /opt/pi-dispatch/extensions
ENV PI_COMMAND_EXTENSIONS_DIR=/opt/pi-dispatch/extensions
USER 65532:65532
WORKDIR /workspace
ENTRYPOINT ["pidispatch", "runner"]
