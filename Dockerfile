# syntax=docker/dockerfile:1.7
#
# callgate's container image: the `callgate` binary on a distroless base, the
# shipped configuration at /etc/callgate/callgate.toml, running as an unprivileged
# user. The voice prompts are compiled into the binary.
#
#   docker build -t callgate:0.1.0 .
#   docker run --rm -p 8080:8080 -e CALLGATE_DATABASE_URL='postgres://…' callgate:0.1.0
#
# Every key of the configuration can be overridden by the environment
# (CALLGATE_<SECTION>__<KEY>, e.g. CALLGATE_STT__URL), or replace the whole file by
# mounting your own at /etc/callgate/callgate.toml. deploy/README.md has the rest.
#
# PID 1 is callgate itself (exec-form ENTRYPOINT, no shell): SIGTERM reaches it
# directly and starts the drain; it exits 0 once the last call has ended. It starts
# no child processes, so no init (tini) is needed to reap them.
# crates/cli/tests/signals/image.rs runs this file's ENTRYPOINT + CMD, with the
# files it copies, against a throwaway Postgres and the simulators.

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-slim-bookworm AS build
# The slim image has gcc and libc6-dev but no cmake or make: the opus crate builds
# its bundled libopus with cmake (aws-lc and ring need only the C compiler).
# Versions pinned to bookworm's.
RUN apt-get update \
    && apt-get install -y --no-install-recommends cmake=3.25.1-1 make=4.3-4.1 \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The registry and the target directory are build caches, not layers: the binary is
# copied out of the cache before the step ends.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p callgate-cli \
    && install -D -m 0755 target/release/callgate /out/callgate

# glibc and libgcc, nothing else: no shell, no package manager. TLS roots are compiled
# into the binary (webpki-roots), so no CA bundle is needed either.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /out/callgate /usr/local/bin/callgate
COPY config/callgate.toml /etc/callgate/callgate.toml
# A numeric user (no /etc/passwd entry needed), so Kubernetes' runAsNonRoot can
# verify it; the same UID/GID the manifests set.
USER 10001:10001
# HTTP/WebSocket (media streams, partner streams, /healthz, /readyz, /metrics,
# /admin); the operator surface when server.admin_listen is set (the
# Kubernetes manifests use 9090); the HAProxy agent; SIP over UDP and TCP; the
# RTP/RTCP range of [sip] rtp_port_min..rtp_port_max. SIP, the agent and
# admin_listen are off in the shipped file.
EXPOSE 8080/tcp 9090/tcp 9777/tcp 5060/udp 5060/tcp 20000-29999/udp
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/callgate"]
CMD ["serve", "--config", "/etc/callgate/callgate.toml"]
