# cfdb-worker image: built the way the README builds it, run as a non-root
# user on a slim Debian with only the libraries the binary links.

FROM debian:bookworm AS build
# make drives the build; scripts/install-deps.sh (run by make) installs the rest.
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends make \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN make build CMAKE_FLAGS=-DCFDB_BUILD_TESTS=OFF

FROM debian:bookworm-slim
# The shared libraries `ldd build/cfdb-worker` lists, as bookworm packages
# (the build stage links the same versions). Packages rather than copied .so
# files: apt pulls in their own dependencies (e.g. libgrpc29) and the image
# takes Debian's security updates on rebuild.
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libabsl20220623 libspdlog1.10 libfmt9 \
      libre2-9 libc-ares2 libssl3 zlib1g \
 && rm -rf /var/lib/apt/lists/*
# A fixed non-root uid. /run/cfdb-worker/tls is where the ECS task writes the
# TLS PEMs (see cloudformation/workers.yml); only the worker can read it.
RUN groupadd --system --gid 10001 cfdb-worker \
 && useradd --system --uid 10001 --gid 10001 --no-create-home \
      --shell /usr/sbin/nologin cfdb-worker \
 && install -d -o 10001 -g 10001 -m 0700 /run/cfdb-worker/tls
COPY --from=build /src/build/cfdb-worker /usr/local/bin/cfdb-worker
USER 10001:10001
ENV CFDB_WORKER_HOST=0.0.0.0
EXPOSE 50051
# SIGTERM starts the worker's drain (CFDB_WORKER_SIGNAL_GRACE_SECONDS). Run
# with an init (ECS InitProcessEnabled, or `docker run --init`) so that job
# processes orphaned by the worker are reaped.
STOPSIGNAL SIGTERM
ENTRYPOINT ["cfdb-worker", "serve"]
