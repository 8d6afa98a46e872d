# cfdb-worker image: built the way the README builds it, run as a non-root
# user on a slim Debian with only the libraries the binary links.

FROM debian:bookworm AS build
# make drives the build; scripts/install-deps.sh (run by make) installs the rest.
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends make \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Only what building takes (no test packages), and a Release binary: no
# debug info in the runtime layer.
RUN make build BUILD_TYPE=Release CMAKE_FLAGS=-DCFDB_BUILD_TESTS=OFF

FROM debian:bookworm-slim
# The shared libraries `ldd build/cfdb-worker` lists, as bookworm packages
# (the build stage links the same versions). Packages rather than copied .so
# files: apt pulls in their own dependencies (e.g. libgrpc29) and the image
# takes Debian's security updates on rebuild.
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      libgrpc++1.51 libprotobuf32 libabsl20220623 libspdlog1.10 libfmt9 \
      libre2-9 libc-ares2 libssl3 zlib1g libcap2 libcurl4 \
      libprometheus-cpp-core1.0 libcivetweb1 \
 && rm -rf /var/lib/apt/lists/*
# Two fixed users: the worker (10001), which reads the TLS material, and
# the jobs' (20000, and one more uid per job running at once), which may
# reach neither it nor the worker. The container starts as root only so the
# worker can become cfdb-worker keeping CAP_SETUID, CAP_SETGID and CAP_KILL
# (docs/SECURITY.md); it writes the PEMs ECS hands it to a directory only it
# may read.
RUN groupadd --system --gid 10001 cfdb-worker \
 && useradd --system --uid 10001 --gid 10001 --no-create-home \
      --shell /usr/sbin/nologin cfdb-worker \
 && groupadd --system --gid 20000 cfdb-job \
 && useradd --system --uid 20000 --gid 20000 --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin cfdb-job
# No setuid or setgid program (su, passwd, mount, ...): the worker needs none,
# and a job must not find one to exec.
RUN find / -xdev -type f -perm /6000 -exec chmod ug-s {} +
COPY --from=build /src/build/cfdb-worker /usr/local/bin/cfdb-worker
USER 0:0
ENV CFDB_WORKER_USER=cfdb-worker CFDB_WORKER_JOB_USER=cfdb-job
ENV CFDB_WORKER_HOST=0.0.0.0
EXPOSE 50051
# SIGTERM starts the worker's drain (CFDB_WORKER_SIGNAL_GRACE_SECONDS). Run
# with an init (ECS InitProcessEnabled, or `docker run --init`) so that job
# processes orphaned by the worker are reaped.
STOPSIGNAL SIGTERM
ENTRYPOINT ["cfdb-worker", "serve"]
