# syntax=docker/dockerfile:1
#
# One image with all eight Whisper services; the command names the service
# (`docker run whisper gateway`, `command: ["router"]` in compose, `args` in Kubernetes).
# One image rather than eight: the services share one library and one build, so a
# single build and one tag keep every service of a release at the same version, and a
# node pulls one set of layers however many services it runs.
#
# Build: docker build -t whisper:dev .   (what compose.yaml runs by default; tag releases
# with their version: docs/operations.md, "Container image")

ARG SWIFT_IMAGE=swift:6.3.1-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim
# Where the executables come from: `build` (compiled below) or `prebuilt` (what
# scripts/build-release made elsewhere, in the build context's `prebuilt/`; used by
# scripts/compose-test, whose machine has no Swift image). Either way the same script
# made them and the same runtime stage below runs them.
ARG EXECUTABLES=build

FROM ${SWIFT_IMAGE} AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends libhiredis-dev libsodium-dev libjemalloc-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Dependencies first, so that a change of our sources does not fetch them again. A
# Package.resolved in the build context (a build outside this project's package mirrors
# locks the whole graph with one: docs/operations.md, "Container image") is used when
# present.
COPY Package.swift Package.resolved* ./
RUN swift package resolve
COPY . .
# The same script CI runs (scripts/check-image checks what it makes): release, the Swift
# runtime and Foundation linked in (--static-swift-stdlib), stripped, into /out. The
# runtime image then needs no Swift toolchain, only the C libraries named below, which
# scripts/check-image compares with what `ldd` says the executables need.
RUN scripts/build-release /out

FROM ${RUNTIME_IMAGE} AS prebuilt
COPY prebuilt/ /out/

FROM ${EXECUTABLES} AS executables

FROM ${RUNTIME_IMAGE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends libhiredis0.14 libsodium23 libjemalloc2 libstdc++6 zlib1g ca-certificates tzdata curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin whisper
COPY --from=executables /out/ /usr/local/bin/
COPY deploy/whisper-healthcheck /usr/local/bin/whisper-healthcheck
# Listen on every interface inside the container; the ports are the defaults of
# docs/configuration.md. Nothing is written to disk: the root filesystem may be read-only.
ENV GATEWAY_HTTP_HOST=0.0.0.0 AUTH_HTTP_HOST=0.0.0.0 ROUTER_HTTP_HOST=0.0.0.0 PUSH_SENDER_HTTP_HOST=0.0.0.0 \
    ATTACHMENT_SIGNER_HTTP_HOST=0.0.0.0 TURN_CRED_HTTP_HOST=0.0.0.0 ADMIN_HTTP_HOST=0.0.0.0 GC_WORKER_HTTP_HOST=0.0.0.0 \
    AUTH_INTERNAL_HTTP_HOST=0.0.0.0 TURN_CRED_INTERNAL_HTTP_HOST=0.0.0.0
EXPOSE 8080 8081 8082 8083 8084 8085 8086 8087 8091 8095
USER 10001:10001
# Asks the running service's own /health (whichever it is: the script reads PID 1).
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 CMD ["whisper-healthcheck"]
STOPSIGNAL SIGTERM
CMD ["gateway"]
